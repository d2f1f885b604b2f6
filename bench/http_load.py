"""Does HTTP load distort a measurement? The same seeded Poisson run on the tiny model, through a live daemon,
unloaded and under 200 concurrent HTTP clients hammering GET /metrics and GET /runs, pairs alternating in one
invocation (ABAB…): the run's TTFT p99, output tok/s and dispatch lag p99 side by side, and the scrape latency.
With --dispatch-priorities 1,0, a daemon for each (the workers' sending thread in SCHED_FIFO, and not), their pairs
in turn; the other daemon idles meanwhile. Closed-loop clients wait clients ÷ served-per-second on average
(Little's law): the table prints both.

    python bench/http_load.py [--pairs 3] [--clients 200] [--rate 5] [--requests 60] [--cpu-threads N]
                              [--dispatch-priorities 1,0] [--floor]

Runs on the project's 2-core CPU machine (no GPU); prints a table and writes http_load.json under --out."""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import ROOT, free_port, wait


def workload(rate: float, requests: int, cpu_threads: int | None = None) -> dict:
    engine = {"block_size": 16, "num_blocks": 256, "max_batch_tokens": 256}
    if cpu_threads is not None:
        engine["cpu_threads"] = cpu_threads
    return {"name": "http-load", "transformers": engine,
            "workload": {"arrivals": {"profile": "poisson", "rate": rate}, "stop": {"requests": requests},
                         "warmup": {"requests": 4}, "prompt_tokens": {"dist": "fixed", "value": 32},
                         "output_tokens": {"dist": "fixed", "value": 32}}}


def hammer(url: str, clients: int, seconds: float, results) -> None:
    """clients concurrent loops, each: a request, its answer, the next (half /metrics as Prometheus asks for it,
    half /runs); every /metrics latency is kept."""
    import aiohttp

    async def main() -> None:
        latencies: list[float] = []
        counts = {"metrics": 0, "runs": 0, "errors": 0}
        deadline = time.perf_counter() + seconds
        connector = aiohttp.TCPConnector(limit=clients)
        async with aiohttp.ClientSession(base_url=url, connector=connector) as session:
            async def client(i: int) -> None:
                metrics = i % 2 == 0
                while time.perf_counter() < deadline:
                    start = time.perf_counter()
                    try:
                        if metrics:
                            async with session.get("/metrics", headers={
                                    "Accept": "application/openmetrics-text; version=1.0.0"}) as r:
                                await r.read()
                            latencies.append(time.perf_counter() - start)
                            counts["metrics"] += 1
                        else:
                            async with session.get("/runs", params={"limit": "50"}) as r:
                                await r.read()
                            counts["runs"] += 1
                    except aiohttp.ClientError:
                        counts["errors"] += 1

            await asyncio.gather(*(client(i) for i in range(clients)))
        results.put({"metrics_latency_s": latencies, **counts})

    asyncio.run(main())


FLOOR_APP = """
import sys
from pathlib import Path
import uvicorn
from fastapi import FastAPI, Response
work, port = Path(sys.argv[1]), int(sys.argv[2])
metrics, runs = (work / "metrics.txt").read_bytes(), (work / "runs.json").read_bytes()
app = FastAPI()

@app.get("/metrics")
async def page() -> Response:
    return Response(metrics, media_type="application/openmetrics-text; version=1.0.0; charset=utf-8")

@app.get("/runs")
async def listing() -> Response:
    return Response(runs, media_type="application/json")

uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
"""


