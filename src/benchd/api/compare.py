"""/compare and /baselines: is a run slower than another, or than its workload's baseline?"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Path, Query, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, Field

from benchd.api.deps import AuthDep, ServicesDep
from benchd.api.guard import GuardedRoute
from benchd.api.schemas import errors
from benchd.measure.compare import Comparison, compare, side_from_store
from benchd.report.comparison import comparison_page
from benchd.spec import Name
from benchd.spec.fields import FLOAT_MAX, Strict

router = APIRouter(tags=["compare"], route_class=GuardedRoute)
MAX_RUNS = 100  # run ids on one side


class BaselineIn(Strict):
    run_id: Annotated[str, Field(min_length=1, max_length=32)]


class BaselineView(BaseModel):
    workload: str
    run_id: str


def _side(services, ids: str | None, workload: str | None, label: str | None, last: int, name: str) -> list[str]:
    if ids:
        run_ids = [i for i in ids.split(",") if i]
        if len(run_ids) > MAX_RUNS:
            raise RequestValidationError([{"type": "too_long", "loc": ("query", name),
                                           "msg": f"at most {MAX_RUNS} run ids a side"}])
        missing = [i for i in run_ids if services.store.get_run(i) is None]
        if missing:
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
    """Per metric, B against A: the relative change, its bootstrap interval, and a verdict. Each side is run
    ids, or the latest `last` succeeded runs of `workload` with that side's label."""
    settings = services.settings
    sides = [side_from_store(services.store, _side(services, ids, workload, label, last, name))
             for ids, label, name in ((a, a_label, "a"), (b, b_label, "b"))]
    result = compare(*sides, threshold=settings.compare_threshold if threshold is None else threshold,
                     confidence=settings.compare_confidence if confidence is None else confidence)
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
