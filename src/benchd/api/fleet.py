"""/fleet: for each workload and GPU model, the distribution across nodes of their newest runs, each node's place in
it with an interval and a verdict, the outliers with what sets them apart, what a good token costs, and the change
points told the node's or the fleet's (docs/guides/fleet.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, status
from fastapi.responses import HTMLResponse

from benchd.api.deps import ServicesDep
from benchd.api.guard import GuardedRoute
from benchd.api.schemas import errors
from benchd.daemon.fleet import report
from benchd.measure.fleet_changes import FleetReport
from benchd.report.fleet import fleet_page
from benchd.spec import Name
from benchd.store import fleet

router = APIRouter(tags=["fleet"], route_class=GuardedRoute)
HTML: dict[str, Any] = {"content": {"application/json": {}, "text/html": {}}}  # a route's two media types


# A read of the fleet's rows (each node's newest 20 runs of a workload) and of the active change points, within
# BENCHD_READS__FLEET_SLOTS at once (503 past them) and BENCHD_READS__FLEET_MAX_ROWS rows (422 past it); a plain
# function: FastAPI runs it on its thread pool, off the event loop.
@router.get("/fleet", response_model=FleetReport, responses={**errors(422, 503), 200: HTML})
def get_fleet(services: ServicesDep, workload: Annotated[Name | None, Query()] = None,
              device: Annotated[str | None, Query(max_length=253)] = None,
              node: Annotated[str | None, Query(max_length=253)] = None,
              format: Literal["json", "html"] = "json"):
    """Every workload the fleet ran in its window (BENCHD_FLEET__MAX_AGE_S), or one (workload=), by GPU model (or
    one: device=): each node's place (or one node's: node=, against every node's distribution), and the change
    points of those workloads told the node's or the fleet's."""
    settings = services.settings
    with services.fleets.taken():
        try:
            found = report(services.store, settings.fleet, settings.prices, workload, device, node,
                           settings.reads.fleet_max_rows)
        except fleet.TooMany as error:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, str(error)) from None
    if format == "html":
        return HTMLResponse(fleet_page(found))
    return found