def floor(http: httpx.Client, work: Path, port: int, clients: int, seconds: float) -> dict:
    """The same clients against a bare FastAPI app (uvicorn as the daemon runs it) that answers with the daemon's
    own last /metrics page and /runs list as bytes made ahead: no engine, no store, no rendering. What no Python
    daemon on this machine can beat."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "metrics.txt").write_bytes(http.get("/metrics", headers={
        "Accept": "application/openmetrics-text; version=1.0.0"}).content)
    (work / "runs.json").write_bytes(http.get("/runs", params={"limit": "50"}).content)
    server = subprocess.Popen([sys.executable, "-c", FLOOR_APP, str(work), str(port)])
    try:
        url = f"http://127.0.0.1:{port}"
        wait(lambda: httpx.get(f"{url}/runs", timeout=5), 60, 0.2)
        context = multiprocessing.get_context("spawn")
        results = context.Queue()
        load = context.Process(target=hammer, args=(url, clients, seconds, results))
        load.start()
        scrapes = results.get(timeout=seconds + 120)
        load.join(30)
    finally:
        server.terminate()
        server.wait(30)
    return {**served(scrapes, seconds), "page_bytes": (work / "metrics.txt").stat().st_size,
            "runs_bytes": (work / "runs.json").stat().st_size}


def served(scrapes: dict, seconds: float) -> dict:
    """What the hammering clients saw: /metrics latency, and requests answered a second."""
    return {"metrics_p50_s": percentile(scrapes["metrics_latency_s"], 50),
            "metrics_p99_s": percentile(scrapes["metrics_latency_s"], 99),
            "metrics_requests": scrapes["metrics"], "runs_requests": scrapes["runs"],
            "served_per_s": (scrapes["metrics"] + scrapes["runs"]) / seconds, "errors": scrapes["errors"]}


def measure(http: httpx.Client, body: dict) -> dict:
    run_id = http.post("/runs", json=body).json()["id"]
    while (run := http.get(f"/runs/{run_id}").json())["status"] in ("queued", "running"):
        time.sleep(0.2)
    stage = run["summary"][0]
    return {"status": run["status"], "ttft_p99_s": stage["ttft_s"]["p99"], "ttft_p50_s": stage["ttft_s"]["p50"],
            "output_tokens_per_s": stage["output_tokens_per_s"], "dispatch_lag_p99_s": stage["dispatch_lag_s"]["p99"],
            "itl_p99_s": stage["itl_s"]["p99"]}


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))] if ordered else float("nan")


def start_daemon(work: Path, port: int, dispatch_priority: int) -> tuple[subprocess.Popen, httpx.Client]:
    """A daemon of its own (store, spool, worker logs) with its workers' sending thread at dispatch_priority."""
    work.mkdir(parents=True)
    env = {**os.environ, "BENCHD_DATABASE_URL": f"sqlite:///{work}/benchd.db", "BENCHD_PORT": str(port),
           "BENCHD_DEVICE": "cpu", "BENCHD_DEFAULT_SCHEDULE": "false", "BENCHD_SPOOL_DIR": str(work / "spool"),
           "BENCHD_WORKERS__LOG_DIR": str(work / "workers"),
           "BENCHD_WORKERS__DISPATCH_PRIORITY": str(dispatch_priority)}
    log = open(work / "daemon.log", "w")
    daemon = subprocess.Popen([sys.executable, "-m", "benchd.cli", "serve"], env=env, cwd=ROOT, stdout=log, stderr=log)
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
    try:
        ready = wait(lambda: (answer := http.get("/readyz")).status_code == 200 and answer.json(), 120, 0.2)
    except SystemExit:
        problem = f"the daemon did not get ready: see {work / 'daemon.log'}"
    else:
        got = ready["workers"][0]["dispatch_priority"]
        if got == dispatch_priority:
            return daemon, http
        problem = f"the worker got dispatch priority {got}, not {dispatch_priority}: see {work / 'workers'}"
    daemon.terminate()
    daemon.wait(60)
    raise SystemExit(problem)


