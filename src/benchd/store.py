"""Run history: runs, their stages and per-request records, and schedules; SQLite or PostgreSQL, one schema."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from benchd.report import CSV_COLUMNS, request_row
from benchd.runner import RunOutcome
from benchd.spec import RunSpec
from benchd.timed import TimedOutcome

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)

metadata = sa.MetaData()

runs = sa.Table(
    "runs", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("status", sa.String(16), nullable=False, index=True),
    sa.Column("workload", sa.String(100), nullable=False, index=True),
    sa.Column("model", sa.String(500), nullable=False, index=True),
    sa.Column("engine", sa.String(32), nullable=False),
    sa.Column("label", sa.String(200)),
    sa.Column("schedule", sa.String(100), index=True),
    sa.Column("spec", JSON, nullable=False),
    sa.Column("summary", JSON),  # list of stage summaries
    sa.Column("run_metadata", JSON),
    sa.Column("hardware", JSON),  # the run's hardware summary
    sa.Column("energy_per_token_j", sa.Float),
    sa.Column("error", sa.Text),
    sa.Column("created_at", TIMESTAMP, nullable=False, index=True),
    sa.Column("started_at", TIMESTAMP),
    sa.Column("finished_at", TIMESTAMP),
)

# One row per stage with the figures dashboards plot, so SQL needs no JSON paths.
run_stages = sa.Table(
    "run_stages", metadata,
    sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("stage_index", sa.Integer, primary_key=True),
    sa.Column("stage", sa.String(100), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("requests", sa.Integer, nullable=False),
    sa.Column("errors", sa.Integer, nullable=False),
    sa.Column("duration_s", sa.Float, nullable=False),
    sa.Column("output_tokens_per_s", sa.Float, nullable=False),
    sa.Column("requests_per_s", sa.Float, nullable=False),
    sa.Column("ttft_p50_s", sa.Float),
    sa.Column("ttft_p99_s", sa.Float),
    sa.Column("itl_p50_s", sa.Float),
    sa.Column("itl_p99_s", sa.Float),
    sa.Column("tpot_p50_s", sa.Float),
    sa.Column("e2e_p99_s", sa.Float),
    sa.Column("kv_cache_occupancy_peak", sa.Float),
)

_REQUEST_TYPES = {
    "index": sa.Integer, "warmup": sa.Integer, "prompt_tokens": sa.Integer, "max_new_tokens": sa.Integer,
    "output_tokens": sa.Integer, "stage": sa.String(100), "request_id": sa.String(64), "error": sa.Text,
    "trace_id": sa.String(32), "token_times_s": sa.Text,
}
requests = sa.Table(
    "requests", metadata,
    sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("stage_index", sa.Integer, primary_key=True),
    *(sa.Column(name, _REQUEST_TYPES.get(name, sa.Float), primary_key=name == "index") for name in CSV_COLUMNS),
)

# Timed runs (training steps, kernels): every repetition, warm-up flagged, so nothing measured is lost.
timings = sa.Table(
    "timings", metadata,
    sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("stage_index", sa.Integer, primary_key=True),
    sa.Column("series", sa.String(32), primary_key=True),
    sa.Column("index", sa.Integer, primary_key=True),
    sa.Column("warmup", sa.Boolean, nullable=False),
    sa.Column("seconds", sa.Float, nullable=False),
)

schedules = sa.Table(
    "schedules", metadata,
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("spec", JSON, nullable=False),
    sa.Column("interval_s", sa.Float, nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False),
    sa.Column("created_at", TIMESTAMP, nullable=False),
)

baselines = sa.Table(
    "baselines", metadata,
    sa.Column("workload", sa.String(100), primary_key=True),
    sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("set_at", TIMESTAMP, nullable=False),
)

TERMINAL = ("succeeded", "failed", "cancelled", "interrupted")


def now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(slots=True)
class Page:
    items: list[dict[str, Any]]
    total: int


class Store:
    def __init__(self, url: str) -> None:
        self.url = url
        # UTF-8 whatever the server's encoding: a SQL_ASCII database otherwise sends text undecoded (bytes),
        # and refuses JSON's \u escapes above 0x7f, so JSON goes as UTF-8 text too.
        connect_args = {"client_encoding": "utf8"} if sa.make_url(url).get_backend_name() == "postgresql" else {}
        self.engine = sa.create_engine(url, future=True, pool_pre_ping=True, connect_args=connect_args,
                                       json_serializer=partial(json.dumps, ensure_ascii=False))
        if self.engine.dialect.name == "sqlite":
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        metadata.create_all(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    # ---- runs ----------------------------------------------------------------------------------

    def create_run(self, run_id: str, spec: dict, schedule: str | None = None) -> None:
        with self.engine.begin() as db:
            parsed = RunSpec.model_validate(spec)
            db.execute(runs.insert().values(
                id=run_id, status="queued", workload=parsed.name, model=parsed.subject, engine=parsed.runner,
                label=spec.get("label"), schedule=schedule, spec=spec, created_at=now(),
            ))

    def mark_running(self, run_id: str) -> None:
        self._update(run_id, status="running", started_at=now())

    def set_status(self, run_id: str, status: str, error: str | None = None) -> None:
        values: dict[str, Any] = {"status": status, "error": error}
        if status in TERMINAL:
            values["finished_at"] = now()
        self._update(run_id, **values)

    def finish_run(self, run_id: str, outcome: RunOutcome | TimedOutcome) -> None:
        """Store the outcome with every stage and request record (or timing), in one transaction."""
        summaries = outcome.summaries()
        meta = outcome.metadata.model_dump(mode="json") if outcome.metadata else None
        with self.engine.begin() as db:
            db.execute(runs.update().where(runs.c.id == run_id).values(
                status=outcome.status, error=outcome.error, finished_at=now(),
                summary=[s.model_dump(mode="json") for s in summaries], run_metadata=meta,
                hardware=outcome.hardware.model_dump(mode="json") if outcome.hardware else None,
                energy_per_token_j=outcome.hardware.energy_per_output_token_joules if outcome.hardware else None,
                model=outcome.spec.subject, label=meta.get("label") if meta else outcome.spec.label,
            ))
            if isinstance(outcome, TimedOutcome):
                rows = [{"run_id": run_id, "stage_index": t.stage_index, "series": t.series, "index": t.index,
                         "warmup": t.warmup, "seconds": t.seconds} for t in outcome.timings]
                if rows:
                    db.execute(timings.insert(), rows)
                return
            stage_rows = [{
                "run_id": run_id, "stage_index": i, "stage": s.stage, "status": s.status,
                "requests": s.requests, "errors": s.errors, "duration_s": s.duration_s,
                "output_tokens_per_s": s.output_tokens_per_s, "requests_per_s": s.requests_per_s,
                "ttft_p50_s": s.ttft_s.p50, "ttft_p99_s": s.ttft_s.p99, "itl_p50_s": s.itl_s.p50,
                "itl_p99_s": s.itl_s.p99, "tpot_p50_s": s.tpot_s.p50, "e2e_p99_s": s.e2e_s.p99,
                "kv_cache_occupancy_peak": s.kv_cache_occupancy_peak,
            } for i, s in enumerate(summaries)]
            if stage_rows:
                db.execute(run_stages.insert(), stage_rows)
            request_rows = [
                {"run_id": run_id, "stage_index": i, **request_row(stage.label, record, stage.start_s)}
                for i, stage in enumerate(outcome.stages) for record in stage.records
            ]
            if request_rows:
                db.execute(requests.insert(), request_rows)

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as db:
            row = db.execute(runs.select().where(runs.c.id == run_id)).mappings().first()
        return dict(row) if row else None

    def list_runs(self, status: str | None = None, model: str | None = None, workload: str | None = None,
                  schedule: str | None = None, limit: int = 50, offset: int = 0) -> Page:
        conditions = [column == value for column, value in (
            (runs.c.status, status), (runs.c.model, model), (runs.c.workload, workload), (runs.c.schedule, schedule),
        ) if value is not None]
        query = runs.select().where(*conditions)
        with self.engine.connect() as db:
            total = db.execute(sa.select(sa.func.count()).select_from(query.subquery())).scalar_one()
            rows = db.execute(query.order_by(runs.c.created_at.desc(), runs.c.id).limit(limit).offset(offset))
            return Page(items=[dict(r) for r in rows.mappings()], total=total)

    def request_rows(self, run_id: str) -> list[dict[str, Any]]:
        query = (requests.select().where(requests.c.run_id == run_id)
                 .order_by(requests.c.stage_index, requests.c.index))
        with self.engine.connect() as db:
            return [{k: v for k, v in row.items() if k not in ("run_id", "stage_index")}
                    for row in db.execute(query).mappings()]

    def timing_rows(self, run_id: str) -> list[dict[str, Any]]:
        query = (timings.select().where(timings.c.run_id == run_id)
                 .order_by(timings.c.stage_index, timings.c.series, timings.c.index))
        with self.engine.connect() as db:
            return [{k: v for k, v in row.items() if k != "run_id"} for row in db.execute(query).mappings()]

    def recover(self) -> int:
        """At start-up: runs a crash left running become interrupted; queued ones (their queue was in memory)
        become cancelled."""
        with self.engine.begin() as db:
            interrupted = db.execute(runs.update().where(runs.c.status == "running").values(
                status="interrupted", error="the daemon stopped while the run was in progress",
                finished_at=now())).rowcount
            db.execute(runs.update().where(runs.c.status == "queued").values(
                status="cancelled", error="the daemon stopped before the run started", finished_at=now()))
        return interrupted

    def _update(self, run_id: str, **values: Any) -> None:
        with self.engine.begin() as db:
            db.execute(runs.update().where(runs.c.id == run_id).values(**values))

    def latest_runs(self, workload: str, label: str | None, limit: int) -> list[str]:
        """The newest succeeded runs of a workload (with that label, when given)."""
        query = runs.select().where(runs.c.workload == workload, runs.c.status == "succeeded")
        if label is not None:
            query = query.where(runs.c.label == label)
        with self.engine.connect() as db:
            rows = db.execute(query.order_by(runs.c.created_at.desc()).limit(limit)).mappings()
            return [row["id"] for row in rows]

    # ---- baselines -----------------------------------------------------------------------------

    def set_baseline(self, workload: str, run_id: str) -> None:
        with self.engine.begin() as db:
            db.execute(baselines.delete().where(baselines.c.workload == workload))
            db.execute(baselines.insert().values(workload=workload, run_id=run_id, set_at=now()))

    def baseline(self, workload: str) -> str | None:
        with self.engine.connect() as db:
            return db.execute(sa.select(baselines.c.run_id).where(baselines.c.workload == workload)).scalar()

    def list_baselines(self) -> list[dict[str, Any]]:
        with self.engine.connect() as db:
            return [dict(r) for r in db.execute(baselines.select().order_by(baselines.c.workload)).mappings()]

    # ---- schedules -----------------------------------------------------------------------------

    def put_schedule(self, name: str, spec: dict, interval_s: float, enabled: bool = True) -> None:
        with self.engine.begin() as db:
            db.execute(schedules.delete().where(schedules.c.name == name))
            db.execute(schedules.insert().values(name=name, spec=spec, interval_s=interval_s, enabled=enabled,
                                                 created_at=now()))

    def delete_schedule(self, name: str) -> bool:
        with self.engine.begin() as db:
            return db.execute(schedules.delete().where(schedules.c.name == name)).rowcount > 0

    def list_schedules(self) -> list[dict[str, Any]]:
        with self.engine.connect() as db:
            return [dict(r) for r in db.execute(schedules.select().order_by(schedules.c.name)).mappings()]


def _sqlite_pragmas(connection, _record) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")  # readers (HTTP) never wait for the writer (the engine thread)
    cursor.close()

