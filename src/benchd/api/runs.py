"""/runs: submit, list, inspect, cancel, follow, and fetch per-request records."""

from __future__ import annotations

import csv
import io
from typing import Annotated, Literal

from fastapi import APIRouter, Body, HTTPException, Query, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse

from benchd.api.deps import AuthDep, ServicesDep
from benchd.api.guard import GuardedRoute
from benchd.api.schemas import (
    RETRY_AFTER_S,
    CancelResult,
    RunCreated,
    RunItem,
    RunPage,
    RunView,
    errors,
    links,
)
from benchd.daemon.lifecycle import deadline_s
from benchd.daemon.queue import QueueFull
from benchd.daemon.streams import RunEvent
from benchd.models.duration import run_bound_s
from benchd.report.outputs import write_csv
from benchd.report.pages import run_page
from benchd.spec import RunSpec
from benchd.store.database import TERMINAL

router = APIRouter(prefix="/runs", tags=["runs"], route_class=GuardedRoute)
OFFSET_MAX = 10**9


def _run_or_404(services, run_id: str) -> dict:
    row = services.store.get_run(run_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no run {run_id}")
    return row


RUN_ID = {"run_id": "$response.body#/id"}


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=RunCreated, dependencies=[AuthDep],
             responses={**errors(401, 413, 422, 429, 503), 202: links(
                 GetRun=("get_run_runs__run_id__get", RUN_ID), CancelRun=("cancel_run_runs__run_id__delete", RUN_ID),
                 RunRequests=("run_requests_runs__run_id__requests_get", RUN_ID),
                 RunTimings=("run_timings_runs__run_id__timings_get", RUN_ID))})
def submit_run(spec: Annotated[RunSpec, Body()], services: ServicesDep, request: Request,
               response: Response) -> RunCreated:
    """Queue a run; it starts when the runs before it have finished. What is known before anything loads is
    checked here (422 naming the field): the limits; paths under BENCHD_MODEL_ROOTS; an openai run's hosts and key
    variable (BENCHD_OPENAI__HOSTS, …__KEY_ENVS); requests longer than the model's positions (a preset's, or a
    directory's config.json) or than its cache; memory on the device; and time: a stage, or a timed run, that
    could not end within BENCHD_LIMITS__MAX_DURATION_S at the device's measured speed (503 for a timed run until
    its worker has measured it).

    Only the worker can find, and fails the run with (error_stage load): a hub model's shape, a model or tokenizer
    that does not load, a quantization the GPU lacks, a dataset that does not parse, a path changed since it was
    admitted, a warm-up the installed transformers cannot do (async batching under 5.17 with paged sdpa), and what
    happens on the device itself (out of memory; a run slower than its bounds: stopped at the limit, a kernel past
    its deadline ended by the supervisor)."""
    spec = services.admit(spec)
    try:
        run_id = services.daemon.submit(spec)
    except QueueFull as error:
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, str(error),
                            headers={"Retry-After": str(RETRY_AFTER_S)}) from None
    url = str(request.url_for("get_run", run_id=run_id))
    response.headers["Location"] = url
    return RunCreated(id=run_id, url=url, status="queued", bound_s=run_bound_s(spec),
                      deadline_s=deadline_s(spec, services.settings.limits.max_duration_s,
                                            services.settings.limits.max_run_duration_s))


@router.get("", response_model=RunPage, responses=errors(422, 503))
def list_runs(
    services: ServicesDep,
    status_: Annotated[str | None, Query(alias="status")] = None,
    model: str | None = None,
    workload: str | None = None,
    schedule: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=OFFSET_MAX)] = 0,
) -> RunPage:
    """Newest first: up to `limit` runs within BENCHD_READS__PAGE_MAX_BYTES (`next_offset` says where the next page
    starts); a field stored larger than 64 KiB is left out of its item and named in its `omitted`."""
    page = services.store.list_runs(status_, model, workload, schedule, limit, offset,
                                    services.settings.reads.page_max_bytes)
    return RunPage(items=[RunItem(metadata=r["run_metadata"], omitted=omitted,
                                  **{k: v for k, v in r.items() if k != "run_metadata"})
                          for r, omitted in zip(page.items, page.omitted)],
                   total=page.total, limit=limit, offset=offset, next_offset=page.next_offset)


@router.get("/{run_id}", response_model=RunView, responses=errors(404, 422, 503))
def get_run(run_id: str, services: ServicesDep) -> RunView:
    return RunView.of(_run_or_404(services, run_id))


