"""HTTP bodies: what the API accepts and returns."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from benchd.measure.quality import QualitySummary
from benchd.measure.summary import StageSummary
from benchd.measure.timings import KernelResult, TrainStepSummary
from benchd.spec import Name, RunSpec
from benchd.spec.fields import Documented, PositiveFloat, Strict

RETRY_AFTER_S = 5  # what a 429 (the queue is full) or a 503 (the database is unreachable) asks clients to wait


class Problem(Documented):
    detail: str
    """What went wrong, in a sentence."""


class ValidationItem(Documented):
    loc: list[str | int]
    """Where: body, query or path, then the field's path."""
    msg: str
    """Why the field is refused."""
    type: str
    """The kind of problem (pydantic's error type, or value_error)."""


class ValidationProblem(Documented):
    detail: list[ValidationItem]
    """Each refused field and why."""


class RunCreated(Documented):
    id: str
    """The run's id."""
    url: str
    """Where the run is read (GET)."""
    status: str
    """queued"""
    bound_s: float | None = None
    """Once its requests start: the most its stages take by its spec (each one's sending to its stop, then its drain);
    null where the engine's pace decides (a closed loop stopped by requests alone)."""
    deadline_s: float | None = None
    """When the daemon stops it, in seconds from its requests' start (BENCHD_LIMITS__MAX_DURATION_S a stage, never under
    its bound)."""


class RunView(Documented):
    id: str
    """The run's id."""
    status: str
    """queued | running | succeeded | failed | cancelled | interrupted"""
    workload: str
    """The spec's name."""
    model: str
    """What it measured: the model, or a kernel run's op."""
    engine: str
    """What carried it out: the generation engine, or the timed kind."""
    label: str | None
    """Its label, as its worker recorded it (the daemon's default filled in)."""
    schedule: str | None
    """The schedule that queued it, if one did."""
    spec: dict[str, Any]
    """The spec as it ran."""
    summary: list[StageSummary | TrainStepSummary | KernelResult] | None
    """Each stage's summary (a generation's), or each timed stage's, by the spec's kind."""
    error: str | None
    """Why it did not succeed."""
    error_stage: str | None = None
    """Where a run that did not succeed ended: queue, load, start, run, worker, daemon."""
    node: str | None = None
    """The node (host) that ran it."""
    pod: str | None = None
    """The pod that ran it, on Kubernetes."""
    matrix_id: str | None = None
    """The matrix it is a variant's run of."""
    metadata: dict[str, Any] | None
    """What identifies the stack it measured: versions, device, host, the engine's resolved settings, the model's cost
    and the device's limits."""
    hardware: dict[str, Any] | None
    """The hardware over its measured window: GPUs' utilization, power, energy and clocks, the host's CPU and memory."""
    parts: dict[str, Any] | None = None
    """A run on every GPU: each GPU's status and stages, and the verdicts of each against its siblings."""
    energy_per_token_j: float | None
    """Joules a measured output token (GPUs' energy over the measured window)."""
    valid: bool | None = None
    """The verdict: every stage valid (a generate run); null: a timed run, or stored before verdicts were kept."""
    capacity_requests_per_s: float | None = None
    """A capacity search's figure: the highest rate found to meet the SLO, in requests a second."""
    good_tokens: dict[str, Any] | None = None
    """What a good token cost: its good output tokens, devices, window and energy, the energy a good token and the
    cost a million at the prices of the daemon that ran it (measure/cost.py's GoodTokens)."""
    quality: QualitySummary | None = None
    """What it generated (real requests or random ids, EOS endings, log-probabilities) and its quality probe's
    figures (the reference text's perplexity under its stack); null: a timed run, or stored before issue 49."""
    created_at: datetime
    """When it was queued."""
    started_at: datetime | None
    """When its run began."""
    finished_at: datetime | None
    """When it ended."""

    @classmethod
    def of(cls, row: dict[str, Any]) -> RunView:
        return cls(metadata=row["run_metadata"],
                   **{k: v for k, v in row.items() if k not in ("run_metadata", "timeline", "probe")})


class RunItem(RunView):
    """A run in a listing: a field too large for it (over 64 KiB stored) is null here and named in `omitted`; GET
    /runs/{id} gives it whole."""

    spec: dict[str, Any] | None
    """The spec as it ran; null when stored larger than a listing shows (omitted names it)."""
    omitted: list[str] = []
    """The fields stored too large for a listing, null here (spec, summary, metadata, hardware, parts, quality): GET
    /runs/{id} gives them."""


