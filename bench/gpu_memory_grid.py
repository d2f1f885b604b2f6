"""benchd's defaults across the workloads users run next, through a live daemon: open loops doubling until the
verdict says over-saturated, long prompts and outputs, closed loops of 1 to 512. Every run must either succeed (or
be cancelled at its time limit, past saturation) or be refused at admission; none may run out of memory. /metrics
is scraped every second as Prometheus would; each row sets the plan's peak beside the measured ones.

    python bench/gpu_memory_grid.py --model llama-3.2-1b [--cases issue open long closed] [--seconds 10]
    python bench/gpu_memory_grid.py --smoke        # the tiny model on the CPU: checks the script

Columns: planned = the worker's plan (weights, KV cache, masks, graph pool, CUDA reserve; engine settings'
memory_plan); reserved = torch's allocator peak (RunMetadata.peak_reserved_bytes); device = NVML's memory used,
the highest of the run's samples (hardware summary) and of the scrapes; restarts = benchd_engine_restarts_total.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from common import ROOT, environment, wait_ready

GIB = 2**30
TERMINAL = ("succeeded", "failed", "cancelled", "interrupted")
ISSUE_SPEC = {  # issue 31's spec, as it gave it
    "arrivals": {"profile": "sweep", "over": "poisson", "values": [2, 8, 32]},
    "stop": {"duration_s": 30}, "warmup": {"requests": 4},
    "prompt_tokens": {"dist": "fixed", "value": 256}, "output_tokens": {"dist": "fixed", "value": 128},
}


def fixed(n: int) -> dict:
    return {"dist": "fixed", "value": n}


class Scraper:
    """GET /metrics every second: the device's memory in use, and the engines restarted."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=10)
        self.used_peak = 0.0
        self.restarts = 0.0
        self.scrapes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            try:
                page = self.http.get("/metrics").text
            except httpx.HTTPError:
                continue
            self.scrapes += 1
            used = [float(v) for v in re.findall(r"^benchd_gpu_memory_used_bytes\{[^}]*\} (\S+)$", page, re.M)]
            self.used_peak = max([self.used_peak, *used])
            self.restarts = sum(float(v) for v in re.findall(r"^benchd_engine_restarts_total\{[^}]*\} (\S+)$",
                                                              page, re.M))

    def window(self) -> None:
        self.used_peak = 0.0

    def stop(self) -> None:
        self._stop.set()


