"""Do scrapes and probes wait on clients? A live daemon over a filled store (runs of one workload, its change points
found, schedules), 200 anonymous closed-loop clients loading GET /runs?limit=20, /history/{workload} and
/schedules in turn, and beside them a scraper of their own: GET /metrics every 100 ms on a kept connection (as
Prometheus asks) and GET /readyz every 100 ms on a new connection each (as the kubelet probes); their latency
p50/p99/max, and what the clients were served. Idle first (no clients), then loaded.

    python bench/probes_under_load.py [--clients 200] [--seconds 30] [--runs 2000] [--probe-port auto|none|N]

--probe-port: where the scraper asks. auto: the daemon's probe listener (BENCHD_HTTP__PROBE_PORT, given a free port)
where this checkout has one, else the main port (a checkout before issue 48); none: always the main port.
Runs on the project's 2-core CPU machine (no GPU); prints a table and writes probes_under_load.json under --out."""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import ROOT, wait

sys.path.insert(0, str(ROOT))  # tests.helpers: the store filled in bulk

WORKLOAD = "filled"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def has_probe_listener() -> bool:
    """Whether this checkout's daemon has a probe listener of its own (issue 48)."""
    from benchd.daemon.settings import Settings

    return "http" in Settings.model_fields


def clients(url: str, count: int, seconds: float, results) -> None:
    """count closed-loop clients, each: GET /runs?limit=20, /history/{workload}, /schedules, again."""
    import aiohttp

    paths = ["/runs?limit=20", f"/history/{WORKLOAD}", "/schedules"]

    async def main() -> None:
        served = {path: 0 for path in paths}
        statuses: dict[str, int] = {}
        deadline = time.perf_counter() + seconds
        async with aiohttp.ClientSession(base_url=url, connector=aiohttp.TCPConnector(limit=count),
                                         timeout=aiohttp.ClientTimeout(total=120)) as session:
            async def client(i: int) -> None:
                turn = i
                while time.perf_counter() < deadline:
                    path = paths[turn % len(paths)]
                    turn += 1
                    try:
                        async with session.get(path) as r:
                            await r.read()
                            statuses[str(r.status)] = statuses.get(str(r.status), 0) + 1
                            served[path] += r.status == 200
                    except (aiohttp.ClientError, asyncio.TimeoutError):
                        statuses["error"] = statuses.get("error", 0) + 1

            await asyncio.gather(*(client(i) for i in range(count)))
        results.put({"served": served, "statuses": statuses})

    asyncio.run(main())


def scrape(url: str, seconds: float, interval_s: float = 0.1) -> dict:
    """/metrics on one kept connection and /readyz on a new one each, every interval_s (open loop): latencies in
    seconds (a failure or a 10 s wait counts as infinite)."""
    found: dict[str, list[float]] = {"metrics": [], "readyz": []}
    kept = httpx.Client(base_url=url, timeout=10)
    fresh = httpx.Client(base_url=url, timeout=10, limits=httpx.Limits(max_keepalive_connections=0))  # a new one each
    deadline = time.perf_counter() + seconds
    due = time.perf_counter()
    try:
        while due < deadline:
            time.sleep(max(0.0, due - time.perf_counter()))
            due += interval_s
            for name, call in (("metrics", lambda: kept.get("/metrics", headers={
                    "Accept": "application/openmetrics-text; version=1.0.0"})),
                               ("readyz", lambda: fresh.get("/readyz"))):
                started = time.perf_counter()
                try:
                    ok = call().status_code in (200, 503)  # /readyz answers 503 while not ready: answered
                except httpx.HTTPError:
                    ok = False
                found[name].append(time.perf_counter() - started if ok else float("inf"))
    finally:
        kept.close()
        fresh.close()
    return found


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))] if ordered else float("nan")


def figures(latencies: list[float]) -> dict:
    return {"n": len(latencies), "p50_ms": percentile(latencies, 50) * 1e3, "p99_ms": percentile(latencies, 99) * 1e3,
            "max_ms": max(latencies) * 1e3, "failed": sum(1 for x in latencies if x == float("inf"))}


def fill(work: Path, runs: int, schedules: int) -> str:
    """The store: runs of one workload with a step every 100 runs, their change points found by the daemon's own
    analysis; schedules are put through the API once the daemon is up (main's daemon reads its own)."""
    from tests.helpers import fill_store

    url = f"sqlite:///{work}/benchd.db"
    fill_store(url, work / "spool", runs, WORKLOAD, node="bench", step_every=100)
    from benchd.daemon.history import History
    from benchd.measure.history import HistorySettings
    from benchd.store.database import Store

    store = Store(url, work / "spool", node="bench")
    store.start()
    store.wait_ready(60)
    History(HistorySettings(window=min(runs, 10_000)), store, None, "bench", set()).analyse(WORKLOAD)
    store.close()
    return url


