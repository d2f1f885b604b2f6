"""/workloads, /history and /changes: the workloads stored, each one's series of runs, the change points found in
them with what explains each, and the interleaved matrix that confirms one."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Response, status
from fastapi.responses import HTMLResponse

from benchd import heap
from benchd.api.deps import AuthDep, ServicesDep
from benchd.api.guard import GuardedRoute
from benchd.api.runs import _as_json
from benchd.api.schemas import RETRY_AFTER_S, errors
from benchd.daemon.history import NotConfirmable
from benchd.daemon.queue import QueueFull
from benchd.measure.deadline import OverBudget, in_time
from benchd.measure.history import ChangePoint, FigureName
from benchd.measure.history_view import HistoryView, view
from benchd.report.history import changes_page, history_page
from benchd.spec import Name
from benchd.spec.fields import Documented
from benchd.store import history

router = APIRouter(tags=["history"], route_class=GuardedRoute)
OFFSET_MAX = 10**9
WORKLOADS_LINKED = 200  # workloads the change points' page links to, by name
HTML: dict[str, Any] = {"content": {"application/json": {}, "text/html": {}}}  # a route's two media types


class ChangePage(Documented):
    items: list[ChangePoint]
    """Change points, newest first."""
    total: int
    """Change points that match."""
    limit: int
    """The most this page may hold."""
    offset: int
    """Where this page starts."""


class WorkloadView(Documented):
    workload: str
    """The workload (a spec's name)."""
    runs: int
    """Its runs stored, in any status (a matrix's too)."""
    succeeded: int
    """Those that succeeded."""
    last_run_at: datetime
    """When its newest run was queued."""
    models: list[str]
    """The models its runs ran."""
    change_points: int
    """Change points its history still finds (GET /changes?workload=…)."""
    baseline: str | None
    """The run its scheduled runs are compared with (PUT /baselines/{workload})."""
    schedules: list[str]
    """The schedules that run it."""


class WorkloadPage(Documented):
    items: list[WorkloadView]
    """Workloads, by name."""
    total: int
    """Workloads with a stored run."""
    limit: int
    """The most this page may hold."""
    offset: int
    """Where this page starts."""


@router.get("/workloads", response_model=WorkloadPage, responses=errors(422, 503))
def list_workloads(services: ServicesDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                   offset: Annotated[int, Query(ge=0, le=OFFSET_MAX)] = 0) -> WorkloadPage:
    """Every workload with a stored run, by name: its runs, the models they ran, its change points, its baseline
    and the schedules that run it."""
    page = history.list_workloads(services.store, limit, offset)
    baselines = {row["workload"]: row["run_id"] for row in services.store.list_baselines()}
    scheduled: dict[str, list[str]] = {}
    for schedule in sorted(services.daemon.schedules.list(), key=lambda s: s.name):
        scheduled.setdefault(schedule.spec.name, []).append(schedule.name)
    return WorkloadPage(items=[WorkloadView(**item, baseline=baselines.get(item["workload"]),
                                            schedules=scheduled.get(item["workload"], [])) for item in page.items],
                        total=page.total, limit=limit, offset=offset)


# Reads only: the analysis runs after each run on the daemon's history thread (daemon/history.py), never in a
# request; a history is what the store holds, at most `limit` runs (the newest), drawn between the change points
# stored for it. An answer is built once a version of the series (its runs, its change points, the daemon's analyses
# of it) and kept (BENCHD_READS__HISTORY_KEPT_BYTES); building one takes one of BENCHD_READS__HISTORY_SLOTS, within
# BENCHD_READS__HISTORY_TIMEOUT_S. Handlers are plain functions: FastAPI runs them on its thread pool.
@router.get("/history/{workload}", response_model=HistoryView, responses={**errors(404, 422, 503), 200: HTML})
def get_history(workload: Annotated[Name, Path()], services: ServicesDep,
                limit: Annotated[int, Query(ge=1, le=history.MAX_RUNS)] = 500,
                node: Annotated[str | None, Query(max_length=253)] = None,
                format: Literal["json", "html"] = "json") -> Response:
    """The workload's series (one a GPU model and node): each headline figure's points, oldest first, its segments
    between change points, the change points with the stack between their segments, and the runs left out
    (invalid, or under another clock state). Anonymous and up to 10,000 runs, so bounded: answers built at once
    and the seconds one takes (503 with Retry-After past either, BENCHD_READS__HISTORY_*); an answer is built once
    a new run or analysis of the workload, and kept."""
    store, reads = services.store, services.settings.reads
    version = (services.daemon.history.analyses.get(workload, 0), *history.series_version(store, workload, node))
    if version[1] == 0:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no succeeded run of {workload}"
                            + (f" on node {node}" if node else ""))
    media = "text/html; charset=utf-8" if format == "html" else "application/json"
    key = (workload, node, limit, format)
    if (body := services.answers.get(key, version)) is not None:
        return Response(body, media_type=media)
    with services.histories.taken():
        deadline = time.monotonic() + reads.history_timeout_s
        try:
            runs = history.series_runs(store, workload, limit, node=node)
            if not runs:  # succeeded runs, but none a generation run's (no figures for a history)
                raise HTTPException(status.HTTP_404_NOT_FOUND, f"no succeeded generation run of {workload}"
                                    + (f" on node {node}" if node else ""))
            stored = history.list_change_points(store, workload, node=node, active=True, limit=1_000).items
            found = view(workload, runs, stored, limit, services.settings.compare_confidence, deadline)
            in_time(deadline)
            body = history_page(found).encode() if format == "html" else found.model_dump_json().encode()
        except OverBudget:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, (
                f"the history took more than {reads.history_timeout_s:g} s to build "
                "(BENCHD_READS__HISTORY_TIMEOUT_S): try again when the daemon is less busy, or ask for fewer runs"),
                headers={"Retry-After": str(RETRY_AFTER_S)}) from None
        del runs, stored, found
        heap.trim()  # what the build freed goes back to the system, not kept in this thread's malloc arena
    services.answers.put(key, version, body)
    return Response(body, media_type=media)


