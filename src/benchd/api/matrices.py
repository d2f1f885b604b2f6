"""/matrices: one spec's variants (the cross-product of the fields it varies) run interleaved and compared with a
baseline variant."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, HTTPException, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse

from benchd.api.deps import AuthDep, ServicesDep, problem
from benchd.api.guard import GuardedRoute
from benchd.api.runs import _as_json
from benchd.api.schemas import RETRY_AFTER_S, errors, links
from benchd.daemon.queue import QueueFull
from benchd.measure.matrix import MatrixComparison
from benchd.report.matrix import matrix_page
from benchd.spec.fields import Documented
from benchd.spec.matrix import MatrixProblem, parse_matrix
from benchd.store.pages import run_statuses

router = APIRouter(prefix="/matrices", tags=["matrices"], route_class=GuardedRoute)

EXAMPLE = {"name": "ab", "model": "tiny", "workload": {"stop": {"requests": 8}},
           "matrix": {"quantization": ["none", "int8_weight_only"], "attn_implementation": ["sdpa", "eager"]},
           "repeats": 3}


class MatrixCreated(Documented):
    id: str
    """The matrix's id."""
    url: str
    """Where the matrix is read (GET)."""
    status: str
    """queued"""
    runs: list[str]
    """Its runs' ids in the order they execute: every variant once a round."""


class MatrixRun(Documented):
    run_id: str
    """The run's id."""
    round: int
    """The round it runs in."""
    variant: int
    """The variant's index."""
    status: str | None
    """The run's status as stored now."""


class MatrixView(Documented):
    """In a listing, a field stored larger than 64 KiB is null and named in `omitted` (GET /matrices/{id} gives it
    whole)."""

    id: str
    """The matrix's id."""
    status: str
    """queued | running | succeeded | failed | cancelled | interrupted"""
    workload: str
    """The workload its variants share."""
    document: dict[str, Any] | None
    """As submitted: the spec's fields, matrix, repeats, baseline."""
    variants: list[dict[str, Any]] | None
    """Each variant: index, label, values, spec (as it runs)."""
    baseline: int
    """The baseline variant's index."""
    runs: list[MatrixRun] | None
    """Its runs, in the order they execute."""
    comparison: MatrixComparison | None
    """Every variant against the baseline, once every run has ended."""
    error: str | None
    """Why it did not succeed."""
    node: str | None
    """The node that ran it."""
    created_at: datetime
    """When it was queued."""
    started_at: datetime | None
    """When its first run began."""
    finished_at: datetime | None
    """When its last run ended."""
    omitted: list[str] = []
    """The fields stored too large for a listing, null here (document, variants, runs, comparison): GET /matrices/{id}
    gives them."""


def _matrix_or_404(services, matrix_id: str) -> dict:
    row = services.store.get_matrix(matrix_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no matrix {matrix_id}")
    return row


def _view(services, row: dict, omitted: list[str] | None = None) -> MatrixView:
    omitted = omitted or []
    if row["runs"] is None:
        return MatrixView(**row, omitted=omitted)
    statuses = run_statuses(services.store, [run["run_id"] for run in row["runs"]])  # not each run's whole row
    runs = [MatrixRun(**run, status=statuses.get(run["run_id"])) for run in row["runs"]]
    return MatrixView(**{**row, "runs": runs}, omitted=omitted)


MATRIX_ID = {"matrix_id": "$response.body#/id"}


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=MatrixCreated, dependencies=[AuthDep],
             responses={**errors(401, 413, 422, 429, 503), 202: links(
                 GetMatrix=("get_matrix_matrices__matrix_id__get", MATRIX_ID),
                 CancelMatrix=("cancel_matrix_matrices__matrix_id__delete", MATRIX_ID),
                 MatrixReport=("matrix_report_matrices__matrix_id__report_get", MATRIX_ID),
                 GetFirstRun=("get_run_runs__run_id__get", {"run_id": "$response.body#/runs/0"}),
                 CancelFirstRun=("cancel_run_runs__run_id__delete", {"run_id": "$response.body#/runs/0"}))})
