"""How long GET /compare takes to answer (docs/benchmarks.md; issue 53 measured 16–34 s for 6 runs against 6 and
34.7 s for a run against itself): a daemon (`benchd serve`, CPU) over a store holding 12 runs of 300 requests of
128 output tokens each, written as the daemon writes them (stamps shaped like the tiny model's on this machine),
then 6 runs against 6, 1 against 1 (which reads the stored runs of its stack) and a comparison of runs with
themselves (no verdict), each asked `--repeats` times; the first answer (the daemon's first comparison imports what
it needs) is printed apart. Writes nothing but a temporary directory.

    python bench/compare_speed.py                  # this checkout
    PYTHONPATH=/tmp/main/src python bench/compare_speed.py   # an earlier version's src/, the same measurement
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if "PYTHONPATH" not in os.environ:  # else the version it names, for this process and the daemon alike
    sys.path.insert(0, str(ROOT / "src"))

SPEC = {"name": "speed", "model": "tiny", "device": "cpu", "dtype": "float32",
        "transformers": {"block_size": 16, "num_blocks": 256, "max_batch_tokens": 256},
        "workload": {"arrivals": {"profile": "concurrent", "concurrency": 8}, "stop": {"requests": 300},
                     "prompt_tokens": {"dist": "fixed", "value": 128}, "output_tokens": {"dist": "fixed", "value": 128}}}


def write_runs(url: str, spool: Path, runs: int, requests: int, tokens: int) -> list[str]:
    """runs runs of `requests` requests of `tokens` tokens each, stored through the daemon's own operations."""
    from benchd.measure.records import RequestRecord
    from benchd.measure.summary import summarize
    from benchd.store.database import Store
    from benchd.store.operations import FinishRun, Requests, stage_row

    store = Store(url, spool_dir=spool, node="bench")
    store.start()
    assert store.wait_ready(60)
    rng = np.random.default_rng(0)
    ids = []
    for n in range(runs):
        run_id = f"speed{n:02d}"
        level = float(np.exp(rng.normal(0, 0.05)))
        records = []
        for i in range(requests):
            start = 0.05 * i
            gaps = 0.004 * level * rng.lognormal(0, 0.2, tokens - 1)
            stamps = (start + 0.02 * level * rng.lognormal(0, 0.3) + np.concatenate([[0.0], np.cumsum(gaps)]))
            records.append(RequestRecord(i, f"q{i}", False, 128, tokens, start, start, start, stamps.tolist(),
                                         [1] * tokens, finished_s=float(stamps[-1])))
        summary = summarize("concurrent=8", "succeeded", records)
        store.create_run(run_id, SPEC)
        store.spool.submit(Requests(run_id, [{"stage_index": 0, "gpu": "", **r.to_row("concurrent=8", 0.0)}
                                             for r in records]).as_json())
        metadata = {"device": "cpu", "device_name": "x86_64", "model": "tiny", "engine_run": n + 2,
                    "benchd_version": "bench", "python_version": "3", "torch_version": "2", "transformers_version": "5",
                    "host": "bench", "started_at": "2026-11-28T00:00:00+00:00"}
        store.spool.submit(FinishRun(run_id, {
            "status": "succeeded", "error": None, "error_stage": None, "finished_at": "2026-11-28T00:00:10+00:00",
            "summary": [summary.model_dump(mode="json")], "run_metadata": metadata, "timeline": None, "valid": True,
            "model": "tiny", "label": None, "hardware": None, "energy_per_token_j": None, "parts": None,
            "capacity_requests_per_s": None}, [stage_row(0, "", summary)], []).as_json())
        ids.append(run_id)
    assert store.flush(120)
    store.close()
    return ids


def ready(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url).status_code == 200
    except httpx.TransportError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6, help="runs a side")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--port", type=int, default=18653)
    args = parser.parse_args()
    import httpx

    work = Path(tempfile.mkdtemp(prefix="benchd-compare-speed-"))
    url = f"sqlite:///{work}/benchd.db"
    started = time.perf_counter()
    ids = write_runs(url, work / "spool", 2 * args.runs, args.requests, args.tokens)
    print(f"stored {len(ids)} runs of {args.requests} requests × {args.tokens} tokens in "
          f"{time.perf_counter() - started:.1f} s", flush=True)
    env = {**os.environ, "BENCHD_DATABASE_URL": url, "BENCHD_PORT": str(args.port), "BENCHD_DEVICE": "cpu",
           "BENCHD_DEFAULT_SCHEDULE": "false", "BENCHD_SPOOL_DIR": str(work / "spool"), "BENCHD_NODE_NAME": "bench",
           "BENCHD_WORKERS__LOG_DIR": str(work / "workers"), "BENCHD_READS__COMPARE_TIMEOUT_S": "120"}
    daemon = subprocess.Popen([sys.executable, "-m", "benchd.cli", "serve"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=open(work / "serve.log", "w"))  # noqa: SIM115
    base = f"http://127.0.0.1:{args.port}"
    try:
        deadline = time.perf_counter() + 300
        while not ready(f"{base}/readyz"):
            if time.perf_counter() > deadline or daemon.poll() is not None:
                raise SystemExit(f"the daemon did not start: {(work / 'serve.log').read_text()[-2000:]}")
            time.sleep(0.5)
        a, b = ",".join(ids[:args.runs]), ",".join(ids[args.runs:])
        cases = [(f"{args.runs} runs against {args.runs}", {"a": a, "b": b}),
                 ("1 run against 1", {"a": ids[0], "b": ids[1]}),
                 (f"{args.runs} runs against themselves (no verdict)", {"a": a, "b": a})]
        print(f"GET /compare, {args.repeats} times each (s): first answer, then the rest; CPU: {os.cpu_count()} cores",
              flush=True)
        for name, params in cases:
            times, verdicts = [], None
            for _ in range(args.repeats + 1):
                t = time.perf_counter()
                answer = httpx.get(f"{base}/compare", params=params, timeout=300)
                times.append(time.perf_counter() - t)
                assert answer.status_code == 200, answer.text
                verdicts = sorted({m["verdict"] for m in answer.json()["metrics"]})
            rest = times[1:]
            print(f"  {name}: first {times[0]:.2f}, then median {np.median(rest):.2f} max {max(rest):.2f} "
                  f"({', '.join(verdicts)})", flush=True)
    finally:
        daemon.terminate()
        daemon.wait(60)


if __name__ == "__main__":
    main()
