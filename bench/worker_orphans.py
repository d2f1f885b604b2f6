"""A daemon killed while its worker hangs holding the interpreter (a stuck driver call: the worker's own exit timer
cannot run): what the orphan keeps holding, and the next daemon on the same worker directory ending it before it
starts its own worker.

    python bench/worker_orphans.py [--device cpu|cuda] [--model tiny] [--grace-s 12]

Prints the hung worker's memory (on CUDA: NVML's per-process GPU memory; on a CPU: its resident set) right after
the kill and again --grace-s later (past the worker's own exit timer, which a held interpreter stops), then the next
daemon's start → ready, whether the orphan is gone, what the new worker holds, and an ordinary run's status and KV
cache (which transformers sizes from the device's free memory)."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import ROOT, wait

from benchd.supervisor import orphans


def held_bytes(pid: int, device: str) -> int | None:
    """What the process holds: GPU memory on CUDA (NVML), its resident set on a CPU; None when it is gone."""
    if orphans.live(pid) is None:
        return None
    if device.startswith("cuda"):
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return sum(p.usedGpuMemory or 0 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid == pid)
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


def gib(n: int | None) -> str:
    return "gone" if n is None else f"{n / 2**30:.2f} GiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--grace-s", type=float, default=12.0, help="wait after the kill (the worker's own exit "
                        "timer is 10 s)")
    parser.add_argument("--port", type=int, default=18441)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="benchd-orphans-"))
    env = {**os.environ, "BENCHD_PORT": str(args.port), "BENCHD_MODEL": args.model, "BENCHD_DEVICE": args.device,
           "BENCHD_DEFAULT_SCHEDULE": "false", "BENCHD_DATABASE_URL": f"sqlite:///{work}/benchd.db",
           "BENCHD_SPOOL_DIR": str(work / "spool"), "BENCHD_WORKERS__LOG_DIR": str(work / "workers"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    faults = {"BENCHD_FAULTS__WORKLOAD": "hung", "BENCHD_FAULTS__ACTION": "hang", "BENCHD_FAULTS__AFTER_S": "1"}
    cache = {"block_size": 16, "num_blocks": 256, "max_batch_tokens": 256} if args.device == "cpu" else {}
    fixed = {"dist": "fixed", "value": 32}
    body = {"transformers": cache,
            "workload": {"arrivals": {"profile": "concurrent", "concurrency": 4}, "stop": {"duration_s": 5},
                         "prompt_tokens": fixed, "output_tokens": fixed}}
    http = httpx.Client(base_url=f"http://127.0.0.1:{args.port}", timeout=60)

    def serve(extra: dict, name: str) -> tuple[subprocess.Popen, float]:
        started = time.perf_counter()
        log = open(work / f"{name}.log", "w")
        daemon = subprocess.Popen([sys.executable, "-m", "benchd.cli", "serve"], env={**env, **extra}, cwd=ROOT,
                                  stdout=log, stderr=log)
        wait(lambda: http.get("/readyz").status_code == 200, 900, 0.05)
        return daemon, time.perf_counter() - started

    first, ready_s = serve(faults, "first")
    print(f"first daemon start → ready: {ready_s:.2f} s", flush=True)
    try:
        run_id = http.post("/runs", json={**body, "name": "hung"}).json()["id"]
        wait(lambda: http.get(f"/runs/{run_id}").json()["status"] == "running", 600)
        (hung,) = [w["pid"] for w in http.get("/readyz").json()["workers"]]
        time.sleep(3.0)  # the fault fired 1 s in
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    print(f"daemon SIGKILLed; its hung worker {hung} holds {gib(held_bytes(hung, args.device))}", flush=True)
    time.sleep(args.grace_s)
    print(f"{args.grace_s:g} s later it holds {gib(held_bytes(hung, args.device))}", flush=True)

    second, ready_s = serve({}, "second")
    try:
        (worker,) = http.get("/readyz").json()["workers"]
        print(f"next daemon start → ready: {ready_s:.2f} s; the orphan {hung}: "
              f"{'still running' if held_bytes(hung, args.device) is not None else 'ended'}; the new worker "
              f"{worker['pid']} holds {gib(held_bytes(worker['pid'], args.device))}", flush=True)
        after = http.post("/runs", json={**body, "name": "after"}).json()["id"]
        wait(lambda: http.get(f"/runs/{after}").json()["status"] not in ("queued", "running"), 600)
        run = http.get(f"/runs/{after}").json()
        engine = ((run.get("metadata") or {}).get("engine_settings") or {}).get("continuous_batching") or {}
        print(f"an ordinary run on the new worker: {run['status']}, "
              f"{run['summary'][0]['output_tokens_per_s']:.0f} output tok/s, its KV cache "
              f"{engine.get('num_blocks')} blocks of {engine.get('block_size')} tokens", flush=True)
    finally:
        second.terminate()
        second.wait(60)
    print(f"logs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