@router.delete("/{run_id}", response_model=CancelResult, responses=errors(401, 404, 409, 422, 503),
               dependencies=[AuthDep])
def cancel_run(run_id: str, services: ServicesDep) -> CancelResult:
    """Cancel a queued run, or stop a running one (it keeps what it measured)."""
    row = _run_or_404(services, run_id)
    # Its end stored (or held while the store takes no writes) is its end, though its loop may not have let go yet.
    result = services.daemon.cancel(run_id) if row["status"] not in TERMINAL else None
    if result is None:
        raise HTTPException(status.HTTP_409_CONFLICT, f"run {run_id} has already ended ({row['status']})")
    return CancelResult(id=run_id, status=result)


@router.get("/{run_id}/events", responses={**errors(404, 422, 503), 200: {
    "content": {"text/event-stream": {}},
    "description": "Server-sent events: `status` (queued, running), `progress` while running, and a final "
                   "`summary` (status, error, stages), after which the stream ends."}})
async def run_events(run_id: str, services: ServicesDep) -> StreamingResponse:
    """A heartbeat comment opens the stream and comes through every 15 s of silence (daemon/streams.py)."""
    await run_in_threadpool(_run_or_404, services, run_id)

    async def ended() -> RunEvent | None:
        row = await run_in_threadpool(services.store.get_run, run_id)
        return _summary_of(row) if row["status"] in TERMINAL else None

    return StreamingResponse(services.events.stream(run_id, ended), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _summary_of(row: dict) -> RunEvent:
    return RunEvent("summary", {"status": row["status"], "error": row["error"], "stages": row["summary"] or []},
                    final=True)


@router.get("/{run_id}/requests", responses={**errors(404, 422, 503), 200: {
    "content": {"application/json": {}, "text/csv": {}},
    "description": "One record per request (warm-up flagged), stamps in seconds from the stage's start."}})
def run_requests(run_id: str, services: ServicesDep,
                 format: Literal["json", "csv"] = "json") -> Response:
    _run_or_404(services, run_id)
    with services.records.taken():
        rows = services.store.request_rows(run_id)
        if format == "csv":
            buffer = io.StringIO()
            write_csv(rows, buffer)
            return Response(buffer.getvalue(), media_type="text/csv",
                            headers={"Content-Disposition": f'attachment; filename="{run_id}-requests.csv"'})
        return JSONResponse(rows)


@router.get("/{run_id}/timings", responses={**errors(404, 422, 503), 200: {
    "content": {"application/json": {}, "text/csv": {}},
    "description": "Training-step and kernel runs: every timed repetition (warm-up flagged), in seconds."}})
def run_timings(run_id: str, services: ServicesDep, format: Literal["json", "csv"] = "json") -> Response:
    _run_or_404(services, run_id)
    with services.records.taken():
        rows = services.store.timing_rows(run_id)
        if format == "csv":
            buffer = io.StringIO()
            writer = csv.DictWriter(buffer, fieldnames=["stage_index", "series", "index", "warmup", "seconds"])
            writer.writeheader()
            writer.writerows(rows)
            return Response(buffer.getvalue(), media_type="text/csv",
                            headers={"Content-Disposition": f'attachment; filename="{run_id}-timings.csv"'})
        return JSONResponse(rows)


def _as_json(responses: dict) -> dict:
    """Error responses documented as JSON on a route that answers HTML: FastAPI lists a response's `model` under the
    route's own media type, so each body is named by its schema instead (the other routes register them)."""
    return {code: {**{k: v for k, v in response.items() if k != "model"}, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{response['model'].__name__}"}}}}
        for code, response in responses.items()}


@router.get("/{run_id}/report", response_class=HTMLResponse, responses={**_as_json(errors(404, 422, 503)), 200: {
    "content": {"text/html": {}},
    "description": "The run's report: a self-contained page (inline CSS and SVG, nothing fetched) with its summary, "
                   "latency distributions, requests over time, engine load, hardware and stack."}})
def run_report(run_id: str, services: ServicesDep) -> HTMLResponse:
    """A page for people: what GET /runs/{id}, /requests and /timings return, drawn."""
    row = _run_or_404(services, run_id)
    kind = (row["spec"] or {}).get("kind", "generate")
    with services.records.taken():
        rows = services.store.request_rows(run_id) if kind == "generate" else services.store.timing_rows(run_id)
        return HTMLResponse(run_page(row, rows))
