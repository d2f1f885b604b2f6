"""What benchd costs a node: the daemon's and its workers' CPU and memory, idle and during a run.

Starts `benchd serve` (no default schedule, a SQLite store in a scratch directory), waits until it is ready, then
samples every process of its tree once a second: first idle (the hardware sampler and the workers' heartbeats
only), then while a run executes. CPU is the processes' user+system time over wall time, in cores; memory is the
resident set (RSS, counting shared libraries once per process) and the proportional set (PSS, each shared page
split among the processes mapping it: summed over the tree, the memory it holds, which a pod's memory limit must
cover; page cache aside). Prints one table per phase, per process kind (daemon, worker, other: multiprocessing's
resource tracker) and in all, then the same as one JSON line. GPU memory is not counted here (the run's hardware
summary and benchd_gpu_memory_used_bytes have it).

    python bench/node_cost.py                           # CPU, the tiny model: this project's CI machine
    python bench/node_cost.py --idle-s 10 --run-s 10    # a smoke test of the script (about a minute)
    PYTHONPATH=/tmp/site:src python3 bench/node_cost.py --device cuda --model llama-3.2-1b --rate 8 \
        --placement every_gpu                           # a GPU host: a worker per GPU, every GPU busy
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent


def kind(process: psutil.Process) -> str:
    """worker: a benchd worker process (multiprocessing's spawn child); other: its helpers (the resource tracker)."""
    try:
        command = " ".join(process.cmdline())
    except psutil.Error:
        return "other"
    return "other" if "resource_tracker" in command else "worker"


def tree(root: psutil.Process) -> dict[int, tuple[str, psutil.Process]]:
    """pid → (kind, process): the daemon itself, and every descendant."""
    found = {root.pid: ("daemon", root)}
    for child in root.children(recursive=True):
        found[child.pid] = (kind(child), child)
    return found


def sample(processes: dict[int, tuple[str, psutil.Process]]) -> dict[int, tuple[str, float, int, int]]:
    """pid → (kind, CPU seconds so far, RSS bytes, PSS bytes)."""
    out = {}
    for pid, (kind, process) in processes.items():
        try:
            with process.oneshot():
                cpu = process.cpu_times()
                memory = process.memory_full_info()
            out[pid] = (kind, cpu.user + cpu.system, memory.rss, getattr(memory, "pss", memory.rss))
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return out


def measure(root: psutil.Process, seconds: float, until=None) -> list[dict[str, dict[str, float]]]:
    """One entry a second: per kind (and "all") the cores used over that second and the memory at its end."""
    rows = []
    previous, then = sample(tree(root)), time.monotonic()
    deadline = then + seconds
    while time.monotonic() < deadline and not (until and until()):
        time.sleep(1.0)
        current, now = sample(tree(root)), time.monotonic()
        row: dict[str, dict[str, float]] = {}
        for pid, (kind, cpu, rss, pss) in current.items():
            spent = cpu - previous[pid][1] if pid in previous else 0.0  # a new process: counted from its 2nd second
            for key in (kind, "all"):
                entry = row.setdefault(key, {"cores": 0.0, "rss": 0, "pss": 0})
                entry["cores"] += spent / (now - then)
                entry["rss"] += rss
                entry["pss"] += pss
        rows.append(row)
        previous, then = current, now
    return rows


def report(title: str, rows: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Prints the phase's table; returns it: per kind, CPU mean and max in cores, RSS and PSS max in MiB."""
    print(f"\n{title} ({len(rows)} one-second samples)")
    print(f"{'processes':<10}{'CPU mean':>10}{'CPU max':>10}{'RSS max':>12}{'PSS max':>12}")
    table = {}
    for name in ("daemon", "worker", "other", "all"):
        found = [row[name] for row in rows if name in row]
        if not found:
            continue
        cores = [f["cores"] for f in found]
        table[name] = {"cpu_mean_cores": round(statistics.mean(cores), 4), "cpu_max_cores": round(max(cores), 4),
                       "rss_max_mib": round(max(f["rss"] for f in found) / 2**20),
                       "pss_max_mib": round(max(f["pss"] for f in found) / 2**20)}
        print(f"{name:<10}{table[name]['cpu_mean_cores']:>9.3f}c{table[name]['cpu_max_cores']:>9.3f}c"
              f"{table[name]['rss_max_mib']:>8} MiB{table[name]['pss_max_mib']:>8} MiB")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--idle-s", type=float, default=60.0)
    parser.add_argument("--run-s", type=float, default=60.0, help="the run's measured duration")
    parser.add_argument("--rate", type=float, default=4.0, help="Poisson arrivals per second during the run")
    parser.add_argument("--placement", choices=("one", "every_gpu"), default="one",
                        help="every_gpu: the run on every worker at once (a node whose GPUs are all busy)")
    parser.add_argument("--devices", default="all", help="BENCHD_DEVICES: all (a worker per GPU) or a JSON list")
    parser.add_argument("--port", type=int, default=18471)
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="benchd-node-cost-"))
    env = {**os.environ, "BENCHD_PORT": str(args.port), "BENCHD_DEVICE": args.device, "BENCHD_MODEL": args.model,
           "BENCHD_DEVICES": args.devices,
           "BENCHD_DEFAULT_SCHEDULE": "false", "BENCHD_DATABASE_URL": f"sqlite:///{scratch}/benchd.db",
           "BENCHD_SPOOL_DIR": str(scratch / "spool"), "BENCHD_WORKERS__LOG_DIR": str(scratch / "workers"),
           # the daemon runs in the scratch directory: a relative PYTHONPATH (src) would no longer find benchd
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent / "src"),
                                          *(str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(
                                              os.pathsep) if p)])}
    log = open(scratch / "serve.log", "w")
    daemon = subprocess.Popen([sys.executable, "-m", "benchd.cli", "serve"], env=env, cwd=scratch, stdout=log,
                              stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{args.port}"
    succeeded = False
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"benchd did not become ready; see {scratch / 'serve.log'}")
            time.sleep(0.5)
        root = psutil.Process(daemon.pid)
        time.sleep(5)  # past the start's own work
        print(f"benchd on {args.device} ({args.model}), {psutil.cpu_count()} cores, "
              f"{psutil.virtual_memory().total / 2**30:.0f} GiB; hardware sampler every 1 s")
        idle = report(f"idle for {args.idle_s:.0f} s", measure(root, args.idle_s))

        spec = {"name": "node-cost", "model": args.model, "device": args.device, "placement": args.placement,
                "workload": {"arrivals": {"profile": "poisson", "rate": args.rate},
                             "stop": {"duration_s": args.run_s}, "warmup": {"requests": 2},
                             "prompt_tokens": {"dist": "uniform", "min": 16, "max": 64},
                             "output_tokens": {"dist": "uniform", "min": 16, "max": 48}}}
        if args.device == "cpu":
            spec["transformers"] = {"block_size": 32, "num_blocks": 256, "max_batch_tokens": 512}
        created = httpx.post(f"{url}/runs", json=spec, timeout=10)
        created.raise_for_status()
        run_id = created.json()["id"]

        def finished() -> bool:
            status = httpx.get(f"{url}/runs/{run_id}", timeout=10).json()["status"]
            return status not in ("queued", "running")

        rows = measure(root, args.run_s + 120, until=finished)
        run = httpx.get(f"{url}/runs/{run_id}", timeout=10).json()
        stage = (run.get("summary") or [{}])[0]
        during = report(f"during a run ({args.placement}): Poisson {args.rate}/s for {args.run_s:.0f} s, "
                        f"{run['status']}, {stage.get('requests', '?')} requests, "
                        f"{stage.get('output_tokens_per_s') or 0:.0f} output tok/s", rows)
        print(json.dumps({"device": args.device, "model": args.model, "placement": args.placement,
                          "run_id": run_id, "status": run["status"], "idle": idle, "run": during}))
        if run["status"] != "succeeded":
            raise SystemExit(f"the run {run['status']}: {run.get('error')}; see {scratch / 'serve.log'}")
        succeeded = True
    finally:
        daemon.terminate()
        daemon.wait(60)
        log.close()
    if succeeded:  # else the log stays, for the reason
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
