"""HTTP bodies: what the API accepts and returns."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field

from benchd.records import StageSummary
from benchd.spec import RunSpec
from benchd.timed.kernel import KernelResult
from benchd.timed.train_step import TrainStepSummary


class Problem(BaseModel):
    detail: str


class ValidationProblem(BaseModel):
    detail: list[dict[str, Any]]


class RunCreated(BaseModel):
    id: str
    url: str
    status: str


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
    metadata: dict[str, Any] | None
    hardware: dict[str, Any] | None
    energy_per_token_j: float | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, row: dict[str, Any]) -> RunView:
        return cls(metadata=row["run_metadata"],
                   **{k: v for k, v in row.items() if k not in ("run_metadata", "timeline")})


class RunPage(BaseModel):
    items: list[RunView]
    total: int
    limit: int
    offset: int


class CancelResult(BaseModel):
    id: str
    status: str  # cancelled (it was queued) | cancelling (it is running: it ends as cancelled)


class ScheduleIn(BaseModel):
    name: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:\-]+$")]
    spec: RunSpec
    interval_s: Annotated[float, Field(gt=0)]
    enabled: bool = True


class ScheduleView(BaseModel):
    name: str
    spec: dict[str, Any]
    interval_s: float
    enabled: bool
    next_due_in_s: float
    last_run_id: str | None
    skipped: int


ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "A bearer token is configured and this request lacks it."},
    404: {"model": Problem, "description": "No such run or schedule."},
    422: {"model": ValidationProblem, "description": "A field is invalid or over a limit: loc names it."},
    429: {"model": Problem, "description": "The run queue is full."},
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: ERRORS[code] for code in codes}
