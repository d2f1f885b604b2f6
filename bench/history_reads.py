"""What do concurrent anonymous history reads cost the daemon? A live daemon over a store of 100,000 runs of one
workload: 80 clients at once ask for /history/{workload}?limit=10000, in rounds (each round another limit, so that
no answer kept from an earlier round serves it, then one round again the same: the kept answer); the daemon's RSS
warm and idle (after one small read), its peak during each round and after, the answers' statuses and seconds.

    python bench/history_reads.py [--runs 100000] [--clients 80] [--rounds 3] [--before CHECKOUT]

--before: another checkout's root (main's: `git archive main | tar -x -C DIR`), its daemon measured first over a
copy of the same store, so the before and after figures come from one invocation. Runs on the project's 2-core CPU
machine (no GPU); prints a table and writes history_reads.json under --out."""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from common import ROOT, free_port, wait

sys.path.insert(0, str(ROOT))  # tests.helpers: the store filled in bulk

WORKLOAD = "filled"


def start(work: Path, port: int, src: Path) -> subprocess.Popen:
    env = {**os.environ, "BENCHD_DATABASE_URL": f"sqlite:///{work}/benchd.db", "BENCHD_PORT": str(port),
           "BENCHD_DEVICE": "cpu", "BENCHD_DEFAULT_SCHEDULE": "false", "BENCHD_SPOOL_DIR": str(work / "spool"),
           "BENCHD_WORKERS__LOG_DIR": str(work / "workers"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
    log = open(work / "daemon.log", "w")  # noqa: SIM115 (the daemon's for its life)
    daemon = subprocess.Popen([sys.executable, "-m", "benchd.cli", "serve"], env=env, cwd=src.parent, stdout=log,
                              stderr=log)
    wait(lambda: httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200, 180, 0.2)
    return daemon


def flood(url: str, pid: int, clients: int, limit: int) -> dict:
    import psutil

    process = psutil.Process(pid)
    before = process.memory_info().rss
    peak, done = [before], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak.append(process.memory_info().rss)
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.perf_counter()

    def read(_: int) -> tuple[int, float]:
        begun = time.perf_counter()
        try:
            status = httpx.get(f"{url}/history/{WORKLOAD}", params={"limit": limit}, timeout=600).status_code
        except httpx.HTTPError:
            status = 0
        return status, time.perf_counter() - begun

    try:
        with concurrent.futures.ThreadPoolExecutor(clients) as pool:
            answers = list(pool.map(read, range(clients)))
    finally:
        done.set()
        sampler.join()
    wall = time.perf_counter() - started
    time.sleep(2.0)
    statuses = [status for status, _ in answers]
    return {"limit": limit, "before_mb": before / 2**20, "peak_mb": max(peak) / 2**20,
            "after_mb": process.memory_info().rss / 2**20, "wall_s": wall,
            "statuses": {str(s): statuses.count(s) for s in sorted(set(statuses))},
            "slowest_200_s": max((s for status, s in answers if status == 200), default=None)}


def measure(name: str, src: Path, work: Path, store: Path, args) -> dict:
    work.mkdir(parents=True)
    shutil.copy(store, work / "benchd.db")
    port = free_port()
    daemon = start(work, port, src)
    url = f"http://127.0.0.1:{port}"
    try:
        httpx.get(f"{url}/history/{WORKLOAD}", params={"limit": 100}, timeout=120).raise_for_status()  # imports
        time.sleep(2.0)
        import psutil

        idle = psutil.Process(daemon.pid).memory_info().rss / 2**20
        limits = [10_000 - i for i in range(args.rounds)] + [10_000]  # the last: an answer kept, where one is
        rounds = []
        for limit in limits:
            rounds.append(flood(url, daemon.pid, args.clients, limit))
            print(name, json.dumps(rounds[-1]), flush=True)
    finally:
        daemon.terminate()
        daemon.wait(60)
    return {"checkout": name, "idle_mb": idle, "rounds": rounds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=80)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of another limit each, then one repeated")
    parser.add_argument("--before", type=Path)
    parser.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "runs")))
    args = parser.parse_args()
    from tests.helpers import fill_store

    work = Path(tempfile.mkdtemp(prefix="benchd-history-reads-"))
    (work / "store").mkdir()
    fill_store(f"sqlite:///{work}/store/benchd.db", work / "store" / "spool", args.runs, WORKLOAD, node="bench",
               step_every=1_000)
    checkouts = ([("before", args.before.resolve() / "src")] if args.before else []) + [("this", ROOT / "src")]
    rows = [measure(name, src, work / name, work / "store" / "benchd.db", args) for name, src in checkouts]
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "history_reads.json").write_text(json.dumps(rows, indent=2))
    print(f"\n{args.clients} clients at once on /history/{WORKLOAD}?limit=L, {args.runs:,} runs stored, "
          f"{os.cpu_count()} CPUs")
    print("| checkout | idle MB | limit | statuses | slowest 200 s | round s | RSS before → peak → after MB |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        for r in row["rounds"]:
            slowest = f"{r['slowest_200_s']:.1f}" if r["slowest_200_s"] is not None else "–"
            print(f"| {row['checkout']} | {row['idle_mb']:.0f} | {r['limit']} | {r['statuses']} | {slowest} | "
                  f"{r['wall_s']:.1f} | {r['before_mb']:.0f} → {r['peak_mb']:.0f} → {r['after_mb']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
