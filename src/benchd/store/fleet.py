"""The fleet's rows: each node's newest runs of each workload on each GPU model (at most measure/fleet.py's RUNS),
written as a run ends (FinishRun) and read whole for a workload, so that the fleet's view costs a read of its
nodes' rows, never a scan of the history."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

import sqlalchemy as sa

from benchd.measure.fleet import RUNS, FleetRun
from benchd.store.schema import JSON, fleet_runs, runs

JSONS = {"figures", "state", "stack", "spec", "summary", "run_metadata", "hardware", "parts"}


class Store(Protocol):
    """What of the store (store/database.py's Store) this module uses."""

    def _read(self, query) -> list[dict[str, Any]]: ...


class TooMany(ValueError):
    """A read that would hold more rows than its cap; str() says how to narrow it."""


def write(db: sa.Connection, run_id: str, row: dict[str, Any], node: str) -> None:
    """The run's fleet row (FinishRun's): written once, on its node; the node's rows of the workload and GPU model
    beyond the newest RUNS deleted. A matrix's run is its experiment, not the node's place."""
    found = db.execute(sa.select(runs.c.workload, runs.c.created_at, runs.c.matrix_id)
                       .where(runs.c.id == run_id)).first()
    if found is None or found.matrix_id is not None:
        return
    if db.execute(sa.select(fleet_runs.c.run_id).where(fleet_runs.c.run_id == run_id)).first() is None:
        db.execute(fleet_runs.insert().values(run_id=run_id, workload=found.workload, node=node,
                                              created_at=found.created_at, **row))
    prune(db, found.workload, row["device"], node)


def prune(db: sa.Connection, workload: str, device: str, node: str) -> None:
    same = (fleet_runs.c.workload == workload, fleet_runs.c.device == device, fleet_runs.c.node == node)
    # newest by the store's sequence, not the node's clock (a clock set back would keep the wrong runs)
    old = [r.run_id for r in db.execute(sa.select(fleet_runs.c.run_id).join(runs, runs.c.id == fleet_runs.c.run_id)
                                        .where(*same).order_by(runs.c.seq.desc()).offset(RUNS))]
    if old:
        db.execute(fleet_runs.delete().where(fleet_runs.c.run_id.in_(old)))


def rows(store: Store, since: datetime, workload: str | None = None, device: str | None = None,
         node: str | None = None, max_rows: int = 100_000) -> list[FleetRun]:
    """The fleet's runs newer than since, of one workload (and GPU model, or node) or all; TooMany past max_rows."""
    conditions = [fleet_runs.c.created_at >= since, *(column == value for column, value in (
        (fleet_runs.c.workload, workload), (fleet_runs.c.device, device), (fleet_runs.c.node, node))
        if value is not None)]
    found = store._read(fleet_runs.select().where(*conditions)
                        .order_by(fleet_runs.c.workload, fleet_runs.c.device, fleet_runs.c.node,
                                  fleet_runs.c.created_at).limit(max_rows + 1))
    if len(found) > max_rows:
        raise TooMany(f"the fleet holds more than {max_rows} runs in the window (BENCHD_READS__FLEET_MAX_ROWS): "
                      "name a workload (workload=) or a GPU model (device=)")
    return [FleetRun(run_id=r["run_id"], workload=r["workload"], node=r["node"], device=r["device"],
                     at=r["created_at"], valid=r["valid"], figures=r["figures"] or {},
                     good_output_tokens=r["good_output_tokens"], device_seconds=r["device_seconds"],
                     energy_j=r["energy_j"], state=r["state"] or {}, stack=r["stack"] or {}) for r in found]


def workloads(store: Store, since: datetime) -> list[str]:
    return [r["workload"] for r in store._read(sa.select(fleet_runs.c.workload).distinct()
                                               .where(fleet_runs.c.created_at >= since)
                                               .order_by(fleet_runs.c.workload))]


def backfill(db: sa.Connection) -> None:
    """The fleet's rows from the runs stored before them (migration 0008): each node's newest RUNS succeeded
    generation runs of each workload and GPU model, read newest first, a few columns at a time."""
    from benchd.hardware.sampler import HardwareSummary
    from benchd.measure.fleet import row_of
    from benchd.measure.summary import StageSummary

    def columns(names: str) -> list[sa.ColumnClause]:
        """The columns as migration 0008 has them (JSON ones decoded): later ones may change the schema's."""
        return [sa.column(name, JSON if name in JSONS else None) for name in names.split()]

    table = sa.table("fleet_runs", *columns("run_id workload device node created_at valid figures good_output_tokens "
                                            "device_seconds energy_j state stack"))
    stored = sa.table("runs", *columns("id seq status workload node created_at matrix_id spec summary run_metadata "
                                       "hardware parts energy_per_token_j valid"))
    kept: dict[tuple[str, str, str], int] = {}
    query = (sa.select(stored).where(stored.c.status == "succeeded", stored.c.matrix_id.is_(None))
             .order_by(stored.c.seq.desc()))  # migration 0007's sequence
    for found in db.execute(query.execution_options(yield_per=200)).mappings():
        spec = found["spec"] or {}
        if spec.get("kind", "generate") != "generate" or not found["summary"] or not found["run_metadata"]:
            continue
        stages = [StageSummary.model_validate(s) for s in found["summary"]]
        hardware = HardwareSummary.model_validate(found["hardware"]) if found["hardware"] else None
        # stored before rounds: one round, its first stage the figures'
        row = row_of(1, spec.get("engine", "transformers"), stages, found["parts"], found["run_metadata"],
                     hardware, None, found["energy_per_token_j"], found["valid"])
        if row is None:
            continue
        key = (found["workload"], row["device"], found["node"] or "")
        if kept.get(key, 0) >= RUNS:
            continue
        kept[key] = kept.get(key, 0) + 1
        db.execute(table.insert().values(run_id=found["id"], workload=found["workload"], node=found["node"] or "",
                                         created_at=found["created_at"], **row))
