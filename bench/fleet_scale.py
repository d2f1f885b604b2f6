"""What the fleet's view costs as the fleet grows (no GPU): a store filled with N nodes × 20 runs of one workload on
one GPU model (the fleet's rows as FinishRun writes them), then the three reads the daemon makes, each timed (the
median of --repeats):

- a run's end: its fleet row written and its node's beyond the newest 20 pruned (store/fleet.py, write);
- a node's refresh: the workload's rows read and that node's place computed (daemon/fleet.py, refresh);
- GET /fleet: the rows read and every node's place computed (daemon/fleet.py, report).

    python bench/fleet_scale.py [--nodes 100 1000 5000] [--url postgresql+psycopg://…]

Prints a table: nodes, rows, the store's bytes a fleet row, and each read's milliseconds."""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import sqlalchemy as sa
from common import ROOT  # noqa: F401 (benchd from this checkout)

from benchd.measure.fleet import RUNS, FleetSettings
from benchd.measure.fleet_place import view
from benchd.store import fleet, migrate
from benchd.store.schema import fleet_runs, runs

STACK = {"benchd_version": "0.1.0", "torch_version": "2.11.0", "transformers_version": "5.17.0",
         "driver_version": "580.159.04", "device_name": "NVIDIA H100 80GB HBM3", "engine": "transformers",
         "model": "llama-3.2-1b", "attn_implementation": "paged|sdpa"}


class Reader:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def _read(self, query) -> list[dict]:
        with self.engine.connect() as db:
            return [dict(r._mapping) for r in db.execute(query)]


def fill(engine: sa.Engine, nodes: int, rng) -> None:
    now = datetime.now(UTC)
    run_rows, fleet_rows = [], []
    for n in range(nodes):
        skew = math.exp(rng.normal(0, 0.03))
        for r in range(RUNS):
            run_id = f"{n:05d}{r:02d}".ljust(32, "0")
            at = now - timedelta(minutes=RUNS - r)
            run_rows.append({"id": run_id, "status": "succeeded", "workload": "reference", "model": "llama-3.2-1b",
                             "engine": "transformers", "spec": {}, "node": f"node-{n:05d}", "created_at": at})
            noise = skew * math.exp(rng.normal(0, 0.02))
            fleet_rows.append({"run_id": run_id, "workload": "reference", "device": "NVIDIA H100 80GB HBM3",
                               "node": f"node-{n:05d}", "created_at": at, "valid": True,
                               "figures": {"output_tokens_per_s": 11_000 * noise, "itl_s.p50": 0.017 / noise,
                                           "ttft_s.p50": 0.6, "ttft_s.p99": 0.9, "itl_s.p99": 0.03,
                                           "of_bound": 0.6, "energy_per_token_j": 0.05},
                               "good_output_tokens": 65_536, "device_seconds": 6.0, "energy_j": 3000.0,
                               "state": {"clock_state": "nominal", "sm_clock_ratio": 0.99,
                                         "cpu_utilization_mean": 0.1}, "stack": {**STACK, "host": f"node-{n}"}})
    with engine.begin() as db:
        for start in range(0, len(run_rows), 5000):
            db.execute(runs.insert(), run_rows[start:start + 5000])
            db.execute(fleet_runs.insert(), fleet_rows[start:start + 5000])


def timed(what, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        what()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--url", help="a PostgreSQL database to fill (default: SQLite in a scratch directory)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("nodes | fleet rows | bytes a row | write a run's row (ms) | a node's refresh (ms) | GET /fleet (ms)")
    for nodes in args.nodes:
        url = args.url or f"sqlite:///{tempfile.mkdtemp()}/fleet.db"
        engine = sa.create_engine(url)
        if args.url:
            with engine.begin() as db:
                db.execute(sa.text("DROP TABLE IF EXISTS fleet_runs, change_points, baselines, requests, timings, "
                                   "run_stages, runs, matrices, schedules, alembic_version CASCADE"))
        migrate.upgrade(engine)
        fill(engine, nodes, rng)
        store, since = Reader(engine), datetime.now(UTC) - timedelta(days=1)
        with engine.connect() as db:
            size = db.execute(sa.text("SELECT sum(pgsize) FROM dbstat WHERE name = 'fleet_runs'")).scalar() \
                if engine.dialect.name == "sqlite" else db.execute(sa.text(
                    "SELECT pg_total_relation_size('fleet_runs')")).scalar()
        rows = nodes * RUNS
        settings = FleetSettings()

        counter = iter(range(10**6))

        def write(engine=engine, counter=counter) -> None:
            run_id = f"new{next(counter)}".ljust(32, "0")
            with engine.begin() as db:
                db.execute(runs.insert().values(id=run_id, status="succeeded", workload="reference", model="m",
                                                engine="transformers", spec={}, node="node-00000",
                                                created_at=datetime.now(UTC)))
                fleet.write(db, run_id, {"device": "NVIDIA H100 80GB HBM3", "valid": True,
                                         "figures": {"output_tokens_per_s": 11_000.0}, "good_output_tokens": 1,
                                         "device_seconds": 1.0, "energy_j": 1.0, "state": {}, "stack": STACK},
                            "node-00000")

        write_ms = timed(write, args.repeats)
        def read(only: str | None, store=store, since=since, settings=settings) -> None:
            view(fleet.rows(store, since, "reference", max_rows=10**7), settings, only=only)

        refresh_ms = timed(lambda: read("node-00001"), args.repeats)
        report_ms = timed(lambda: read(None), max(1, args.repeats // 2))
        print(f"{nodes} | {rows} | {size / rows:.0f} | {write_ms:.1f} | {refresh_ms:.0f} | {report_ms:.0f}",
              flush=True)
        engine.dispose()


if __name__ == "__main__":
    main()
