"""HTTP bodies: what the API accepts and returns."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from benchd.measure.records import StageSummary
from benchd.measure.timings import KernelResult, TrainStepSummary
from benchd.spec import Name, RunSpec
from benchd.spec.fields import PositiveFloat, Strict

RETRY_AFTER_S = 5  # what a 429 (the queue is full) or a 503 (the database is unreachable) asks clients to wait


class Problem(BaseModel):
    detail: str


class ValidationItem(BaseModel):
    loc: list[str | int]  # where: body, query or path, then the field's path
    msg: str  # why
    type: str


class ValidationProblem(BaseModel):
    detail: list[ValidationItem]


class RunCreated(BaseModel):
    id: str
    url: str
    status: str
    # Once its requests start: the most its stages take by its spec (each one's sending to its stop, then its drain;
    # null where the engine's pace decides: a closed loop stopped by requests alone), and when the daemon stops it
    # (BENCHD_LIMITS__MAX_DURATION_S per stage, never under that bound).
    bound_s: float | None = None
    deadline_s: float | None = None


class RunView(BaseModel):
    id: str
    status: str  # queued | running | succeeded | failed | cancelled | interrupted
    workload: str
    model: str
    engine: str
    label: str | None
    schedule: str | None
    spec: dict[str, Any]
    summary: list[StageSummary | TrainStepSummary | KernelResult] | None  # by the spec's kind
    error: str | None
    error_stage: str | None = None  # where a run that did not succeed ended: queue, load, start, run, worker…
    node: str | None = None  # the node (host) that ran it
    pod: str | None = None
    matrix_id: str | None = None  # the matrix it is a variant's run of
    metadata: dict[str, Any] | None
    hardware: dict[str, Any] | None
    parts: dict[str, Any] | None = None  # a run on every GPU: each GPU's status and stages, and the verdicts
    energy_per_token_j: float | None
    valid: bool | None = None  # the verdict: every stage valid (a generate run); None: a timed run, or older
    capacity_requests_per_s: float | None = None  # a capacity search's figure
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, row: dict[str, Any]) -> RunView:
        return cls(metadata=row["run_metadata"],
                   **{k: v for k, v in row.items() if k not in ("run_metadata", "timeline")})


class RunItem(RunView):
    """A run in a listing: a field too large for it (over 64 KiB stored) is null here and named in `omitted`; GET
    /runs/{id} gives it whole."""

    spec: dict[str, Any] | None
    omitted: list[str] = []  # spec, summary, metadata, hardware, parts


class RunPage(BaseModel):
    items: list[RunItem]  # as many as limit, or fewer once they fill BENCHD_READS__PAGE_MAX_BYTES
    total: int
    limit: int
    offset: int
    next_offset: int | None = None  # where the next page starts (offset + items), while runs remain


class CancelResult(BaseModel):
    id: str
    status: str  # cancelled (it was queued) | cancelling (it is running: it ends as cancelled)


class WorkerView(BaseModel):
    name: str
    device: str  # its slot: cuda:0, or cuda:0+cuda:1 for a tensor-parallel group
    gpu: str  # the gpu label of its series: NVML's index (0+1 for a group), cpu:N for CPU workers, "" for the CPU
    state: str  # starting | ready | exiting (its device broke: replaced after its run) | dead | stopped
    pid: int | None
    # the Python environment it runs in (BENCHD_ENVIRONMENTS; current: the daemon's), and what its hello stated: the
    # benchd protocol it speaks and the versions of its stack (None until it said hello)
    environment: str = "current"
    protocol: int | None = None
    python_version: str | None = None
    torch_version: str | None = None
    transformers_version: str | None = None
    cuda_version: str | None = None
    busy: bool
    nice: int | None  # its CPU priority (BENCHD_WORKERS__NICE when the worker had the privilege to take it)
    # the real-time priority its open loops send at (BENCHD_WORKERS__DISPATCH_PRIORITY with the privilege, else 0)
    dispatch_priority: int | None
    load_error: str | None  # why the daemon's model did not load in it
    # its device's speed as measured at its start (benchd.hardware.speed): matmul_flops_per_s by dtype,
    # copy_bytes_per_s…
    speed: dict[str, Any] | None = None


class Readiness(BaseModel):
    ready: bool
    alive: bool  # the run loop and the schedules run
    model: str
    queued: int
    load_error: str | None
    workers: list[WorkerView]
    worker_restarts: int
    last_restart_s: float | None  # the latest worker death to its replacement answering, in seconds
    store: str  # starting | ok | degraded
    store_pending_writes: int
    store_journal_bytes: int
    store_error: str | None


class ScheduleIn(Strict):
    """Strict as a spec is: true is not 1 and "3600" is not 3600; numbers finite (1e309 is refused)."""

    name: Name
    spec: RunSpec
    interval_s: PositiveFloat
    enabled: bool = True


class ScheduleView(BaseModel):
    name: str
    spec: dict[str, Any]
    interval_s: float
    enabled: bool
    next_due_in_s: float
    last_run_id: str | None
    skipped: int


_RETRY = {"Retry-After": {"description": "Seconds to wait before trying again.", "schema": {"type": "integer"}}}
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "A bearer token is configured and this request lacks it (reads need it "
                                          "with BENCHD_READS__NEED_TOKEN).",
          "headers": {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}}},
    404: {"model": Problem, "description": "No such run or schedule."},
    409: {"model": Problem, "description": "The run has already ended."},
    413: {"model": Problem, "description": "The body is larger than BENCHD_MAX_BODY_BYTES."},
    422: {"model": ValidationProblem, "description": "A field is invalid or over a limit: loc names it."},
    429: {"model": Problem, "description": "The run queue is full, or writes waiting for the database fill the "
                                          "spool.", "headers": _RETRY},
    503: {"model": Problem, "description": "The database is unreachable or all its connections are in use (runs go "
                                          "on; their writes wait), a timed run's device is not measured yet (its "
                                          "worker is starting), or a costly read's slots are taken or its time ran "
                                          "out (BENCHD_READS__*).",
          "headers": _RETRY},
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: ERRORS[code] for code in codes}


def links(**targets: tuple[str, dict[str, str]]) -> dict[str, Any]:
    """OpenAPI links from a response to the operations its ids lead to: name=(operationId, {parameter: expression});
    clients and stateful fuzzers (tests/api/test_fuzz.py) follow them."""
    return {"links": {name: {"operationId": operation, "parameters": parameters}
                      for name, (operation, parameters) in targets.items()}}
