"""The fleet's rows (store/fleet.py): written as a run ends on its node, each node's newest runs kept, a matrix's
runs left out, applied twice the same, read within a cap; and filled from the runs a store held before them."""

import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from benchd.daemon.inprocess import run_local
from benchd.measure.fleet import RUNS
from benchd.measure.outcome import RunOutcome
from benchd.store import fleet
from benchd.store.database import Store
from benchd.store.operations import FinishRun
from benchd.store.schema import fleet_runs
from tests.helpers import ROOT, make_spec

SINCE = datetime(2000, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def outcome(tiny):
    result = run_local(make_spec(workload={"stop": {"requests": 4}}), loaded=tiny)
    return RunOutcome.of("x", result)


def open_store(tmp_path, node="node-a") -> Store:
    store = Store(f"sqlite:///{tmp_path}/benchd.db", spool_dir=tmp_path / f"spool-{node}", node=node)
    store.start()
    assert store.wait_ready(30)
    return store


def test_each_nodes_newest_runs_are_kept_and_read(tmp_path, outcome):
    spec = outcome.spec.model_dump(mode="json")
    assert outcome.good_tokens is not None and outcome.good_tokens.good_output_tokens > 0
    stores = [open_store(tmp_path, node) for node in ("node-a", "node-b")]
    for i in range(RUNS + 3):
        for store in stores:
            run_id = f"{store.node}-{i:02d}"
            store.create_run(run_id, spec)
            store.finish_run(replace(outcome, run_id=run_id))
    matrix = stores[0]
    matrix.create_run("in-a-matrix", spec)
    with matrix.engine.begin() as db:  # a matrix's run: its experiment, not the node's place
        db.execute(sa.text("UPDATE runs SET matrix_id = 'm' WHERE id = 'in-a-matrix'"))
    matrix.finish_run(replace(outcome, run_id="in-a-matrix"))
    for store in stores:
        assert store.flush()
    found = fleet.rows(stores[0], SINCE, workload="test")
    assert {r.node for r in found} == {"node-a", "node-b"} and len(found) == 2 * RUNS
    newest = [r.run_id for r in found if r.node == "node-a"]
    assert newest == [f"node-a-{i:02d}" for i in range(3, RUNS + 3)]
    row = found[-1]
    assert row.device == outcome.metadata.device_name and row.valid is True
    assert row.figures["output_tokens_per_s"] == pytest.approx(outcome.stages[0].output_tokens_per_s)
    assert row.good_output_tokens == outcome.good_tokens.good_output_tokens and row.energy_j is None
    assert row.stack["model"] == "tiny" and row.state["clock_state"] == "unknown"
    # Applied again (a journal replayed after a crash): nothing more.
    operation = FinishRun.of(replace(outcome, run_id="node-b-22"), "2026-11-01T00:00:00+00:00")
    with stores[1].engine.begin() as db:
        operation.apply(db, stores[1])
    assert len(fleet.rows(stores[1], SINCE)) == 2 * RUNS
    assert fleet.workloads(stores[0], SINCE) == ["test"]
    assert fleet.rows(stores[0], datetime.now(UTC) + timedelta(days=1)) == []
    with pytest.raises(fleet.TooMany, match="name a workload"):
        fleet.rows(stores[0], SINCE, max_rows=10)
    for store in stores:
        store.close()


def test_the_runs_stored_before_the_fleet_fill_it(tmp_path):
    """A database the release before issue 44 wrote (tests/data), migrated: its succeeded generation runs are the
    fleet's rows, a matrix's run and a timed run left out."""
    path = tmp_path / "benchd.db"
    with sqlite3.connect(path) as db:
        db.executescript((ROOT / "tests" / "data" / "store-2d6c4ea.sqlite.sql").read_text())
        kept = db.execute("SELECT count(*) FROM runs WHERE status = 'succeeded' AND matrix_id IS NULL AND "
                          "json_extract(spec, '$.kind') IS NOT 'train_step' AND "
                          "json_extract(spec, '$.kind') IS NOT 'kernel' AND summary IS NOT NULL").fetchone()[0]
    store = Store(f"sqlite:///{path}", spool_dir=tmp_path / "spool", node="vm")
    store.start()
    assert store.wait_ready(30)
    found = fleet.rows(store, SINCE)
    assert 0 < len(found) <= kept and {r.node for r in found} == {"vm"}
    assert all(r.figures.get("output_tokens_per_s") and r.good_output_tokens is None for r in found)
    with store.engine.connect() as db:
        assert db.execute(sa.select(sa.func.count()).select_from(fleet_runs)).scalar() == len(found)
    store.close()
