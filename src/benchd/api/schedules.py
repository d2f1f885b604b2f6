"""/schedules: named RunSpecs repeated every N seconds."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Response, status

from benchd.api.deps import AuthDep, ServicesDep
from benchd.api.guard import GuardedRoute
from benchd.api.schemas import Problem, ScheduleIn, ScheduleView, errors, links
from benchd.daemon.schedules import Schedule, TooManySchedules
from benchd.store.journal import dumps

OFFSET_MAX = 10**9
ITEM_BYTES = 256  # a schedule's other fields, about
TOO_MANY = {"model": Problem, "description": "BENCHD_SCHEDULES_MAX schedules exist: a new name is refused."}

router = APIRouter(prefix="/schedules", tags=["schedules"], route_class=GuardedRoute)


def _view(schedule: Schedule) -> ScheduleView:
    return ScheduleView(
        name=schedule.name, spec=schedule.spec.model_dump(mode="json", exclude_unset=True),
        interval_s=schedule.interval_s, enabled=schedule.enabled,
        next_due_in_s=max(0.0, schedule.next_due - time.monotonic()),
        last_run_id=schedule.last_run_id, skipped=schedule.skipped,
    )


PAGE = {"headers": {
    "X-Total-Count": {"description": "Schedules in all.", "schema": {"type": "integer"}},
    "Link": {"description": 'The next page, while schedules remain: `</schedules?limit=500&offset=500>; rel="next"`.',
             "schema": {"type": "string"}}}}


@router.get("", response_model=list[ScheduleView], responses={**errors(422), 200: PAGE})
def list_schedules(services: ServicesDep, response: Response,
                   limit: Annotated[int, Query(ge=1, le=500)] = 500,
                   offset: Annotated[int, Query(ge=0, le=OFFSET_MAX)] = 0) -> list[ScheduleView]:
    """By name: up to `limit` schedules within BENCHD_READS__PAGE_MAX_BYTES (their specs' JSON); the `Link` header
    names the next page while schedules remain, `X-Total-Count` how many there are. A list, as before pages: at the
    defaults (500 a page, BENCHD_SCHEDULES_MAX 256) one page holds them all unless their specs pass 8 MiB."""
    every = sorted(services.daemon.schedules.list(), key=lambda s: s.name)
    page: list[ScheduleView] = []
    size = 0
    for schedule in every[offset:offset + limit]:
        view = _view(schedule)
        size += len(dumps(view.spec)) + ITEM_BYTES
        if page and size > services.settings.reads.page_max_bytes:
            break
        page.append(view)
    response.headers["X-Total-Count"] = str(len(every))
    if offset + len(page) < len(every):
        response.headers["Link"] = f'</schedules?limit={limit}&offset={offset + len(page)}>; rel="next"'
    return page


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ScheduleView, dependencies=[AuthDep],
             responses={**errors(401, 413, 422, 429, 503), 409: TOO_MANY, 201: links(
                 DeleteSchedule=("delete_schedule_schedules__name__delete", {"name": "$response.body#/name"}))})
def put_schedule(body: ScheduleIn, services: ServicesDep) -> ScheduleView:
    """Create or replace a schedule; its first run is due at once. A run still queued or running when the
    next is due makes the schedule skip that turn: it never piles up behind itself."""
    # checked as it will run; stored as given (the daemon's defaults may change)
    services.admit(body.spec, loc=("spec",))
    try:
        schedule = services.daemon.schedules.put(body.name, body.spec, body.interval_s, body.enabled,
                                                 limit=services.settings.schedules_max)
    except TooManySchedules as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    return _view(schedule)


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT, responses=errors(401, 404, 422),
               dependencies=[AuthDep])
def delete_schedule(name: str, services: ServicesDep) -> Response:
    if not services.daemon.schedules.delete(name):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no schedule {name}")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
