"""/compare and /baselines: is a run slower than another, or than its workload's baseline?"""

from __future__ import annotations

import time
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Path, Query, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from pydantic import Field

from benchd.api.deps import AuthDep, ServicesDep
from benchd.api.guard import GuardedRoute
from benchd.api.schemas import RETRY_AFTER_S, errors
from benchd.measure.compare import compare
from benchd.measure.comparison import Comparison
from benchd.measure.deadline import OverBudget
from benchd.report.comparison import comparison_page
from benchd.spec import Name
from benchd.spec.fields import FLOAT_MAX, Documented, Strict
from benchd.store.pages import request_counts, run_statuses
from benchd.store.sides import side_from_store

router = APIRouter(tags=["compare"], route_class=GuardedRoute)
MAX_RUNS = 100  # run ids on one side


class BaselineIn(Strict):
    run_id: Annotated[str, Field(min_length=1, max_length=32)]
    """The run that becomes the workload's baseline."""


class BaselineView(Documented):
    workload: str
    """The workload."""
    run_id: str
    """Its baseline run: scheduled runs are compared with it."""


def _refused(name: str, why: str, kind: str = "value_error") -> RequestValidationError:
    return RequestValidationError([{"type": kind, "loc": ("query", name), "msg": why}])


def _side(services, ids: str | None, workload: str | None, label: str | None, last: int, name: str) -> list[str]:
    if ids is not None:
        run_ids = ids.split(",")
        if len(run_ids) > MAX_RUNS:
            raise _refused(name, f"at most {MAX_RUNS} run ids a side", "too_long")
        if "" in run_ids:
            raise _refused(name, "an empty run id: give run ids separated by single commas")
        # A run given twice would count twice: its samples weigh double in the interval, and the same two runs
        # repeated 100 times a side turned "no significant change" into "slower".
        if repeated := sorted({i for i in run_ids if run_ids.count(i) > 1}):
            raise _refused(name, f"run {', '.join(repeated)} given more than once: each run counts once")
        found = run_statuses(services.store, run_ids)
        if missing := [i for i in run_ids if i not in found]:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no run {', '.join(missing)}")
        return run_ids
    if workload is None:
        raise RequestValidationError([{"type": "missing", "loc": ("query", name),
                                       "msg": f"give run ids, or a workload (with {name}_label) for its latest runs"}])
    run_ids = services.store.latest_runs(workload, label, last)
    if not run_ids:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"{name}: no succeeded run of {workload}"
                            + (f" labelled {label}" if label else ""))
    return run_ids


@router.get("/compare", response_model=Comparison, responses={**errors(404, 422, 503), 200: {
    "content": {"application/json": {}, "text/html": {}}}})
def compare_runs(
    services: ServicesDep,
    a: Annotated[str | None, Query(description="run ids, comma-separated")] = None,
    b: Annotated[str | None, Query(description="run ids, comma-separated")] = None,
    workload: str | None = None,
    a_label: str | None = None,
    b_label: str | None = None,
    last: Annotated[int, Query(ge=1, le=100)] = 1,
    threshold: Annotated[float | None, Query(ge=0, le=FLOAT_MAX, allow_inf_nan=False)] = None,
    confidence: Annotated[float | None, Query(gt=0.5, lt=1, allow_inf_nan=False)] = None,
    format: Literal["json", "html"] = "json",
):
    """Per metric, B against A: the relative change, its interval, and a verdict. Each side is run
    ids (each once, at most 100), or the latest `last` succeeded runs of `workload` with that side's label.
    Anonymous and costly, so bounded (BENCHD_READS__COMPARE_*): the requests both sides hold (422 past the limit),
    comparisons at once and the seconds one takes (503 with Retry-After past either)."""
    settings, reads = services.settings, services.settings.reads
    ids = {name: _side(services, given, workload, label, last, name)
           for given, label, name in ((a, a_label, "a"), (b, b_label, "b"))}
    counts = request_counts(services.store, sorted({*ids["a"], *ids["b"]}))
    held = sum(counts.get(run_id, 0) for side in ids.values() for run_id in side)
    if held > reads.compare_max_requests:
        raise _refused("b" if b is not None else "a", (
            f"the two sides hold {held:,} requests, more than a comparison loads "
            f"({reads.compare_max_requests:,}, BENCHD_READS__COMPARE_MAX_REQUESTS): compare fewer runs"))
    with services.compares.taken():
        deadline = time.monotonic() + reads.compare_timeout_s
        try:
            sides = (side_from_store(services.store, ids["a"], deadline),
                     side_from_store(services.store, ids["b"], deadline))
            result = compare(*sides, threshold=settings.compare_threshold if threshold is None else threshold,
                             confidence=settings.compare_confidence if confidence is None else confidence,
                             deadline=deadline)
        except OverBudget:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, (
                f"the comparison took more than {reads.compare_timeout_s:g} s (BENCHD_READS__COMPARE_TIMEOUT_S): "
                "try again when the daemon is less busy, or compare fewer runs"),
                headers={"Retry-After": str(RETRY_AFTER_S)}) from None
        if format == "html":
            return HTMLResponse(comparison_page(result, *sides))
        return result


@router.get("/baselines", response_model=list[BaselineView], responses=errors(503))
def list_baselines(services: ServicesDep) -> list[BaselineView]:
    return [BaselineView(workload=r["workload"], run_id=r["run_id"]) for r in services.store.list_baselines()]


@router.put("/baselines/{workload}", response_model=BaselineView, responses=errors(401, 404, 413, 422, 503),
            dependencies=[AuthDep])
def set_baseline(workload: Annotated[Name, Path()], body: BaselineIn, services: ServicesDep) -> BaselineView:
    """Scheduled runs of this workload are compared with this run; regressions set benchd_regression_detected."""
    row = services.store.get_run(body.run_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no run {body.run_id}")
    if row["workload"] != workload or row["status"] != "succeeded":
        raise RequestValidationError([{"type": "value_error", "loc": ("body", "run_id"), "msg": (
            f"run {body.run_id} is a {row['status']} run of {row['workload']}, not a succeeded run of {workload}")}])
    if row.get("valid") is False:
        raise RequestValidationError([{"type": "value_error", "loc": ("body", "run_id"), "msg": (
            f"run {body.run_id} is invalid (see its stages' verdicts): an invalid run is never a baseline")}])
    if (row.get("run_metadata") or {}).get("engine_run") == 1:  # against warm runs it would decide nothing
        raise RequestValidationError([{"type": "value_error", "loc": ("body", "run_id"), "msg": (
            f"run {body.run_id} ran cold (the first run after its engine started: the engine's own warm-up is in "
            "its figures): a baseline is a warm run")}])
    services.store.set_baseline(workload, body.run_id)
    return BaselineView(workload=workload, run_id=body.run_id)


@router.get("/baselines/{workload}", response_model=BaselineView, responses=errors(404, 422, 503))
def get_baseline(workload: Annotated[Name, Path()], services: ServicesDep) -> BaselineView:
    run_id = services.store.baseline(workload)
    if run_id is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"{workload} has no baseline")
    return BaselineView(workload=workload, run_id=run_id)


@router.delete("/baselines/{workload}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response,
               responses=errors(401, 404, 422, 503), dependencies=[AuthDep])
def clear_baseline(workload: Annotated[Name, Path()], services: ServicesDep) -> Response:
    """Its scheduled runs are no longer compared (benchd_regression_detected keeps its last values)."""
    if services.store.baseline(workload) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"{workload} has no baseline")
    services.store.set_baseline(workload, None)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
