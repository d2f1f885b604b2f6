"""Verdicts that decide, on every GPU of a node through one live daemon (issue 51): the reference workload on every
GPU at once, round after round until each GPU's output tok/s against its siblings' decides a 10 % effect or the run's
budget ends; first with the last GPU under a matmul loop (it must be flagged), then the healthy GPUs run after run
(none may be).

    python bench/gpu_decide.py [--healthy 5] [--budget-s 60] [--deadline-s 250] [--no-slowed]

Starts once the daemon is ready: a cold run (one round, not judged), the slowed run, then healthy runs until
--healthy are done or --deadline-s from the start would be passed (--no-slowed: the cold run and healthy runs alone,
a call that continues an earlier one's healthy runs). With no GPU it runs as a smoke test on two CPU
workers and the tiny model (the second slowed by the fault hook). Prints a line per round and a table last; writes
decide.json under --out (each run's rounds, ratios, intervals and verdicts, and the round-to-round spread of the
healthy runs' log ratios, which docs/benchmarks/every-gpu.md turns into the rule's power at 0.85x)."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import REFERENCE, ROOT, environment, wait, wait_ready
from gpu_fleet import SLOW, cuda_gpus


def verdicts(run: dict) -> list[dict]:
    parts = run.get("parts") or {}
    return [{"gpu": v["gpu"], "ratio": v["relative_throughput"], "low": v["throughput_ci_low"],
             "high": v["throughput_ci_high"], "verdict": (v.get("decision") or {}).get("verdict"),
             "outlier": v["outlier"], "rounds": (v.get("decision") or {}).get("rounds"),
             "round_ratios": v.get("round_ratios", [])} for v in parts.get("verdicts", [])]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=REFERENCE["model"])
    parser.add_argument("--healthy", type=int, default=5)
    parser.add_argument("--budget-s", type=float, default=60.0, help="each run's decide.budget_s")
    parser.add_argument("--deadline-s", type=float, default=250.0, help="no run starts past this from the start")
    parser.add_argument("--no-slowed", action="store_true", help="no slowed run: the cold run, then healthy runs")
    parser.add_argument("--port", type=int, default=18433)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout's TERM still prints what was measured
    begun = time.perf_counter()
    gpus = cuda_gpus()
    cpu = not gpus
    work = Path(tempfile.mkdtemp(prefix="benchd-decide-"))
    env = {**os.environ, "BENCHD_PORT": str(args.port), "BENCHD_MODEL": "tiny" if cpu else args.model,
           "BENCHD_DEVICE": "cpu" if cpu else "cuda", "BENCHD_DTYPE": "float32" if cpu else "bfloat16",
           "BENCHD_DEVICES": "cpu:0,cpu:1" if cpu else "all", "BENCHD_DEFAULT_SCHEDULE": "false",
           "BENCHD_DATABASE_URL": f"sqlite:///{work}/benchd.db", "BENCHD_SPOOL_DIR": str(work / "spool"),
           "BENCHD_WORKERS__LOG_DIR": str(work / "workers"), "BENCHD_WORKERS__START_TIMEOUT_S": "900",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    spec = {k: v for k, v in REFERENCE.items() if k not in ("model", "device", "dtype")}
    if cpu:  # the smoke test: small requests, the second worker slowed by the fault hook in the slowed run
        spec["workload"] = {**spec["workload"], "arrivals": {"profile": "concurrent", "concurrency": 8},
                            "stop": {"requests": 16}, "prompt_tokens": {"dist": "fixed", "value": 16},
                            "output_tokens": {"dist": "fixed", "value": 16}}
        spec["transformers"] = {"block_size": 16, "num_blocks": 256, "max_batch_tokens": 256}
        env.update({"BENCHD_FAULTS__WORKLOAD": "decide-slowed", "BENCHD_FAULTS__ACTION": "slow",
                    "BENCHD_FAULTS__DELAY_S": "0.01", "BENCHD_FAULTS__DEVICES": '["cpu:1"]'})
    http = httpx.Client(base_url=f"http://127.0.0.1:{args.port}", timeout=60)
    log = open(work / "daemon.log", "w")  # noqa: SIM115 (the daemon's, for its life)
    daemon = subprocess.Popen([sys.executable, "-m", "benchd.cli", "serve"], env=env, cwd=ROOT, stdout=log,
                              stderr=log)
    results: list[dict] = []

    def once(title: str, body: dict) -> dict:
        started = time.perf_counter()
        response = http.post("/runs", json={**spec, **body, "placement": "every_gpu"})
        if response.status_code != 202:
            raise SystemExit(f"{title}: {response.status_code} {response.text}")
        run_id = response.json()["id"]
        done = wait(lambda: (r := http.get(f"/runs/{run_id}").json())["status"] in ("succeeded", "failed",
                                                                                     "cancelled") and r, 900, 0.5)
        found = {"title": title, "status": done["status"], "error": done.get("error"),
                 "rounds": (done.get("parts") or {}).get("rounds"), "wall_s": round(time.perf_counter() - started, 1),
                 "whole_tok_s": [round(s["output_tokens_per_s"]) for s in done.get("summary") or []],
                 "verdicts": verdicts(done)}
        results.append(found)
        print(f"== {title}: {done['status']} {done.get('error') or ''} rounds {found['rounds']} in "
              f"{found['wall_s']} s; whole tok/s by round {found['whole_tok_s']}", flush=True)
        for v in found["verdicts"]:
            print(f"   gpu {v['gpu']}: {v['ratio']} [{v['low']}, {v['high']}] {v['verdict']} "
                  f"outlier={v['outlier']} rounds {[round(r, 3) for r in v['round_ratios']]}", flush=True)
        return found

    decide = {"budget_s": args.budget_s}
    try:
        wait_ready(http, daemon)
        print(f"ready in {time.perf_counter() - begun:.1f} s; {environment()}", flush=True)
        once("cold (one round, not judged)", {"name": "decide-cold", "decide": {"max_rounds": 1}})
        victim = gpus[-1] if gpus and not args.no_slowed else None
        load = subprocess.Popen([sys.executable, "-c", SLOW, "120"], env={**os.environ,
                                                                         "CUDA_VISIBLE_DEVICES": victim}) \
            if victim else None
        try:
            if load is not None:
                time.sleep(8)  # its context up and the loop running
            if not args.no_slowed:
                once("slowed: the last GPU under an 8192² bf16 matmul loop", {"name": "decide-slowed",
                                                                             "decide": decide})
        finally:
            if load is not None:
                load.kill()
        for i in range(args.healthy):
            last = results[-1]["wall_s"]
            if time.perf_counter() - begun + last > args.deadline_s:
                print(f"-- {i} healthy runs: the next would pass --deadline-s", flush=True)
                break
            once(f"healthy {i + 1}", {"name": "decide-healthy", "decide": decide})
    finally:
        daemon.terminate()
        daemon.wait(120)
        healthy = [math.log(r) for run in results if run["title"].startswith("healthy") for v in run["verdicts"][:1]
                   for r in v["round_ratios"]]
        spread = statistics.stdev(healthy) if len(healthy) > 2 else None
        Path(args.out, "decide.json").write_text(json.dumps({"runs": results, "healthy_log_ratio_sd": spread},
                                                            indent=1))
        print("\nrun | rounds | wall s | GPU: ratio [interval] verdict (flagged)")
        for run in results:
            cells = "; ".join(f"{v['gpu']}: {v['ratio'] and round(v['ratio'], 3)} [{v['low'] and round(v['low'], 3)},"
                              f" {v['high'] and round(v['high'], 3)}] {v['verdict']}{' FLAGGED' * v['outlier']}"
                              for v in run["verdicts"])
            print(f"{run['title']} | {run['rounds']} | {run['wall_s']} | {cells}")
        print(f"healthy rounds' sd of ln(ratio): {spread}; daemon log {work / 'daemon.log'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
