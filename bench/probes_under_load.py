"""Do scrapes and probes wait on clients? A live daemon over a filled store (runs of one workload, its change points
found, schedules), 200 anonymous closed-loop clients loading GET /runs?limit=20, /history/{workload} and
/schedules in turn, and beside them a scraper of their own: GET /metrics every 100 ms on a kept connection (as
Prometheus asks) and GET /readyz every 100 ms on a new connection each (as the kubelet probes); their latency
p50/p99/max, and what the clients were served. Idle first (no clients), then loaded.

    python bench/probes_under_load.py [--clients 200] [--seconds 30] [--runs 2000] [--before CHECKOUT] [--pairs 1]
                                      [--threads 16,4] [--floor]

Each port is scraped: the main one, and the probe listener's (BENCHD_HTTP__PROBE_PORT, given a free port) where the
checkout has one. --before: another checkout's root (main's, `git archive main | tar -x -C DIR`), its daemon measured
in turn with this one's over copies of the same store, so the before and after figures come from one invocation.
Runs on the project's 2-core CPU machine (no GPU); prints a table and writes probes_under_load.json under --out."""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import ROOT, free_port, wait

sys.path.insert(0, str(ROOT))  # tests.helpers: the store filled in bulk

WORKLOAD = "filled"


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
                    except (TimeoutError, aiohttp.ClientError):
                        statuses["error"] = statuses.get("error", 0) + 1

            await asyncio.gather(*(client(i) for i in range(count)))
        results.put({"served": served, "statuses": statuses})

    asyncio.run(main())


def scrape(urls: dict[str, str], seconds: float, interval_s: float = 0.1) -> dict:
    """On each port (name → URL): /metrics on one kept connection (as Prometheus) and /readyz on a new one each (as
    the kubelet), every interval_s (open loop, the ports in turn): latencies in seconds (a failure or a 10 s wait
    counts as infinite), by "port /endpoint"."""
    found: dict[str, list[float]] = {}
    clients = {name: (httpx.Client(base_url=url, timeout=10),
                      httpx.Client(base_url=url, timeout=10, limits=httpx.Limits(max_keepalive_connections=0)))
               for name, url in urls.items()}
    deadline = time.perf_counter() + seconds
    due = time.perf_counter()
    try:
        while due < deadline:
            time.sleep(max(0.0, due - time.perf_counter()))
            due += interval_s
            for port, (kept, fresh) in clients.items():
                for name, client, headers in (("/metrics", kept, {"Accept": "application/openmetrics-text"}),
                                              ("/readyz", fresh, {})):
                    started = time.perf_counter()
                    try:
                        # /readyz answers 503 while not ready: answered all the same
                        ok = client.get(name, headers=headers).status_code in (200, 503)
                    except httpx.HTTPError:
                        ok = False
                    found.setdefault(f"{port} {name}", []).append(time.perf_counter() - started if ok
                                                                   else float("inf"))
    finally:
        for kept, fresh in clients.values():
            kept.close()
            fresh.close()
    return found


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] if ordered else float("nan")


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


FLOOR_APP = """
import sys
from pathlib import Path
import uvicorn
from fastapi import FastAPI, Response
work, port = Path(sys.argv[1]), int(sys.argv[2])
metrics, ready = (work / "metrics.txt").read_bytes(), (work / "readyz.json").read_bytes()
app = FastAPI()

@app.get("/metrics")
async def page() -> Response:
    return Response(metrics, media_type="application/openmetrics-text; version=1.0.0; charset=utf-8")

@app.get("/readyz")
async def readyz() -> Response:
    return Response(ready, media_type="application/json")

uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
"""


