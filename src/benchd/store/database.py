"""The run history's store: SQLite or PostgreSQL, one schema brought up to date by migrations. Writes are typed
operations (store/operations.py) that go through the spool (journaled, applied in order, retried through outages);
reads go to the database and raise StoreUnavailable while it is down."""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchd.measure.outcome import RunOutcome
from benchd.measure.records import RequestRecord
from benchd.measure.result import StageResult
from benchd.measure.summary import summarize
from benchd.spec import GenerateSpec, validate_spec
from benchd.store import migrate, pages
from benchd.store.journal import dumps
from benchd.store.operations import (
    CreateMatrix,
    CreateRun,
    DeleteSchedule,
    FinishRun,
    Operation,
    PutSchedule,
    SetBaseline,
    UpdateMatrix,
    UpdateRun,
)
from benchd.store.pages import Page
from benchd.store.schema import baselines, matrices, requests, runs, schedules, timings
from benchd.store.spool import Spool, SpoolState, unreachable
from benchd.store.unapplied import Unapplied
from benchd.store.writer import RequestWriter

TERMINAL = ("succeeded", "failed", "cancelled", "interrupted")
# How long a caller that needs its write visible (a new run's row) waits for it before going on spooled.
VISIBLE_WAIT_S = 2.0


class StoreUnavailable(Exception):
    """The database cannot be read right now (writes keep waiting in the spool)."""


def now() -> datetime:
    return datetime.now(UTC)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _aware(value: datetime | None) -> datetime | None:
    """SQLite gives back naive datetimes; everything benchd stores is UTC."""
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


