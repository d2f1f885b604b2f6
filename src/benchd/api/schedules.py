"""/schedules: named RunSpecs repeated every N seconds."""

from __future__ import annotations

import time

from fastapi import APIRouter, HTTPException, Response, status

from benchd.api.deps import AuthDep, ServicesDep
from benchd.api.guard import GuardedRoute
from benchd.api.schemas import ScheduleIn, ScheduleView, errors, links
from benchd.daemon.schedules import Schedule

router = APIRouter(prefix="/schedules", tags=["schedules"], route_class=GuardedRoute)


def _view(schedule: Schedule) -> ScheduleView:
    return ScheduleView(
        name=schedule.name, spec=schedule.spec.model_dump(mode="json", exclude_unset=True),
        interval_s=schedule.interval_s, enabled=schedule.enabled,
        next_due_in_s=max(0.0, schedule.next_due - time.monotonic()),
        last_run_id=schedule.last_run_id, skipped=schedule.skipped,
    )


@router.get("", response_model=list[ScheduleView])
def list_schedules(services: ServicesDep) -> list[ScheduleView]:
    return [_view(s) for s in sorted(services.daemon.schedules.list(), key=lambda s: s.name)]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ScheduleView, dependencies=[AuthDep],
             responses={**errors(401, 413, 422, 429, 503), 201: links(
                 DeleteSchedule=("delete_schedule_schedules__name__delete", {"name": "$response.body#/name"}))})
def put_schedule(body: ScheduleIn, services: ServicesDep) -> ScheduleView:
    """Create or replace a schedule; its first run is due at once. A run still queued or running when the
    next is due makes the schedule skip that turn: it never piles up behind itself."""
    # checked as it will run; stored as given (the daemon's defaults may change)
    services.admit(body.spec, loc=("spec",))
    return _view(services.daemon.schedules.put(body.name, body.spec, body.interval_s, body.enabled))


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT, responses=errors(401, 404, 422),
               dependencies=[AuthDep])
def delete_schedule(name: str, services: ServicesDep) -> Response:
    if not services.daemon.schedules.delete(name):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no schedule {name}")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