def floor(url: str, work: Path) -> tuple[subprocess.Popen, str]:
    """A bare FastAPI app in a process of its own, answering the daemon's own last /metrics page and /readyz as bytes
    made ahead: what a scrape costs on this machine under the same clients when nothing else is asked of the server."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "metrics.txt").write_bytes(httpx.get(f"{url}/metrics", headers={
        "Accept": "application/openmetrics-text"}).content)
    (work / "readyz.json").write_bytes(httpx.get(f"{url}/readyz").content)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", FLOOR_APP, str(work), str(port)])
    wait(lambda: httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200, 60, 0.2)
    return server, f"http://127.0.0.1:{port}"


def start(work: Path, database_url: str, port: int, probe_port: int | None, src: Path,
          threads: int | None = None) -> subprocess.Popen:
    """`benchd serve` of the checkout whose package is at src, over a copy of the filled store."""
    env = {**os.environ, "BENCHD_DATABASE_URL": database_url, "BENCHD_PORT": str(port), "BENCHD_DEVICE": "cpu",
           "BENCHD_DEFAULT_SCHEDULE": "false", "BENCHD_SPOOL_DIR": str(work / "spool"), "BENCHD_NODE_NAME": "bench",
           "BENCHD_WORKERS__LOG_DIR": str(work / "workers"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
    if probe_port is not None:
        env["BENCHD_HTTP__PROBE_PORT"] = str(probe_port)
    if threads is not None:
        env["BENCHD_HTTP__THREADS"] = str(threads)
    log = open(work / "daemon.log", "w")  # noqa: SIM115 (the daemon's for its life)
    daemon = subprocess.Popen([sys.executable, "-m", "benchd.cli", "serve"], env=env, cwd=src.parent, stdout=log,
                              stderr=log)
    wait(lambda: httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200, 180, 0.2)
    return daemon


def measure(name: str, src: Path, work: Path, store: Path, args, threads: int | None = None) -> dict:
    """One daemon of the checkout at src: scraped idle, then under the clients; its ports and figures."""
    import shutil

    work.mkdir(parents=True)
    shutil.copy(store, work / "benchd.db")
    port = free_port()
    probe_port = free_port() if (src / "benchd" / "api" / "probes.py").exists() else None
    daemon = start(work, f"sqlite:///{work}/benchd.db", port, probe_port, src, threads)
    url = f"http://127.0.0.1:{port}"
    ports = {"main port": url, **({"probe port": f"http://127.0.0.1:{probe_port}"} if probe_port else {})}
    bare = None
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
        if args.floor:
            bare, ports["floor"] = floor(url, work / "floor")
        idle = scrape(ports, min(args.seconds, 10.0))
        context = multiprocessing.get_context("spawn")
        results = context.Queue()
        load = context.Process(target=clients, args=(url, args.clients, args.seconds + 2, results))
        load.start()
        time.sleep(2.0)  # the clients are all going
        loaded = scrape(ports, args.seconds)
        served = results.get(timeout=args.seconds + 180)
        load.join(30)
    finally:
        for process in (daemon, bare):
            if process is not None:
                process.terminate()
                process.wait(60)
    label = name if threads is None else f"{name}, {threads} threads"
    return {"checkout": label, "src": str(src), "change_points_shown": changes, "served": served,
            "idle": {k: figures(v) for k, v in idle.items()}, "loaded": {k: figures(v) for k, v in loaded.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=2_000, help="runs of the workload in the store")
    parser.add_argument("--schedules", type=int, default=50, help="schedules (disabled: they never run)")
    parser.add_argument("--before", type=Path, help="another checkout (its root) measured in turn with this one: "
                        "before, this, before, this …")
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--threads", help="this checkout's BENCHD_HTTP__THREADS, comma-separated: a daemon each")
    parser.add_argument("--floor", action="store_true", help="scrape beside them a bare FastAPI app in a process of "
                        "its own answering the daemon's pages as bytes made ahead: this machine's floor under load")
    parser.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "runs")))
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="benchd-probes-"))
    (work / "store").mkdir()
    fill(work / "store", args.runs, args.schedules)
    levels = [int(t) for t in args.threads.split(",")] if args.threads else [None]
    checkouts = ([("before", args.before.resolve() / "src", None)] if args.before else []) + [
        ("this", ROOT / "src", threads) for threads in levels]
    rows = []
    for pair in range(args.pairs):
        for name, src, threads in checkouts:
            rows.append({"pair": pair, **measure(name, src, work / f"{pair}-{name}-{threads}",
                                                 work / "store" / "benchd.db", args, threads)})
            print(json.dumps(rows[-1]["loaded"]), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "probes_under_load.json").write_text(json.dumps(rows, indent=2))
    print(f"\n{args.clients} clients on /runs?limit=20, /history/{WORKLOAD} ({args.runs} runs, "
          f"{rows[-1]['change_points_shown']} change points shown) and /schedules ({args.schedules}) for "
          f"{args.seconds:g} s, {os.cpu_count()} CPUs; each port scraped every 100 ms")
    print("| pair | checkout | port endpoint | idle p50 / p99 / max ms | loaded p50 / p99 / max ms | failed | "
          "clients served /s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        served = sum(row["served"]["served"].values()) / args.seconds
        for key, loaded in row["loaded"].items():
            idle = row["idle"][key]
            print(f"| {row['pair']} | {row['checkout']} | {key} | {idle['p50_ms']:.1f} / {idle['p99_ms']:.1f} / "
                  f"{idle['max_ms']:.1f} | {loaded['p50_ms']:.1f} / {loaded['p99_ms']:.1f} / {loaded['max_ms']:.1f} "
                  f"| {loaded['failed']} of {loaded['n']} | {served:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
