"""Periodic schedules: named RunSpecs (or, declared in the settings, matrices: a candidate environment against the
daemon's own, say) submitted every interval by one thread; a schedule never piles up behind itself, and its thread
survives whatever one tick meets."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import ValidationError

from benchd.daemon.queue import QueueFull
from benchd.spec import RunSpec, format_validation_error, validate_spec
from benchd.spec.matrix import MatrixSpec
from benchd.store.database import Store, StoreUnavailable

log = logging.getLogger("benchd.daemon.schedules")

TICK_S = 0.25

# Out of the box: a small workload on the daemon's model every minute, so a fresh install exports live data.
DEFAULT_SCHEDULE_SPEC = {
    "name": "default",
    "workload": {
        "arrivals": {"profile": "poisson", "rate": 4},
        "stop": {"requests": 24},
        "warmup": {"requests": 2},
        "prompt_tokens": {"dist": "uniform", "min": 16, "max": 64},
        "output_tokens": {"dist": "uniform", "min": 16, "max": 48},
    },
}


@dataclass(slots=True)
class Schedule:
    name: str
    spec: RunSpec
    interval_s: float
    enabled: bool = True
    next_due: float = 0.0  # time.monotonic()
    last_run_id: str | None = None
    skipped: int = 0  # ticks skipped: the previous run of this schedule had not finished, or the queue had no room
    matrix: MatrixSpec | None = None  # a matrix each interval instead of one run (declared schedules only)


class TooManySchedules(Exception):
    """A new schedule past BENCHD_SCHEDULES_MAX; str() says so."""


class Schedules:
    def __init__(self, store: Store, submit: Callable[[RunSpec, str], str], busy: Callable[[str], bool],
                 on_error: Callable[[str], None] = lambda component: None,
                 submit_matrix: Callable[[MatrixSpec, str], object] | None = None,
                 on_skip: Callable[[str], None] = lambda reason: None) -> None:
        self.store, self.submit, self.busy, self.on_error, self.on_skip = store, submit, busy, on_error, on_skip
        self.submit_matrix = submit_matrix
        self._schedules: dict[str, Schedule] = {}
        self._lock = threading.Lock()
        self._loaded = False  # the stored schedules were read (the database may be down at start)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="benchd-schedules", daemon=True)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def list(self) -> list[Schedule]:
        with self._lock:
            return list(self._schedules.values())

    def put(self, name: str, spec: RunSpec, interval_s: float, enabled: bool = True,
            limit: int | None = None) -> Schedule:
        """Create or replace; a new name when `limit` schedules exist already (declared ones counted) raises
        TooManySchedules, and nothing is stored."""
        schedule = Schedule(name, spec, interval_s, enabled, time.monotonic())
        with self._lock:
            if limit is not None and name not in self._schedules and len(self._schedules) >= limit:
                raise TooManySchedules(f"{len(self._schedules)} schedules exist, the most this daemon keeps "
                                       "(BENCHD_SCHEDULES_MAX): delete one, or replace one by its name")
            self._schedules[name] = schedule
        self.store.put_schedule(name, spec.model_dump(mode="json", exclude_unset=True), interval_s, enabled)
        return schedule

    def declare(self, name: str, spec: RunSpec, interval_s: float, enabled: bool = True,
                matrix: MatrixSpec | None = None) -> Schedule:
        """A schedule the settings own: kept in memory only, and in place of a stored one of the same name."""
        schedule = Schedule(name, spec, interval_s, enabled, time.monotonic(), matrix=matrix)
        with self._lock:
            self._schedules[name] = schedule
        return schedule

    def delete(self, name: str) -> bool:
        with self._lock:
            found = self._schedules.pop(name, None) is not None
        self.store.delete_schedule(name)
        return found

    def ran(self, name: str | None, run_id: str) -> None:
        with self._lock:
            if name in self._schedules:
                self._schedules[name].last_run_id = run_id

    def _loop(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                if not self._loaded:
                    self._load()
                with self._lock:
                    due = [s for s in self._schedules.values() if s.enabled and s.next_due <= time.monotonic()]
                for schedule in due:
                    self._tick(schedule)
            except Exception:  # the thread's one boundary: the tick is logged and counted, the loop goes on
                log.exception("a schedule tick failed")
                self.on_error("schedules")

    def _load(self) -> None:
        """The stored schedules, once the database answers; ones put meanwhile are kept as put."""
        try:
            rows = self.store.list_schedules()
        except StoreUnavailable:
            return  # read again at the next tick
        now = time.monotonic()
        with self._lock:
            for row in rows:
                if row["name"] not in self._schedules:
                    try:
                        spec = validate_spec(row["spec"])
                    except ValidationError as error:  # stored by an older benchd, no longer valid: left out, said once
                        log.error("schedule %s is left out: its stored spec is no longer valid: %s", row["name"],
                                  format_validation_error(error))
                        continue
                    self._schedules[row["name"]] = Schedule(row["name"], spec, row["interval_s"], row["enabled"], now)
            self._loaded = True

    def _tick(self, schedule: Schedule) -> None:
        now = time.monotonic()
        schedule.next_due += schedule.interval_s
        if schedule.next_due <= now:  # late by more than an interval: the missed ticks are not made up
            schedule.next_due = now + schedule.interval_s
        if self.busy(schedule.name):  # never pile up behind itself
            schedule.skipped += 1
            self.on_skip("busy")
            return
        try:
            if schedule.matrix is not None and self.submit_matrix is not None:
                self.submit_matrix(schedule.matrix, schedule.name)
            else:
                self.submit(schedule.spec, schedule.name)
        except QueueFull:  # nothing was queued or stored: counted, and tried again at the next tick
            schedule.skipped += 1
            self.on_skip("queue_full")
