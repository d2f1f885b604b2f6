"""Writes tests/data/store-COMMIT.sqlite.sql and answers-COMMIT.json: the store a daemon of that commit leaves (the
runs, schedules, matrix and baseline tests/data/write_store.py makes) and what that daemon then answers about it over
HTTP, every read the API has (tests/store/test_reads.py asks the current daemon the same and expects the same).

    PYTHONPATH=<that commit's checkout>/src:. python tests/data/write_answers.py COMMIT

2d6c4ea is the main before issue 44 (engines as folders, one typed outcome, the store's typed operations)."""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
from pathlib import Path

from benchd.api import create_app
from benchd.daemon.settings import Settings
from tests.data.write_store import dump_sqlite, fill
from tests.helpers import LiveServer

HERE = Path(__file__).parent
WORKLOAD = "fixture"  # the workload write_store.py's transformers runs, schedule and baseline share


def reads(http) -> list[str]:
    """Every read of the API on what the store holds: the lists, each run's, each matrix's, the baseline, the
    workload's history and change points, and a comparison of two runs."""
    runs = http.get("/runs", params={"limit": 100}).json()["items"]
    matrices = http.get("/matrices").json()
    paths = ["/runs?limit=100", "/schedules", "/matrices", "/baselines", f"/baselines/{WORKLOAD}",
             f"/history/{WORKLOAD}", "/changes"]
    for run in sorted(runs, key=lambda r: r["id"]):
        paths += [f"/runs/{run['id']}", f"/runs/{run['id']}/requests"]
        if run["engine"] in ("train_step", "kernel"):
            paths.append(f"/runs/{run['id']}/timings")
    paths += [f"/matrices/{m['id']}" for m in sorted(matrices, key=lambda m: m["id"])]
    same = sorted(r["id"] for r in runs if r["workload"] == WORKLOAD and r["engine"] == "transformers")
    paths.append(f"/compare?a={same[0]}&b={same[1]}")
    return paths


def load(dump: Path, path: Path) -> str:
    """A database from the dump, its schedules paused (a schedule due when the daemon starts would add a run while
    it is read)."""
    with sqlite3.connect(path) as db:
        db.executescript(dump.read_text())
        db.execute("UPDATE schedules SET enabled = 0")
    return f"sqlite:///{path}"


def answers(url: str, work: Path) -> dict[str, object]:
    """What a daemon serving the database at url answers to each read (status and body), on the node that wrote it
    (the fixture's runs were stored on a host named vm), at the intervals' confidence of the daemon that wrote it
    (0.95; issue 53 made 0.995 the default)."""
    settings = Settings(database_url=url, node_name="vm", device="cpu", dtype="float32", default_schedule=False,
                        spool_dir=str(work / "spool"), model_roots=[str(work)], workers={"log_dir": str(work / "w")},
                        compare_confidence=0.95)
    with LiveServer(create_app(settings)) as server:
        server.wait_ready(300)
        out = {}
        for path in reads(server.http):
            response = server.http.get(path)
            out[path] = {"status": response.status_code, "body": response.json()}
        return out


def main(commit: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if not (HERE / f"store-{commit}.sqlite.sql").exists():  # kept once written: its answers are asked again
            fill(f"sqlite:///{work}/benchd.db", work / "sqlite")
            dump_sqlite(work / "benchd.db", HERE / f"store-{commit}.sqlite.sql")
        written = answers(load(HERE / f"store-{commit}.sqlite.sql", work / "read.db"), work / "read")
    (HERE / f"answers-{commit}.json").write_text(json.dumps(written, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