def submit_matrix(body: Annotated[dict[str, Any], Body(examples=[EXAMPLE])], services: ServicesDep,
                  request: Request, response: Response) -> MatrixCreated:
    """A spec's fields with `matrix` (dotted field path → the values it takes), `repeats` (rounds; default 3) and
    `baseline` (a variant's index or values; default the first). Its runs are queued together, every variant once a
    round (429 while the queue lacks room for them, 422 when it never could: more runs than BENCHD_QUEUE_MAX); each
    variant is admitted as a run would be (422 naming the field, the variant in the message)."""
    try:
        matrix = parse_matrix(body)
    except MatrixProblem as error:
        raise RequestValidationError([problem(loc, msg) for loc, msg in error.problems]) from None
    variants = matrix.variants()
    runs, room = len(variants) * matrix.repeats, services.settings.queue_max
    if runs > room:  # it would never fit, however long the client waited: not a 429
        where = ("repeats",) if matrix.repeats > 1 else ("matrix",)
        raise RequestValidationError([problem(where, (
            f"{len(variants)} variants × {matrix.repeats} repeats are {runs:,} runs, more than the run queue ever "
            f"holds ({room}, BENCHD_QUEUE_MAX): fewer variants or repeats"))])
    specs, problems = [], []
    for variant in variants:
        try:
            specs.append(services.admit(variant.spec))
        except RequestValidationError as refused:
            for item in refused.errors():
                found = {**item, "msg": f"variant {variant.label}: {item['msg']}"}
                if found not in problems:
                    problems.append(found)
    if problems:
        raise RequestValidationError(problems)
    try:
        matrix_id, run_ids = services.daemon.submit_matrix(matrix, specs)
    except QueueFull as error:
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, str(error),
                            headers={"Retry-After": str(RETRY_AFTER_S)}) from None
    url = str(request.url_for("get_matrix", matrix_id=matrix_id))
    response.headers["Location"] = url
    return MatrixCreated(id=matrix_id, url=url, status="queued", runs=run_ids)


@router.get("", response_model=list[MatrixView], responses=errors(422, 503))
def list_matrices(services: ServicesDep, workload: str | None = None,
                  limit: Annotated[int, Query(ge=1, le=100)] = 20,
                  offset: Annotated[int, Query(ge=0, le=10**9)] = 0) -> list[MatrixView]:
    """Newest first: up to `limit` matrices within BENCHD_READS__PAGE_MAX_BYTES (fewer once they fill it: the next
    page starts at offset + their number); a field stored larger than 64 KiB is null and named in `omitted`."""
    page = services.store.list_matrices(workload, limit, offset, services.settings.reads.page_max_bytes)
    return [_view(services, row, omitted) for row, omitted in zip(page.items, page.omitted)]


@router.get("/{matrix_id}", response_model=MatrixView, responses=errors(404, 422, 503))
def get_matrix(matrix_id: str, services: ServicesDep) -> MatrixView:
    return _view(services, _matrix_or_404(services, matrix_id))


@router.delete("/{matrix_id}", response_model=MatrixView, responses=errors(401, 404, 409, 422, 503),
               dependencies=[AuthDep])
def cancel_matrix(matrix_id: str, services: ServicesDep) -> MatrixView:
    """Cancel the runs still queued or running; the matrix is then compared on the runs that ended."""
    row = _matrix_or_404(services, matrix_id)
    if not services.daemon.matrices.cancel(matrix_id, services.daemon.cancel):
        raise HTTPException(status.HTTP_409_CONFLICT, f"matrix {matrix_id} has already ended ({row['status']})")
    return _view(services, _matrix_or_404(services, matrix_id))


@router.get("/{matrix_id}/report", response_class=HTMLResponse, responses={
    **_as_json(errors(404, 422, 503)), 200: {"content": {"text/html": {}},
                                             "description": "The matrix's page: variants side by side."}})
def matrix_report(matrix_id: str, services: ServicesDep) -> HTMLResponse:
    row = _matrix_or_404(services, matrix_id)
    with services.records.taken():
        runs = {run["run_id"]: services.store.records(run["run_id"], 0) for run in row["runs"]}
        return HTMLResponse(matrix_page(row, runs))
