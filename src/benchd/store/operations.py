"""The store's writes, each a typed operation: what the spool journals (its JSON, kept through outages and restarts,
the same as every benchd since the journal began wrote) and how it applies, idempotently: applied twice, it changes
nothing more."""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, ClassVar, Protocol

import sqlalchemy as sa

from benchd.measure.fleet import run_row
from benchd.measure.outcome import RunOutcome
from benchd.measure.summary import StageSummary
from benchd.store import fleet
from benchd.store.schema import baselines, matrices, requests, run_stages, runs, schedules, timings


class Node(Protocol):
    """Where the store runs: the node (and pod) its rows are written for."""

    node: str
    pod: str | None


class Operation:
    """A journaled write. Each kind registers itself by its name (the JSON's "op"): the spool hands the store's
    thread the JSON back, and read() makes the operation it describes."""

    op: ClassVar[str]
    kinds: ClassVar[dict[str, type[Operation]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Operation.kinds[cls.op] = cls

    def as_json(self) -> dict[str, Any]:
        return {"op": self.op, **{f.name: getattr(self, f.name) for f in fields(self)}}

    @staticmethod
    def read(data: dict[str, Any]) -> Operation:
        import_kinds()
        kind = Operation.kinds.get(data.get("op"))
        if kind is None:
            raise ValueError(f"unknown store operation {data.get('op')!r}")
        return kind(**{k: v for k, v in data.items() if k != "op"})

    def apply(self, db: sa.Connection, node: Node) -> None:
        raise NotImplementedError


# The modules beside this one that define operations: each registers its kinds when imported, so a journal is read
# with all of them however the store was opened (a process that had not imported the history set its change points'
# writes aside as unknown). They import this module, hence imported here when first read, not at its top.
KIND_MODULES = ("benchd.store.history",)


@functools.cache
def import_kinds() -> None:
    """Once a process: every read after the first finds them registered."""
    for name in KIND_MODULES:
        importlib.import_module(name)


def dates(values: dict[str, Any], *keys: str) -> dict[str, Any]:
    """Journaled operations carry ISO times; the columns take datetimes."""
    out = dict(values)
    for key in keys:
        if out.get(key) is not None:
            out[key] = datetime.fromisoformat(out[key])
    return out


def next_seq(db: sa.Connection, table: sa.Table) -> dict[str, Any]:
    """A new row's place (its seq): PostgreSQL's sequence numbers it (the column's default); on SQLite one more than
    the highest, within the insert, which holds the database's only write lock."""
    if db.dialect.name == "postgresql":
        return {}
    return {"seq": sa.select(sa.func.coalesce(sa.func.max(table.c.seq), 0) + 1).scalar_subquery()}


# ---- runs ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateRun(Operation):
    op: ClassVar[str] = "create_run"
    run: dict[str, Any]  # the run's row, queued

    def apply(self, db: sa.Connection, node: Node) -> None:
        row = dates(self.run, "created_at")
        if db.execute(sa.select(runs.c.id).where(runs.c.id == row["id"])).first() is None:
            db.execute(runs.insert().values(**row, node=node.node, pod=node.pod, **next_seq(db, runs)))


@dataclass(frozen=True, slots=True)
class UpdateRun(Operation):
    op: ClassVar[str] = "update_run"
    id: str
    values: dict[str, Any]

    def apply(self, db: sa.Connection, node: Node) -> None:
        db.execute(runs.update().where(runs.c.id == self.id).values(**dates(self.values, "started_at", "finished_at")))


@dataclass(frozen=True, slots=True)
class Requests(Operation):
    """A run's request records, as rows: those with the same keys replaced."""

    op: ClassVar[str] = "requests"
    run_id: str
    rows: list[dict[str, Any]]

    def apply(self, db: sa.Connection, node: Node) -> None:
        keys = [(row["stage_index"], row.get("gpu", ""), row["index"]) for row in self.rows]
        for start in range(0, len(keys), 500):
            db.execute(requests.delete().where(
                requests.c.run_id == self.run_id,
                sa.tuple_(requests.c.stage_index, requests.c.gpu, requests.c["index"]).in_(keys[start:start + 500])))
        db.execute(requests.insert(), [{"run_id": self.run_id, **row} for row in self.rows])


@dataclass(frozen=True, slots=True)
class FinishRun(Operation):
    """A run's end: its row's figures and verdict, one row per generation stage for SQL (and per GPU's stage, in a
    run on every GPU), a timed run's timings, and its place in the fleet's rows (store/fleet.py)."""

    op: ClassVar[str] = "finish_run"
    id: str
    values: dict[str, Any]
    stages: list[dict[str, Any]]
    timings: list[dict[str, Any]]
    fleet: dict[str, Any] | None = None  # journaled before issue 51: none

    @classmethod
    def of(cls, outcome: RunOutcome, finished_at: str) -> FinishRun:
        by_gpu = [("", outcome.stages), *(outcome.part_summaries or {}).items()]
        # The probe position by position goes to a column of its own, read by comparisons only; its figures are in
        # the run's quality summary.
        metadata = outcome.metadata.model_dump(mode="json", exclude={"probe"}) if outcome.metadata is not None \
            else None
        probe = outcome.metadata.probe if outcome.metadata is not None else None
        return cls(outcome.run_id, {
            "status": outcome.status, "error": outcome.error, "error_stage": outcome.error_stage,
            "finished_at": finished_at, "summary": outcome.summaries_json(), "run_metadata": metadata,
            "hardware": outcome.hardware.model_dump(mode="json") if outcome.hardware is not None else None,
            "timeline": outcome.timeline, "energy_per_token_j": outcome.energy_per_token_j,
            "model": outcome.spec.subject, "label": outcome.label, "parts": outcome.parts, "valid": outcome.valid,
            "capacity_requests_per_s": outcome.capacity.requests_per_s if outcome.capacity is not None else None,
            "good_tokens": outcome.good_tokens.model_dump(mode="json") if outcome.good_tokens is not None else None,
            "quality": outcome.quality.model_dump(mode="json") if outcome.quality is not None else None,
            "probe": probe.model_dump(mode="json") if probe is not None else None,
        }, [stage_row(i, gpu, s) for gpu, stages in by_gpu for i, s in enumerate(stages)],
            [{"stage_index": t.stage_index, "series": t.series, "index": t.index, "warmup": t.warmup,
              "seconds": t.seconds} for t in outcome.timings], run_row(outcome))

    def apply(self, db: sa.Connection, node: Node) -> None:
        db.execute(runs.update().where(runs.c.id == self.id).values(**dates(self.values, "finished_at")))
        db.execute(run_stages.delete().where(run_stages.c.run_id == self.id))
        if self.stages:
            db.execute(run_stages.insert(), [{"run_id": self.id, **row} for row in self.stages])
        db.execute(timings.delete().where(timings.c.run_id == self.id))
        if self.timings:
            db.execute(timings.insert(), [{"run_id": self.id, **row} for row in self.timings])
        if self.fleet is not None:
            fleet.write(db, self.id, self.fleet, node.node)


def stage_row(index: int, gpu: str, s: StageSummary) -> dict[str, Any]:
    """A generation stage's columns (run_stages): what SQL reads of its figures."""
    return {"stage_index": index, "gpu": gpu, "stage": s.stage, "status": s.status, "requests": s.requests,
            "errors": s.errors, "duration_s": s.duration_s, "output_tokens_per_s": s.output_tokens_per_s,
            "requests_per_s": s.requests_per_s, "ttft_p50_s": s.ttft_s.p50, "ttft_p99_s": s.ttft_s.p99,
            "itl_p50_s": s.itl_s.p50, "itl_p99_s": s.itl_s.p99, "tpot_p50_s": s.tpot_s.p50,
            "e2e_p99_s": s.e2e_s.p99, "kv_cache_occupancy_peak": s.kv_cache_occupancy_peak}


# ---- matrices, schedules, baselines -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateMatrix(Operation):
    op: ClassVar[str] = "create_matrix"
    row: dict[str, Any]

    def apply(self, db: sa.Connection, node: Node) -> None:
        row = dates(self.row, "created_at")
        if db.execute(sa.select(matrices.c.id).where(matrices.c.id == row["id"])).first() is None:
            db.execute(matrices.insert().values(**row, node=node.node, **next_seq(db, matrices)))


@dataclass(frozen=True, slots=True)
class UpdateMatrix(Operation):
    op: ClassVar[str] = "update_matrix"
    id: str
    values: dict[str, Any]

    def apply(self, db: sa.Connection, node: Node) -> None:
        db.execute(matrices.update().where(matrices.c.id == self.id).values(
            **dates(self.values, "started_at", "finished_at")))


@dataclass(frozen=True, slots=True)
class PutSchedule(Operation):
    op: ClassVar[str] = "put_schedule"
    row: dict[str, Any]

    def apply(self, db: sa.Connection, node: Node) -> None:
        row = dates(self.row, "created_at")
        db.execute(schedules.delete().where(schedules.c.name == row["name"]))
        db.execute(schedules.insert().values(**row))


@dataclass(frozen=True, slots=True)
class DeleteSchedule(Operation):
    op: ClassVar[str] = "delete_schedule"
    name: str  # the schedule's

    def apply(self, db: sa.Connection, node: Node) -> None:
        db.execute(schedules.delete().where(schedules.c.name == self.name))


@dataclass(frozen=True, slots=True)
class SetBaseline(Operation):
    op: ClassVar[str] = "set_baseline"
    row: dict[str, Any]  # workload, run_id (None: cleared), set_at

    def apply(self, db: sa.Connection, node: Node) -> None:
        row = dates(self.row, "set_at")
        db.execute(baselines.delete().where(baselines.c.workload == row["workload"]))
        if db.execute(sa.select(runs.c.id).where(runs.c.id == row["run_id"])).first() is not None:
            db.execute(baselines.insert().values(**row))
