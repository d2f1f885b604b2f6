"""How long a worker takes to start, and how soon after a worker dies mid-run the next run is measuring: a live
daemon with a fault injected into one workload one second into it (SIGABRT, or a device-side assert: a real
out-of-bounds index on the GPU, which leaves the CUDA context unusable), then an ordinary run at once.

    python bench/worker_recovery.py [--device cpu|cuda] [--model tiny] [--repeats 3] [--fault abort|device_assert]

Prints, per repeat: daemon start → ready (the worker spawned, torch imported, the model loaded), the worker's own
death → replacement answering (from /readyz), and the failed run's end → the next run's first request row."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import ROOT, wait



def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fault", choices=("abort", "device_assert"), default="abort")
    parser.add_argument("--port", type=int, default=18431)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="benchd-recovery-"))
    env = {**os.environ, "BENCHD_PORT": str(args.port), "BENCHD_MODEL": args.model, "BENCHD_DEVICE": args.device,
           "BENCHD_DEFAULT_SCHEDULE": "false", "BENCHD_DATABASE_URL": f"sqlite:///{work}/benchd.db",
           "BENCHD_SPOOL_DIR": str(work / "spool"), "BENCHD_WORKERS__LOG_DIR": str(work / "workers"),
           "BENCHD_FAULTS__WORKLOAD": "crash", "BENCHD_FAULTS__ACTION": args.fault, "BENCHD_FAULTS__AFTER_S": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    cache = {"block_size": 16, "num_blocks": 256, "max_batch_tokens": 256} if args.device == "cpu" else {}
    body = {"transformers": cache, "workload": {"arrivals": {"profile": "concurrent", "concurrency": 4},
                                                "stop": {"duration_s": 20}, "prompt_tokens": {"dist": "fixed", "value": 32},
                                                "output_tokens": {"dist": "fixed", "value": 32}}}
    url = f"http://127.0.0.1:{args.port}"
    http = httpx.Client(base_url=url, timeout=60)
    started = time.perf_counter()
    log = open(work / "daemon.log", "w")
    daemon = subprocess.Popen([sys.executable, "-m", "benchd.cli", "serve"], env=env, cwd=ROOT, stdout=log, stderr=log)
    rows = []
    try:
        wait(lambda: http.get("/readyz").status_code == 200, 900, 0.05)
        start_to_ready = time.perf_counter() - started
        print(f"daemon start → ready (worker spawned, model loaded): {start_to_ready:.2f} s", flush=True)
        for repeat in range(args.repeats):
            crash = http.post("/runs", json={**body, "name": "crash"}).json()["id"]
            wait(lambda: http.get(f"/runs/{crash}").json()["status"] in ("failed", "succeeded"), 300)
            failed_at = time.perf_counter()
            after = http.post("/runs", json={**body, "name": "after",
                                              "workload": {**body["workload"], "stop": {"requests": 8}}}).json()["id"]
            wait(lambda: http.get(f"/runs/{after}/requests").json(), 300)
            measuring = time.perf_counter() - failed_at
            wait(lambda: http.get(f"/runs/{after}").json()["status"] in ("failed", "succeeded"), 300)
            ready = http.get("/readyz").json()
            rows.append({"repeat": repeat, "restart_s": ready["last_restart_s"], "crash_to_next_measuring_s": measuring,
                         "error": (http.get(f"/runs/{crash}").json()["error"] or "none: the run succeeded").splitlines()[0],
                         "next_status": http.get(f"/runs/{after}").json()["status"]})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        daemon.terminate()
        daemon.wait(120)
    Path(args.out, f"worker_recovery_{args.fault}.json").write_text(json.dumps({"start_to_ready_s": start_to_ready,
                                                                                "runs": rows}))
    print(f"\n{args.model} on {args.device}, {args.fault}: start → ready {start_to_ready:.2f} s; worker death → replacement ready "
          f"median {statistics.median(r['restart_s'] for r in rows):.2f} s; failed run → next run measuring median "
          f"{statistics.median(r['crash_to_next_measuring_s'] for r in rows):.2f} s over {len(rows)} crashes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
