"""Every GPU of the node through one live daemon: the reference workload on every GPU at once, the same with one GPU
slowed by a concurrent matmul load (which the comparison of siblings must flag, and only it), and tensor parallelism
(a model on one GPU, then sharded over two).

    python bench/gpu_fleet.py [--model llama-3.2-1b] [--tp-model llama-3.1-8b] [--phases every_gpu slowed tp]

On a 2-GPU host, about 6 minutes. With no GPU it runs as a smoke test on two CPU workers and the tiny model
(BENCHD_DEVICES=cpu:0,cpu:1, small requests). Prints, per phase and GPU: output tok/s, TTFT p99, ITL p50, and the
verdicts (relative throughput with its bootstrap interval, outlier or not); writes fleet.json under --out."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import ROOT, wait, wait_ready

# A matmul loop on one GPU for the slowed phase: the load a noisy neighbour puts on a shared GPU.
SLOW = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
"""


def cuda_gpus() -> list[str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def row(name: str, stage: dict) -> dict:
    return {"part": name, "requests": stage["requests"], "errors": stage["errors"],
            "output_tok_s": round(stage["output_tokens_per_s"], 1),
            "ttft_p99_ms": round(stage["ttft_s"]["p99"] * 1e3, 1), "itl_p50_ms": round(stage["itl_s"]["p50"] * 1e3, 2)}


def show(title: str, run: dict) -> dict:
    print(f"\n== {title}: {run['status']} {run.get('error') or ''}", flush=True)
    rows = [row("whole", run["summary"][0])] if run.get("summary") else []
    parts = run.get("parts") or {}
    for gpu, part in sorted((parts.get("gpus") or {}).items()):
        rows.append(row(f"gpu {gpu}", part["stages"][0]))
    for r in rows:
        print("  " + "  ".join(f"{k}={v}" for k, v in r.items()), flush=True)
    for v in parts.get("verdicts", []):
        print(f"  verdict gpu {v['gpu']}: relative throughput {v['relative_throughput']} "
              f"[{v.get('throughput_ci_low')}, {v.get('throughput_ci_high')}], outlier {v['outlier']}", flush=True)
    return {"title": title, "status": run["status"], "error": run.get("error"), "rows": rows,
            "verdicts": parts.get("verdicts", []), "worker": (run.get("metadata") or {}).get("engine_settings")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3.2-1b")
    parser.add_argument("--tp-model", default="llama-3.1-8b")
    parser.add_argument("--phases", nargs="+", default=["every_gpu", "slowed", "tp"])
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=256, help="prompt and output tokens of each request")
    parser.add_argument("--repeats", type=int, default=2,
                        help="runs of each phase in a row: the first after a load is cold (CUDA graphs, allocator)")
    parser.add_argument("--port", type=int, default=18432)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    gpus = cuda_gpus()
    cpu = not gpus
    if cpu:  # the smoke test: two CPU workers, the tiny model, small requests
        args.model = args.tp_model = "tiny"
        args.requests, args.tokens = min(args.requests, 16), min(args.tokens, 16)
    work = Path(tempfile.mkdtemp(prefix="benchd-fleet-"))
    env = {**os.environ, "BENCHD_PORT": str(args.port), "BENCHD_MODEL": args.model,
           "BENCHD_DEVICE": "cpu" if cpu else "cuda", "BENCHD_DTYPE": "float32" if cpu else "bfloat16",
           "BENCHD_DEVICES": "cpu:0,cpu:1" if cpu else "all", "BENCHD_DEFAULT_SCHEDULE": "false",
           "BENCHD_DATABASE_URL": f"sqlite:///{work}/benchd.db", "BENCHD_SPOOL_DIR": str(work / "spool"),
           "BENCHD_WORKERS__LOG_DIR": str(work / "workers"), "BENCHD_WORKERS__START_TIMEOUT_S": "900",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    workload = {"arrivals": {"profile": "concurrent", "concurrency": args.requests},
                "stop": {"requests": args.requests},
                "prompt_tokens": {"dist": "fixed", "value": args.tokens},
                "output_tokens": {"dist": "fixed", "value": args.tokens}}
    cache = {"transformers": {"block_size": 16, "num_blocks": 256, "max_batch_tokens": 256}} if cpu else {}
    http = httpx.Client(base_url=f"http://127.0.0.1:{args.port}", timeout=60)
    log = open(work / "daemon.log", "w")
    daemon = subprocess.Popen([sys.executable, "-m", "benchd.cli", "serve"], env=env, cwd=ROOT, stdout=log,
                              stderr=log)
    results = []

    def run(title: str, body: dict) -> None:
        for repeat in range(args.repeats):
            once(f"{title} [{'cold' if repeat == 0 else f'warm {repeat}'}]", body)

    def once(title: str, body: dict) -> dict:
        started = time.perf_counter()
        response = http.post("/runs", json={"workload": workload, **cache, **body})
        if response.status_code != 202:
            raise SystemExit(f"{title}: {response.status_code} {response.text}")
        run_id = response.json()["id"]
        done = wait(lambda: (r := http.get(f"/runs/{run_id}").json())["status"] in ("succeeded", "failed",
                                                                                     "cancelled") and r, 900, 0.5)
        results.append({**show(title, done), "wall_s": round(time.perf_counter() - started, 1)})
        return done

    try:
        started = time.perf_counter()
        wait_ready(http, daemon)
        workers = http.get("/readyz").json()["workers"]
        print(f"ready in {time.perf_counter() - started:.1f} s: "
              f"{', '.join(w['device'] + ' (gpu ' + w['gpu'] + ')' for w in workers)}", flush=True)
        if "every_gpu" in args.phases:
            run("every_gpu", {"name": "fleet", "placement": "every_gpu"})
        if "slowed" in args.phases:
            victim = gpus[-1] if gpus else None
            load = None
            if victim is not None:
                load = subprocess.Popen([sys.executable, "-c", SLOW, "600"],
                                        env={**os.environ, "CUDA_VISIBLE_DEVICES": victim})
                time.sleep(10)  # its context up and the loop running
            try:
                body = {"name": "fleet", "placement": "every_gpu", "label": f"slowed {victim or 'none'}"}
                run(f"every_gpu with {victim or 'no GPU'} under a matmul load", body)
            finally:
                if load is not None:
                    load.kill()
        if "tp" in args.phases:
            tp_device = "cpu:0" if cpu else "cuda:0"
            dtype = "float32" if cpu else "bfloat16"
            for tp in (1, 2):
                run(f"{args.tp_model} tensor_parallel={tp}", {"name": f"tp{tp}", "model": args.tp_model,
                                                               "dtype": dtype, "device": tp_device,
                                                               "tensor_parallel": tp})
    finally:
        daemon.terminate()
        daemon.wait(120)
        Path(args.out, "fleet.json").write_text(json.dumps(results, indent=1))
        print(f"\nwrote {Path(args.out, 'fleet.json')}; daemon log {work / 'daemon.log'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