def port(first: int, i: int) -> int:
    """The i-th server's port: after the one asked for, or a free one each."""
    return first + i if first else free_port()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--rate", type=float, default=5.0)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--port", type=int, default=0, help="the first daemon's port, the next ones' and the floor's "
                        "after it; default 0: a free port each (a neighbour of one picked may be held)")
    parser.add_argument("--cpu-threads", type=int, help="the engine's torch threads (transformers.cpu_threads); "
                        "default torch's, one a core")
    parser.add_argument("--dispatch-priorities", default="1", help="the workers' dispatch priority "
                        "(BENCHD_WORKERS__DISPATCH_PRIORITY), comma-separated: a daemon each, their pairs in turn")
    parser.add_argument("--floor", action="store_true", help="after the pairs, the same clients against a bare "
                        "FastAPI app answering with the daemon's last pages as bytes made ahead")
    parser.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "runs")))
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="benchd-http-load-"))
    levels = [int(level) for level in args.dispatch_priorities.split(",")]
    daemons: dict[int, tuple[subprocess.Popen, httpx.Client]] = {}
    body = workload(args.rate, args.requests, args.cpu_threads)
    expected_s = (args.requests + 4) / args.rate + 5
    rows, bound = [], None
    try:
        for i, level in enumerate(levels):
            daemons[level] = start_daemon(work / f"priority-{level}", port(args.port, i), level)
            measure(daemons[level][1], body)  # warm: the engine starts and keeps its configuration
        context = multiprocessing.get_context("spawn")
        for pair in range(args.pairs):
            for level in levels:
                http = daemons[level][1]
                quiet = measure(http, body)
                results = context.Queue()
                load = context.Process(target=hammer, args=(str(http.base_url), args.clients, expected_s, results))
                load.start()
                time.sleep(1.0)  # the clients are all going
                loaded = measure(http, body)
                scrapes = results.get(timeout=expected_s + 120)
                load.join(30)
                rows.append({"pair": pair, "dispatch_priority": level, "unloaded": quiet, "loaded": loaded,
                             **served(scrapes, expected_s)})
                print(json.dumps(rows[-1]), flush=True)
        bound = floor(daemons[levels[0]][1], work / "floor", port(args.port, len(levels)), args.clients, expected_s) \
            if args.floor else None
    finally:
        for daemon, _ in daemons.values():
            daemon.terminate()
        for daemon, _ in daemons.values():
            daemon.wait(60)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "http_load.json").write_text(json.dumps(rows, indent=2))
    if bound is not None:
        Path(args.out, "http_load_floor.json").write_text(json.dumps(bound, indent=2))

    print(f"\n{args.clients} clients on GET /metrics and /runs during a Poisson {args.rate:g}/s run "
          f"({args.requests} requests, 32/32 tokens), tiny model, {os.cpu_count()} CPUs; {args.pairs} pairs a "
          "dispatch priority")
    print("| pair | dispatch priority | TTFT p99 ms unloaded → loaded | tok/s unloaded → loaded | "
          "dispatch lag p99 ms | /metrics p50 / p99 ms | served /s (clients ÷ it, ms) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        u, l = r["unloaded"], r["loaded"]
        print(f"| {r['pair']} | {r['dispatch_priority']} | "
              f"{u['ttft_p99_s'] * 1e3:.1f} → {l['ttft_p99_s'] * 1e3:.1f} | "
              f"{u['output_tokens_per_s']:.0f} → {l['output_tokens_per_s']:.0f} | "
              f"{u['dispatch_lag_p99_s'] * 1e3:.2f} → {l['dispatch_lag_p99_s'] * 1e3:.2f} | "
              f"{r['metrics_p50_s'] * 1e3:.1f} / {r['metrics_p99_s'] * 1e3:.1f} | "
              f"{r['served_per_s']:.0f} ({args.clients / r['served_per_s'] * 1e3:.0f}) |")
    for level in levels:
        mine = [r for r in rows if r["dispatch_priority"] == level]

        def ratio(key: str) -> float:
            return statistics.median(r["loaded"][key] / r["unloaded"][key] for r in mine if r["unloaded"][key])

        print(f"dispatch priority {level}: median loaded/unloaded TTFT p99 {ratio('ttft_p99_s'):.3f}, "
              f"tok/s {ratio('output_tokens_per_s'):.3f}; loaded dispatch lag p99 max "
              f"{max(r['loaded']['dispatch_lag_p99_s'] for r in mine) * 1e3:.2f} ms")
    if bound is not None:
        print(f"floor, a bare FastAPI app answering the same pages as bytes ({bound['page_bytes']} and "
              f"{bound['runs_bytes']} bytes), no engine: /metrics p50 {bound['metrics_p50_s'] * 1e3:.1f} / p99 "
              f"{bound['metrics_p99_s'] * 1e3:.1f} ms, {bound['served_per_s']:.0f} served /s "
              f"({args.clients} ÷ it: {args.clients / bound['served_per_s'] * 1e3:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