def start(work: Path, database_url: str, port: int, probe_port: int | None) -> subprocess.Popen:
    env = {**os.environ, "BENCHD_DATABASE_URL": database_url, "BENCHD_PORT": str(port), "BENCHD_DEVICE": "cpu",
           "BENCHD_DEFAULT_SCHEDULE": "false", "BENCHD_SPOOL_DIR": str(work / "spool"), "BENCHD_NODE_NAME": "bench",
           "BENCHD_WORKERS__LOG_DIR": str(work / "workers"), "OMP_NUM_THREADS": "1"}
    if probe_port is not None:
        env["BENCHD_HTTP__PROBE_PORT"] = str(probe_port)
    log = open(work / "daemon.log", "w")  # noqa: SIM115 (the daemon's for its life)
    daemon = subprocess.Popen([sys.executable, "-m", "benchd.cli", "serve"], env=env, cwd=ROOT, stdout=log,
                              stderr=log)
    wait(lambda: httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200, 180, 0.2)
    return daemon


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=2_000, help="runs of the workload in the store")
    parser.add_argument("--schedules", type=int, default=50, help="schedules (disabled: they never run)")
    parser.add_argument("--probe-port", default="auto")
    parser.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "runs")))
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="benchd-probes-"))
    port = free_port()
    probe_port = None
    if args.probe_port == "auto" and has_probe_listener():
        probe_port = free_port()
    elif args.probe_port not in ("auto", "none"):
        probe_port = int(args.probe_port)
    database_url = fill(work, args.runs, args.schedules)
    daemon = start(work, database_url, port, probe_port)
    url = f"http://127.0.0.1:{port}"
    scraped = f"http://127.0.0.1:{probe_port or port}"
    body = {"name": "s", "transformers": {"block_size": 16, "num_blocks": 64, "max_batch_tokens": 128},
            "workload": {"stop": {"requests": 4}}}
    try:
        for i in range(args.schedules):
            answer = httpx.post(f"{url}/schedules", json={"name": f"s{i:04d}", "spec": {**body, "name": f"s{i}"},
                                                            "interval_s": 3600, "enabled": False}, timeout=30)
            answer.raise_for_status()
        history = httpx.get(f"{url}/history/{WORKLOAD}", timeout=60).json()
        changes = sum(len(f["change_points"]) for s in history["series"] for f in s["figures"])
        time.sleep(5.0)  # the worker's start (its device's speed measured) behind it
        idle = scrape(scraped, min(args.seconds, 10.0))
        context = multiprocessing.get_context("spawn")
        results = context.Queue()
        load = context.Process(target=clients, args=(url, args.clients, args.seconds + 2, results))
        load.start()
        time.sleep(2.0)  # the clients are all going
        loaded = scrape(scraped, args.seconds)
        served = results.get(timeout=args.seconds + 180)
        load.join(30)
    finally:
        daemon.terminate()
        daemon.wait(60)
    out = {"clients": args.clients, "seconds": args.seconds, "runs": args.runs, "schedules": args.schedules,
           "change_points_shown": changes, "scraped": "probe port" if probe_port else "main port",
           "idle": {k: figures(v) for k, v in idle.items()}, "loaded": {k: figures(v) for k, v in loaded.items()},
           "served": served, "cpus": os.cpu_count()}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "probes_under_load.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out["served"]))
    print(f"\n{args.clients} clients on /runs?limit=20, /history/{WORKLOAD} ({args.runs} runs, {changes} change points "
          f"shown) and /schedules ({args.schedules}) for {args.seconds:g} s, {os.cpu_count()} CPUs; scraped on the "
          f"{out['scraped']} every 100 ms")
    print("| endpoint | idle p50 / p99 / max ms | loaded p50 / p99 / max ms | failed |")
    print("| --- | --- | --- | --- |")
    for name in ("metrics", "readyz"):
        i, loaded_ = out["idle"][name], out["loaded"][name]
        print(f"| /{name} | {i['p50_ms']:.1f} / {i['p99_ms']:.1f} / {i['max_ms']:.1f} | {loaded_['p50_ms']:.1f} / "
              f"{loaded_['p99_ms']:.1f} / {loaded_['max_ms']:.1f} | {loaded_['failed']} of {loaded_['n']} |")
    total = sum(served["served"].values())
    print(f"clients served {total / args.seconds:.0f} answers/s ({', '.join(f'{k}: {v}' for k, v in served['served'].items())}); "
          f"statuses {served['statuses']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