@router.get("/changes", response_model=ChangePage, responses={**errors(422, 503), 200: HTML})
def list_changes(services: ServicesDep,
                 workload: Annotated[str | None, Query(max_length=100)] = None,
                 figure: FigureName | None = None,
                 node: Annotated[str | None, Query(max_length=253)] = None,
                 active: bool = True,
                 limit: Annotated[int, Query(ge=1, le=500)] = 50,
                 offset: Annotated[int, Query(ge=0, le=OFFSET_MAX)] = 0,
                 format: Literal["json", "html"] = "json"):
    """Change points, newest first: those the latest analysis of their series still finds (active=false: those
    withdrawn since, as more runs made them noise)."""
    page = history.list_change_points(services.store, workload, figure, node, active, limit, offset)
    if format == "html":
        known = history.list_workloads(services.store, WORKLOADS_LINKED).items
        return HTMLResponse(changes_page(page.items, page.total, workload,
                                         [(w["workload"], w["change_points"]) for w in known]))
    return ChangePage(items=page.items, total=page.total, limit=limit, offset=offset)


def _change_or_404(services, change_id: str) -> ChangePoint:
    found = history.get_change_point(services.store, change_id)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no change point {change_id}")
    return found


@router.get("/changes/{change_id}", response_model=ChangePoint, responses=errors(404, 422, 503))
def get_change(change_id: Annotated[str, Path(max_length=32)], services: ServicesDep) -> ChangePoint:
    return _change_or_404(services, change_id)


@router.post("/changes/{change_id}/confirm", status_code=status.HTTP_202_ACCEPTED, response_model=ChangePoint,
             responses={**_as_json(errors(401, 404, 409, 422, 429, 503))}, dependencies=[AuthDep])
def confirm_change(change_id: Annotated[str, Path(max_length=32)], services: ServicesDep) -> ChangePoint:
    """Run the two sides' environments against each other, interleaved on the device the series ran on
    (BENCHD_HISTORY__CONFIRM_REPEATS rounds), and attach the verdict on the change point's figure when the matrix
    ends: confirmed, or not reproduced (the series changed with the node, not the stack). 409 when the two sides
    ran in one environment, in one this daemon does not declare, or on another node."""
    _change_or_404(services, change_id)
    try:
        return services.daemon.history.confirm(change_id)
    except NotConfirmable as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    except QueueFull as error:
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, str(error),
                            headers={"Retry-After": str(RETRY_AFTER_S)}) from None
