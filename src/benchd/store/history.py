"""A workload's history from the store: the light columns of its runs for its series, the stacks of a few runs,
and the change points found in them (written through the spool like every write)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Protocol

import sqlalchemy as sa

from benchd.measure.history import ChangePoint, SeriesRun
from benchd.store.operations import Node, Operation
from benchd.store.schema import change_points, run_stages, runs


class Store(Protocol):
    """What of the store (store/database.py's Store) this module uses."""

    spool: Any

    def _read(self, query) -> list[dict[str, Any]]: ...


@dataclass(slots=True)
class Changes:
    items: list[ChangePoint]
    total: int

# The history's figures: the first stage's columns (run_stages, the whole run's row), the run's energy, and its
# quality probe's perplexity (read by the database from the run's quality summary).
_COLUMNS = {"output_tokens_per_s": run_stages.c.output_tokens_per_s, "ttft_s.p50": run_stages.c.ttft_p50_s,
            "ttft_s.p99": run_stages.c.ttft_p99_s, "itl_s.p50": run_stages.c.itl_p50_s,
            "itl_s.p99": run_stages.c.itl_p99_s, "tpot_s.p50": run_stages.c.tpot_p50_s,
            "energy_per_token_j": runs.c.energy_per_token_j,
            "perplexity": runs.c.quality["perplexity"].as_float()}
MAX_RUNS = 10_000  # runs of one workload a history reads at most (the newest)
MAX_STACKS = 200  # runs whose stack one read returns at most


def series_runs(store: Store, workload: str, limit: int, node: str | None = None,
                device: str | None = None) -> list[SeriesRun]:
    """The newest `limit` succeeded generation runs of the workload (those of a matrix are its experiment, not the
    history), oldest first, in the order the store took them (a clock that jumped moves none); JSON fields are read
    by the database (device_name, throttled_fraction), so a run costs a row of numbers whatever its metadata holds."""
    device_name = runs.c.run_metadata["device_name"].as_string()
    # throttled_fraction: the input of the clock-state hook (measure/history.py, clock_state)
    query = (sa.select(runs.c.id, runs.c.created_at, runs.c.node, runs.c.valid, device_name.label("device"),
                       runs.c.hardware["throttled_fraction"].as_float().label("throttled_fraction"),
                       runs.c.run_metadata["engine_run"].as_integer().label("engine_run"),
                       *(column.label(name) for name, column in _COLUMNS.items()))
             .join(run_stages, sa.and_(run_stages.c.run_id == runs.c.id, run_stages.c.stage_index == 0,
                                       run_stages.c.gpu == ""))
             .where(runs.c.workload == workload, runs.c.status == "succeeded", runs.c.matrix_id.is_(None)))
    if node is not None:
        query = query.where(runs.c.node == node)
    if device is not None:
        query = query.where(device_name == device)
    rows = store._read(query.order_by(runs.c.seq.desc()).limit(min(limit, MAX_RUNS)))
    return [SeriesRun(run_id=r["id"], at=r["created_at"], node=r["node"] or "", device=r["device"] or "",
                      valid=r["valid"], throttled_fraction=r["throttled_fraction"], cold=r["engine_run"] == 1,
                      figures={name: r[name] for name in _COLUMNS}) for r in reversed(rows)]


def series_version(store: Store, workload: str, node: str | None = None) -> tuple[Any, ...]:
    """What changes whenever the runs series_runs reads or the workload's change points change: their counts and
    newest sequence and times (one indexed read each: the answers built from them are kept until this changes)."""
    query = sa.select(sa.func.count().label("n"), sa.func.max(runs.c.seq).label("at")).where(
        runs.c.workload == workload, runs.c.status == "succeeded", runs.c.matrix_id.is_(None))
    if node is not None:
        query = query.where(runs.c.node == node)
    found = store._read(query)[0]
    changes = store._read(sa.select(sa.func.count().label("n"), sa.func.max(change_points.c.detected_at).label("at"),
                                    sa.func.max(change_points.c.withdrawn_at).label("out"))
                          .where(change_points.c.workload == workload))[0]
    return found["n"], found["at"], changes["n"], changes["at"], changes["out"]


def stacks(store: Store, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Each run's spec, metadata, hardware summary and node: its stack (measure/stack.py)."""
    out: dict[str, dict[str, Any]] = {}
    ids = list(dict.fromkeys(run_ids))[:MAX_STACKS]
    if ids:
        query = sa.select(runs.c.id, runs.c.run_metadata, runs.c.hardware, runs.c.engine, runs.c.spec, runs.c.node) \
            .where(runs.c.id.in_(ids))
        for row in store._read(query):
            out[row["id"]] = row
    return out


def stacks_and_figures(store: Store, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Each run's stack's columns (as stacks()) and its figures' (its stage summaries, its energy per token)."""
    out: dict[str, dict[str, Any]] = {}
    ids = list(dict.fromkeys(run_ids))[:MAX_STACKS]
    if ids:
        query = sa.select(runs.c.id, runs.c.run_metadata, runs.c.hardware, runs.c.spec, runs.c.node, runs.c.summary,
                          runs.c.energy_per_token_j).where(runs.c.id.in_(ids))
        for row in store._read(query):
            out[row["id"]] = row
    return out


def workloads(store: Store) -> list[str]:
    return [r["workload"] for r in store._read(sa.select(change_points.c.workload).distinct()
                                               .order_by(change_points.c.workload))]


@dataclass(slots=True)
class Workloads:
    items: list[dict[str, Any]]  # workload, runs, succeeded, last_run_at, models, change_points
    total: int


def list_workloads(store: Store, limit: int, offset: int = 0) -> Workloads:
    """Every workload with a stored run, by name: its runs, those that succeeded, when its newest was queued, the
    models it ran, and its change points still found (a count a workload, read by the workload's index)."""
    succeeded = sa.func.sum(sa.case((runs.c.status == "succeeded", 1), else_=0))
    query = (sa.select(runs.c.workload, sa.func.count().label("runs"), succeeded.label("succeeded"),
                       sa.func.max(runs.c.created_at).label("last_run_at"))
             .group_by(runs.c.workload))
    total = store._read(sa.select(sa.func.count(sa.distinct(runs.c.workload)).label("n")))[0]["n"]
    items = store._read(query.order_by(runs.c.workload).limit(limit).offset(offset))
    names = [item["workload"] for item in items]
    models: dict[str, list[str]] = {name: [] for name in names}
    changes: dict[str, int] = {}
    if names:
        for row in store._read(sa.select(runs.c.workload, runs.c.model).distinct()
                               .where(runs.c.workload.in_(names)).order_by(runs.c.model)):
            models[row["workload"]].append(row["model"])
        changes = {row["workload"]: row["n"] for row in store._read(
            sa.select(change_points.c.workload, sa.func.count().label("n"))
            .where(change_points.c.workload.in_(names), change_points.c.active.is_(True))
            .group_by(change_points.c.workload))}
    return Workloads(items=[{**item, "succeeded": int(item["succeeded"] or 0), "models": models[item["workload"]],
                             "change_points": changes.get(item["workload"], 0)} for item in items], total=total)


def list_change_points(store: Store, workload: str | None = None, figure: str | None = None,
                       node: str | None = None, active: bool | None = None, limit: int = 50,
                       offset: int = 0) -> Changes:
    """Newest first: by the place of the run a change starts at (the store's sequence, not a clock)."""
    conditions = [column == value for column, value in (
        (change_points.c.workload, workload), (change_points.c.figure, figure), (change_points.c.node, node),
        (change_points.c.active, active)) if value is not None]
    query = change_points.select().where(*conditions)
    total = store._read(sa.select(sa.func.count().label("n")).select_from(query.subquery()))[0]["n"]
    place = sa.select(runs.c.seq).where(runs.c.id == change_points.c.run_id).scalar_subquery()
    rows = store._read(query.order_by(place.desc(), change_points.c.figure, change_points.c.id)
                       .limit(limit).offset(offset))
    return Changes(items=[_view(r) for r in rows], total=total)


def get_change_point(store: Store, change_id: str) -> ChangePoint | None:
    rows = store._read(change_points.select().where(change_points.c.id == change_id))
    return _view(rows[0]) if rows else None


def by_matrix(store: Store, matrix_id: str) -> list[ChangePoint]:
    return [_view(r) for r in store._read(change_points.select().where(change_points.c.matrix_id == matrix_id))]


def _view(row: dict[str, Any]) -> ChangePoint:
    return ChangePoint(**row["details"], id=row["id"], workload=row["workload"], device=row["device"],
                       node=row["node"], figure=row["figure"], run_id=row["run_id"], at=row["at"],
                       direction=row["direction"], relative_change=row["relative_change"], p_value=row["p_value"],
                       active=row["active"], detected_at=row["detected_at"], withdrawn_at=row["withdrawn_at"],
                       confirmation=row["confirmation"])


# ---- writes ------------------------------------------------------------------------------------------------

# The columns of a change point; what else its view holds goes in details.
_OWN = ("id", "workload", "device", "node", "figure", "run_id", "at", "direction", "relative_change", "p_value",
        "active", "detected_at", "withdrawn_at", "confirmation")


def row_of(change: ChangePoint) -> dict[str, Any]:
    """A change point as a journaled row (ISO times); its confirmation is written apart (confirm())."""
    data = change.model_dump(mode="json")
    return {**{k: data[k] for k in _OWN if k != "confirmation"},
            "details": {k: v for k, v in data.items() if k not in _OWN}}


def save(store: Store, rows: list[dict[str, Any]], withdrawn: list[str], at: datetime) -> None:
    """One analysis' outcome for a series: its change points as found now (new ones inserted, known ones updated:
    their confirmation kept), and those it no longer finds withdrawn."""
    store.spool.submit(ChangePoints(rows, withdrawn, at.isoformat()).as_json())


def confirm(store: Store, change_id: str, confirmation: dict[str, Any], matrix_id: str | None) -> None:
    store.spool.submit(ChangePointConfirmation(change_id, confirmation, matrix_id).as_json())


@dataclass(frozen=True, slots=True)
class ChangePoints(Operation):
    op: ClassVar[str] = "change_points"
    rows: list[dict[str, Any]]
    withdrawn: list[str]
    at: str

    def apply(self, db: sa.Connection, node: Node) -> None:
        for row in self.rows:
            values = {**row, **{k: datetime.fromisoformat(row[k]) for k in ("at", "detected_at", "withdrawn_at")
                                if row.get(k) is not None}}
            known = db.execute(sa.select(change_points.c.detected_at).where(change_points.c.id == row["id"])).first()
            if known is None:
                if db.execute(sa.select(runs.c.id).where(runs.c.id == row["run_id"])).first() is not None:
                    db.execute(change_points.insert().values(**values))
            else:
                values.pop("detected_at", None)
                db.execute(change_points.update().where(change_points.c.id == row["id"]).values(**values))
        if self.withdrawn:
            db.execute(change_points.update().where(change_points.c.id.in_(self.withdrawn),
                                                    change_points.c.active.is_(True))
                       .values(active=False, withdrawn_at=datetime.fromisoformat(self.at)))


@dataclass(frozen=True, slots=True)
class ChangePointConfirmation(Operation):
    op: ClassVar[str] = "change_point_confirmation"
    id: str
    confirmation: dict[str, Any]
    matrix_id: str | None

    def apply(self, db: sa.Connection, node: Node) -> None:
        db.execute(change_points.update().where(change_points.c.id == self.id).values(
            confirmation=self.confirmation, matrix_id=self.matrix_id))