class Store:
    def __init__(self, url: str, spool_dir: str | Path = "benchd-spool", spool_max_bytes: int = 256 << 20,
                 node: str | None = None, pod: str | None = None, on_error=lambda component: None) -> None:
        self.url = url
        self.node, self.pod = node or socket.gethostname(), pod
        # PostgreSQL: UTF-8 whatever the server's encoding (a SQL_ASCII database otherwise sends text undecoded, as
        # bytes, and refuses JSON's \u escapes above 0x7f, so JSON goes as UTF-8 text too).
        postgresql = sa.make_url(url).get_backend_name() == "postgresql"
        connect_args = {"connect_timeout": 5, "client_encoding": "utf8"} if postgresql else {}
        self.engine = sa.create_engine(url, pool_pre_ping=True, connect_args=connect_args,
                                       json_serializer=lambda value: dumps(value).decode())
        if self.engine.dialect.name == "sqlite":
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
            # pysqlite begins transactions itself, and not before DDL: benchd begins them, so that a migration
            # that fails leaves the database as it was (SQLAlchemy's recipe for SQLite).
            sa.event.listen(self.engine, "begin", lambda connection: connection.exec_driver_sql("BEGIN"))
        self.unapplied = Unapplied()
        self.spool = Spool(Path(spool_dir), self._apply, spool_max_bytes, on_error, self.unapplied)
        self.recovered: int | None = None  # runs a crash had left running, once recovery ran

    def start(self) -> None:
        """Migrations, what the journal holds from before, and recovery run on the spool's thread: the daemon
        starts even while the database is down, and catches up when it answers."""
        self.spool.start(prepare=lambda: migrate.upgrade(self.engine), on_ready=self._recover)

    def wait_ready(self, timeout_s: float) -> bool:
        """Whether migrations and recovery have run (the database answered) within timeout_s."""
        return self.spool.ready.wait(timeout_s)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Whether every write so far reached the database within timeout_s."""
        return self.spool.flush(timeout_s)

    @property
    def health(self) -> SpoolState:
        return self.spool.status

    @property
    def alive(self) -> bool:
        """Its writer runs (store/spool.py)."""
        return self.spool.alive

    def refusal(self) -> str | None:
        """Why the store takes no writes now (its journal's disk is full, failing or read-only): what it is given
        meanwhile is held in memory, and the daemon starts and admits no run; None while it takes them."""
        return self.spool.status.journal_error

    def close(self, timeout_s: float = 10.0) -> None:
        self.spool.close(timeout_s)
        self.engine.dispose()

    # ---- writes (journaled) ----------------------------------------------------------------------

    def create_run(self, run_id: str, spec: dict, schedule: str | None = None, matrix_id: str | None = None) -> None:
        parsed = validate_spec(spec)
        self._visible(CreateRun({
            "id": run_id, "status": "queued", "workload": parsed.name, "model": parsed.subject,
            "engine": parsed.runner, "label": spec.get("label"), "schedule": schedule, "spec": spec,
            "created_at": _iso(now()), **({"matrix_id": matrix_id} if matrix_id is not None else {})}))

    def mark_running(self, run_id: str) -> None:
        self._visible(UpdateRun(run_id, {"status": "running", "started_at": _iso(now())}))

    def set_status(self, run_id: str, status: str, error: str | None = None, error_stage: str | None = None) -> None:
        values: dict[str, Any] = {"status": status, "error": error, "error_stage": error_stage}
        if status in TERMINAL:
            values["finished_at"] = _iso(now())
        self._visible(UpdateRun(run_id, values))

    def requests_writer(self, run_id: str) -> RequestWriter:
        return RequestWriter(self, run_id)

    def finish_run(self, outcome: RunOutcome) -> None:
        """The run's end (measure/outcome.py): its figures and verdict, its stages' rows, its timings."""
        self._visible(FinishRun.of(outcome, now().isoformat()))

    def put_schedule(self, name: str, spec: dict, interval_s: float, enabled: bool = True) -> None:
        self.spool.submit(PutSchedule({"name": name, "spec": spec, "interval_s": interval_s, "enabled": enabled,
                                       "created_at": _iso(now())}).as_json())

    def delete_schedule(self, name: str) -> None:
        self.spool.submit(DeleteSchedule(name).as_json())

    def set_baseline(self, workload: str, run_id: str | None) -> None:  # None: clear it
        self._visible(SetBaseline({"workload": workload, "run_id": run_id, "set_at": _iso(now())}))

    def create_matrix(self, matrix_id: str, workload: str, document: dict, variants: list[dict], run_rows: list[dict],
                      baseline: int) -> None:
        """A matrix and its runs in execution order ({run_id, round, variant}); the runs' rows are created apart."""
        self._visible(CreateMatrix({
            "id": matrix_id, "status": "queued", "workload": workload, "document": document, "variants": variants,
            "runs": run_rows, "baseline": baseline, "created_at": _iso(now())}))

    def update_matrix(self, matrix_id: str, **values: Any) -> None:
        if values.get("status") in TERMINAL:
            values["finished_at"] = _iso(now())
        self._visible(UpdateMatrix(matrix_id, values))

    def _visible(self, op: Operation) -> None:
        """A run's state changes are read back at once by clients: wait (briefly) until the database has it,
        unless it is known to be down or the journal takes no writes (the caller goes on; reads of the run answer
        from what is not applied yet meanwhile: store/unapplied.py)."""
        seq = self.spool.submit(op.as_json())
        if self.spool.status.state != "degraded" and self.spool.takes_writes():
            self.spool.wait(seq, VISIBLE_WAIT_S)

    def _apply(self, op: dict[str, Any]) -> None:
        """A journaled operation, on the spool's thread (store/operations.py)."""
        operation = Operation.read(op)
        with self.engine.begin() as db:
            operation.apply(db, self)

    def _recover(self) -> None:
        """At start-up, after the journal is applied: this node's runs a crash left running become interrupted,
        with a summary from the request rows written before it; queued ones (their queue was in memory) become
        cancelled."""
        with self.engine.begin() as db:
            ended = now()
            stale = db.execute(sa.select(runs.c.id, runs.c.spec).where(
                runs.c.status == "running", sa.or_(runs.c.node == self.node, runs.c.node.is_(None)))).all()
            for run_id, spec in stale:
                summaries = self._summaries_from_rows(db, run_id, spec)
                db.execute(runs.update().where(runs.c.id == run_id).values(
                    status="interrupted", error="the daemon stopped while the run was in progress",
                    error_stage="run", finished_at=ended, summary=summaries or None))
            db.execute(runs.update().where(
                runs.c.status == "queued", sa.or_(runs.c.node == self.node, runs.c.node.is_(None))).values(
                status="cancelled", error="the daemon stopped before the run started", error_stage="queue",
                finished_at=ended))
            db.execute(matrices.update().where(  # their runs ended above: the comparison was never made
                matrices.c.status.in_(("queued", "running")),
                sa.or_(matrices.c.node == self.node, matrices.c.node.is_(None))).values(
                status="interrupted", error="the daemon stopped before the matrix's runs ended", finished_at=ended))
        self.recovered = len(stale)

    @staticmethod
    def _summaries_from_rows(db: sa.Connection, run_id: str, spec: dict) -> list[dict]:
        try:
            parsed = validate_spec(spec)  # as stored: by this benchd, or one whose spec held every section
        except ValueError:
            parsed = None
        stages: dict[int, tuple[str, list[RequestRecord]]] = {}
        for row in db.execute(requests.select().where(requests.c.run_id == run_id)
                              .order_by(requests.c.stage_index, requests.c["index"])).mappings():
            stages.setdefault(row["stage_index"], (row["stage"] or "", []))[1].append(RequestRecord.from_row(row))
        out = []
        for index, (label, records) in sorted(stages.items()):
            if not isinstance(parsed, GenerateSpec):
                out.append(summarize(label, "interrupted", records))
            else:
                stage = StageResult.of(parsed, index, label, 0.0)
                stage.records, stage.status = records, "interrupted"
                out.append(stage.summary())
        return [s.model_dump(mode="json") for s in out]

    # ---- reads -----------------------------------------------------------------------------------

    def _read(self, query) -> list[dict[str, Any]]:
        try:
            with self.engine.connect() as db:
                return [_row(r) for r in db.execute(query).mappings()]
        except sa.exc.SQLAlchemyError as error:
            if isinstance(error, sa.exc.TimeoutError):  # the pool's connections all in use: a 503, never a 500
                raise StoreUnavailable(f"the database is busy: {str(error).splitlines()[0]}") from None
            if unreachable(error):
                raise StoreUnavailable(f"the database is unreachable: {str(error).splitlines()[0]}") from None
            raise

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        """As the database has it, with what its writes not applied yet set (from the moment it is queued)."""
        for _ in range(3):  # read again where a write was applied meanwhile: the two would not agree
            version = self.unapplied.version
            try:
                rows, down = self._read(runs.select().where(runs.c.id == run_id)), None
            except StoreUnavailable as error:
                rows, down = [], error
            held = self.unapplied.run(run_id)
            if version == self.unapplied.version:
                break
        if down is not None and (held is None or "created_at" not in held):
            raise down
        if held is None:
            return rows[0] if rows else None
        if not rows and "created_at" not in held:  # its row was never written (an update of a run not stored)
            return None
        base = rows[0] if rows else {**{c.name: None for c in runs.c}, "node": self.node, "pod": self.pod}
        return {**base, **held}

    def list_runs(self, status: str | None = None, model: str | None = None, workload: str | None = None,
                  schedule: str | None = None, limit: int = 50, offset: int = 0,
                  page_max_bytes: int = pages.PAGE_MAX_BYTES) -> Page:
        """Newest first, within page_max_bytes: large fields left out (store/pages.py)."""
        conditions = [column == value for column, value in (
            (runs.c.status, status), (runs.c.model, model), (runs.c.workload, workload), (runs.c.schedule, schedule),
        ) if value is not None]
        return pages.page(self, runs, pages.RUN_FIELDS, conditions, limit, offset, page_max=page_max_bytes)

    def _landed(self, run_id: str) -> None:
        """A run's records are read once its own writes are in the database: while its end waits in the journal or
        in memory, they may lack its last ones (StoreUnavailable: a 503 with Retry-After, never a short answer)."""
        if self.unapplied.run(run_id) is not None:
            raise StoreUnavailable(f"run {run_id}'s latest writes are not in the database yet (the store: "
                                   f"{self.refusal() or self.spool.status.last_error or 'applying them'}): its "
                                   "records follow them")

    def request_rows(self, run_id: str) -> list[dict[str, Any]]:
        self._landed(run_id)
        query = (requests.select().where(requests.c.run_id == run_id)
                 .order_by(requests.c.stage_index, requests.c.gpu, requests.c["index"]))
        return [{k: v for k, v in row.items() if k != "run_id"} for row in self._read(query)]

    def records(self, run_id: str, stage_index: int = 0, gpu: str | None = None) -> list[RequestRecord]:
        """A stage's records as measured (stamps relative to the stage's start): every GPU's, or one's."""
        self._landed(run_id)
        query = requests.select().where(requests.c.run_id == run_id, requests.c.stage_index == stage_index)
        if gpu is not None:
            query = query.where(requests.c.gpu == gpu)
        query = query.order_by(requests.c.gpu, requests.c["index"])
        return [RequestRecord.from_row(row) for row in self._read(query)]

    def timing_rows(self, run_id: str) -> list[dict[str, Any]]:
        self._landed(run_id)
        query = (timings.select().where(timings.c.run_id == run_id)
                 .order_by(timings.c.stage_index, timings.c.series, timings.c["index"]))
        return [{k: v for k, v in row.items() if k != "run_id"} for row in self._read(query)]

    def latest_runs(self, workload: str, label: str | None, limit: int) -> list[str]:
        """The newest succeeded runs of a workload (with that label, when given), by the store's sequence."""
        query = runs.select().where(runs.c.workload == workload, runs.c.status == "succeeded")
        if label is not None:
            query = query.where(runs.c.label == label)
        return [row["id"] for row in self._read(query.order_by(runs.c.seq.desc()).limit(limit))]

    def baseline(self, workload: str) -> str | None:
        rows = self._read(sa.select(baselines.c.run_id).where(baselines.c.workload == workload))
        return rows[0]["run_id"] if rows else None

    def list_baselines(self) -> list[dict[str, Any]]:
        return self._read(baselines.select().order_by(baselines.c.workload))

    def get_matrix(self, matrix_id: str) -> dict[str, Any] | None:
        rows = self._read(matrices.select().where(matrices.c.id == matrix_id))
        return rows[0] if rows else None

    def list_matrices(self, workload: str | None = None, limit: int = 50, offset: int = 0,
                      page_max_bytes: int = pages.PAGE_MAX_BYTES) -> Page:
        """Newest first, within page_max_bytes: large fields left out (store/pages.py)."""
        conditions = [matrices.c.workload == workload] if workload is not None else []
        return pages.page(self, matrices, pages.MATRIX_FIELDS, conditions, limit, offset, page_max=page_max_bytes)

    def list_schedules(self) -> list[dict[str, Any]]:
        return self._read(schedules.select().order_by(schedules.c.name))


def _row(mapping) -> dict[str, Any]:
    return {k: _aware(v) if isinstance(v, datetime) else v for k, v in mapping.items()}


def _sqlite_pragmas(connection, _record) -> None:
    connection.isolation_level = None  # no transactions of pysqlite's own (see Store.__init__)
    cursor = connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")  # readers (HTTP) never wait for the writer
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.close()