def cases(model: str, smoke: bool, seconds: float) -> list[tuple[str, dict]]:
    """(title, workload) in order; an open loop named "open@R" is doubled by main() until over-saturated."""
    if smoke:
        return [("closed 4 × 16/8", {"arrivals": {"profile": "concurrent", "concurrency": 4},
                                     "stop": {"duration_s": 2}, "prompt_tokens": fixed(16), "output_tokens": fixed(8)}),
                ("open@16", {"prompt_tokens": fixed(16), "output_tokens": fixed(8)})]
    big = "8b" in model
    closed = [1, 32, 256] if big else [1, 32, 512]
    long_c = 16 if big else 64
    return [
        *([] if big else [("issue 31's spec", ISSUE_SPEC)]),
        (f"open@{2 if big else 8}", {"prompt_tokens": fixed(512), "output_tokens": fixed(256)}),
        (f"closed {long_c} × 4096/1024", {"arrivals": {"profile": "concurrent", "concurrency": long_c},
                                          "stop": {"duration_s": seconds * 2}, "prompt_tokens": fixed(4096),
                                          "output_tokens": fixed(1024)}),
        (f"closed {closed} × 128/64", {"arrivals": {"profile": "sweep", "over": "concurrent", "values": closed},
                                       "stop": {"duration_s": seconds}, "prompt_tokens": fixed(128),
                                       "output_tokens": fixed(64)}),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["llama-3.2-1b", "llama-3.1-8b"],
                        help="in turn, on one daemon (the first is its own)")
    parser.add_argument("--seconds", type=float, default=10.0, help="a stage's length (long cases: twice)")
    parser.add_argument("--grace", type=float, default=15.0, help="past its stages' time a run is cancelled")
    parser.add_argument("--max-rate", type=float, default=128.0)
    parser.add_argument("--only", nargs="*", help="cases whose title contains one of these")
    parser.add_argument("--port", type=int, default=18433)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    if args.smoke:
        args.models, args.seconds, args.max_rate = ["tiny"], 2.0, 32.0
    print(environment(), flush=True)
    work = Path(tempfile.mkdtemp(prefix="benchd-grid-"))
    env = {**os.environ, "BENCHD_PORT": str(args.port), "BENCHD_MODEL": args.models[0],
           "BENCHD_DEVICE": "cpu" if args.smoke else "cuda", "BENCHD_DEFAULT_SCHEDULE": "false",
           "BENCHD_DATABASE_URL": f"sqlite:///{work}/benchd.db", "BENCHD_SPOOL_DIR": str(work / "spool"),
           "BENCHD_WORKERS__LOG_DIR": str(work / "workers"), "BENCHD_HARDWARE_INTERVAL_S": "0.5",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    extra = {"transformers": {"block_size": 32, "num_blocks": 256, "max_batch_tokens": 256}} if args.smoke else {}
    url = f"http://127.0.0.1:{args.port}"
    http = httpx.Client(base_url=url, timeout=60)
    log = open(work / "daemon.log", "w")
    daemon = subprocess.Popen([sys.executable, "-m", "benchd.cli", "serve"], env=env, cwd=ROOT, stdout=log,
                              stderr=log)
    rows: list[dict] = []
    scraper = None
    try:
        wait_ready(http, daemon)
        scraper = Scraper(url)
        for model in args.models:
            for title, workload in cases(model, args.smoke, args.seconds):
                if args.only and not any(word in title for word in args.only):
                    continue
                if title.startswith("open@"):  # double the rate until the verdict says over-saturated
                    rate = float(title[5:])
                    while rate <= args.max_rate:
                        body = {**workload, "arrivals": {"profile": "poisson", "rate": rate},
                                "stop": {"duration_s": args.seconds}}
                        row = once(http, scraper, args, model, f"open {rate:g}/s × "
                                   f"{workload['prompt_tokens']['value']}/{workload['output_tokens']['value']}",
                                   body, extra)
                        rows.append(row)
                        save(args, rows)
                        if row["status"] in ("refused", "failed") or row["oversaturated"]:
                            break
                        rate *= 2
                    continue
                rows.append(once(http, scraper, args, model, title, workload, extra))
                save(args, rows)
    finally:
        if scraper is not None:
            scraper.stop()
        daemon.terminate()
        daemon.wait(120)
    print(f"\n{len(rows)} runs, {scraper.scrapes if scraper else 0} scrapes")
    print("| model | run | status | planned | reserved peak | device peak | restarts | stages: verdict, req/s, TTFT p50, "
          "ITL p50 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['model']} | {r['title']} | {r['status']} | {gb(r['planned'])} | {gb(r['reserved'])} | {gb(r['device'])} | "
              f"{r['restarts']:g} | {'; '.join(r['stages'])} |")
    bad = [r for r in rows if r["status"] == "failed" or r["restarts"]]
    print("no run ran out of memory or failed" if not bad else f"FAILED: {[r['title'] for r in bad]}")
    save(args, rows)
    return 1 if bad else 0


def save(args, rows: list[dict]) -> None:
    """After every run: a command stopped at its time limit keeps what it measured."""
    Path(args.out, "memory_grid.json").write_text(json.dumps({"environment": environment(), "rows": rows}, indent=1))


def gb(n: float | None) -> str:
    return "–" if n is None else f"{n / GIB:.1f} GiB"


def once(http: httpx.Client, scraper: Scraper, args, model: str, title: str, workload: dict, extra: dict) -> dict:
    body = {"name": "grid", "model": model, "workload": workload, **extra}
    restarts_before = scraper.restarts
    scraper.window()
    response = http.post("/runs", json=body)
    if response.status_code != 202:
        print(f"{title}: refused {response.status_code} {response.text[:400]}", flush=True)
        return {"model": model, "title": title, "status": "refused", "error": response.text[:400], "planned": None,
                "reserved": None, "device": None, "restarts": 0, "stages": [], "oversaturated": False}
    run_id = response.json()["id"]
    stages = len(workload["arrivals"].get("values", [0])) if "arrivals" in workload else 1
    limit = stages * (args.seconds * (2 if "4096" in title else 1)) + args.grace + 60  # + the engine's warm-up
    started = time.perf_counter()
    while (run := http.get(f"/runs/{run_id}").json())["status"] not in TERMINAL:
        if time.perf_counter() - started > limit:
            http.delete(f"/runs/{run_id}")  # past saturation the queue drains for minutes: what ran is kept
            limit = float("inf")
        time.sleep(0.5)
    meta = run.get("metadata") or {}
    plan = (meta.get("engine_settings") or {}).get("memory_plan") or {}
    hardware = run.get("hardware") or {}
    device_peak = max(scraper.used_peak, hardware.get("gpu_memory_peak_bytes") or 0) or None
    summaries = run.get("summary") or []
    stages_out = [f"{s['stage']} {'valid' if s.get('valid') else 'INVALID'} {s.get('requests_per_s', 0):.2f} "
                  f"{(s['ttft_s'].get('p50') or 0) * 1e3:.0f}/{(s['itl_s'].get('p50') or 0) * 1e3:.1f} ms"
                  for s in summaries]
    # the daemon's own verdict (on by default). Not completions over the stage's length: that window holds the drain
    # too, so an 8B's 12 s requests read as over-saturated at a rate it keeps up with
    oversaturated = any(any(i.get("check") == "oversaturated" for i in s.get("invalid", [])) for s in summaries)
    row = {"model": model, "title": title, "run_id": run_id, "status": run["status"], "error": (run.get("error") or "")[:600],
           "planned": plan.get("total_bytes"), "plan": plan, "reserved": meta.get("peak_reserved_bytes"),
           "allocated": meta.get("peak_memory_bytes"), "device": device_peak,
           "restarts": scraper.restarts - restarts_before, "stages": stages_out, "oversaturated": oversaturated,
           "summaries": summaries, "wall_s": round(time.perf_counter() - started, 1)}
    print(f"{title}: {run['status']} in {row['wall_s']} s; planned {gb(row['planned'])}, reserved "
          f"{gb(row['reserved'])}, device {gb(row['device'])}; {stages_out} {row['error'][:300]}", flush=True)
    return row


if __name__ == "__main__":
    sys.exit(main())