class RunPage(Documented):
    items: list[RunItem]
    """As many runs as limit, newest first, or fewer once they fill BENCHD_READS__PAGE_MAX_BYTES."""
    total: int
    """Runs that match."""
    limit: int
    """The most this page may hold."""
    offset: int
    """Where this page starts."""
    next_offset: int | None = None
    """Where the next page starts (offset + items), while runs remain."""


class CancelResult(Documented):
    id: str
    """The run's id."""
    status: str
    """cancelled (it was queued) or cancelling (it is running: it ends as cancelled)."""


class WorkerView(Documented):
    name: str
    """The worker's name."""
    device: str
    """Its slot: cuda:0, or cuda:0+cuda:1 for a tensor-parallel group."""
    gpu: str
    """The gpu label of its series: NVML's index (0+1 for a group), cpu:N for CPU workers, empty for the CPU."""
    state: str
    """starting | ready | exiting (its device broke: replaced after its run) | dead | stopped."""
    pid: int | None
    """Its process id."""
    # the Python environment it runs in (BENCHD_ENVIRONMENTS; current: the daemon's), and what its hello stated: the
    # benchd protocol it speaks and the versions of its stack (None until it said hello)
    environment: str = "current"
    """The Python environment it runs in (BENCHD_ENVIRONMENTS; current: the daemon's)."""
    protocol: int | None = None
    """The benchd protocol it speaks, as its hello stated."""
    python_version: str | None = None
    """Its Python."""
    torch_version: str | None = None
    """Its torch."""
    transformers_version: str | None = None
    """Its transformers."""
    cuda_version: str | None = None
    """The CUDA its torch was built for."""
    busy: bool
    """A run is in progress on it."""
    nice: int | None
    """Its CPU priority (BENCHD_WORKERS__NICE where it had the privilege to take it)."""
    dispatch_priority: int | None
    """The real-time priority its open loops send at (BENCHD_WORKERS__DISPATCH_PRIORITY with the privilege, else 0)."""
    load_error: str | None
    """Why the daemon's model did not load in it."""
    speed: dict[str, Any] | None = None
    """Its device's speed as measured at its start: matmul_flops_per_s by dtype, copy_bytes_per_s, …"""


class Liveness(Documented):
    status: Literal["ok", "failing"]
    """ok, or failing: the daemon must be restarted."""
    reason: str | None = None
    """Why it is failing."""


class Readiness(Documented):
    ready: bool
    """Runs execute, every worker answers and has tried the daemon's model, and the store takes writes."""
    reasons: list[str]
    """Why it is not ready (empty when it is)."""
    alive: bool
    """The run loop, the schedules and the store's writer run, and the run loop moves (/healthz)."""
    model: str
    """The daemon's model (BENCHD_MODEL)."""
    queued: int
    """Runs waiting in the queue."""
    load_error: str | None
    """Why the daemon's model did not load, where it did not."""
    workers: list[WorkerView]
    """Each worker."""
    worker_restarts: int
    """Workers started again after one died or hung."""
    last_restart_s: float | None
    """The latest worker death to its replacement answering, in seconds."""
    store: str
    """starting | ok | degraded (the database is unreachable: writes wait in the journal)."""
    store_pending_writes: int
    """Writes journaled and not yet in the database."""
    store_journal_bytes: int
    """The journal's size, in bytes."""
    store_error: str | None
    """Why the database is unreachable, while it is."""
    store_held_writes: int
    """Writes held in memory while the journal takes none (its disk full, failing or read-only)."""


class ScheduleIn(Strict):
    """Strict as a spec is: true is not 1 and "3600" is not 3600; numbers finite (1e309 is refused)."""

    name: Name
    """The schedule's name."""
    spec: RunSpec
    """The spec each run of it runs."""
    interval_s: PositiveFloat
    """Seconds between its runs."""
    enabled: bool = True
    """Whether it runs."""


class ScheduleView(Documented):
    name: str
    """The schedule's name."""
    spec: dict[str, Any]
    """The spec each run of it runs."""
    interval_s: float
    """Seconds between its runs."""
    enabled: bool
    """Whether it runs."""
    next_due_in_s: float
    """Seconds until its next run is due."""
    last_run_id: str | None
    """Its latest run."""
    skipped: int
    """Ticks that queued nothing (its run still queued or running, or the queue full)."""


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
