"""The run queue: runs wait here, first in first out, until the run loop takes them; bounded."""

from __future__ import annotations

import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from benchd.spec import RunSpec
from benchd.stopping import StopSignal


class QueueFull(Exception):
    pass


@dataclass(slots=True)
class Job:
    run_id: str
    spec: RunSpec
    schedule: str | None = None
    stop: StopSignal = field(default_factory=StopSignal)
    matrix: str | None = None  # the matrix it is a run of


class RunQueue:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._jobs: deque[Job] = deque()
        self._cond = threading.Condition()
        self.current: Job | None = None
        self._closing = False

    def __len__(self) -> int:
        return len(self._jobs)

    def put(self, spec: RunSpec, schedule: str | None = None,
            admitted: Callable[[Job], None] = lambda job: None) -> Job:
        """Queue a run; admitted(job) runs once it has a place and before the run loop can take it (the store
        records it as queued before anything can mark it running)."""
        with self._cond:
            if self._closing:
                raise QueueFull("the daemon is shutting down")
            if len(self._jobs) >= self.limit:
                raise QueueFull(f"the run queue is full ({self.limit} runs)")
            job = Job(uuid.uuid4().hex, spec, schedule)
            admitted(job)
            self._jobs.append(job)
            self._cond.notify_all()
            return job

    def put_many(self, jobs: list[Job], admitted: Callable[[Job], None] = lambda job: None,
                 placed: Callable[[], None] = lambda: None) -> None:
        """Queue runs together, back to back and in order, or none of them (a matrix's interleaved runs); placed()
        runs once there is room for all, before the first admitted(job): what they belong to is stored only then."""
        with self._cond:
            if self._closing:
                raise QueueFull("the daemon is shutting down")
            free = self.limit - len(self._jobs)
            if len(jobs) > free:
                raise QueueFull(f"the run queue has {free} free places of {self.limit}, {len(jobs)} are needed "
                                "(BENCHD_QUEUE_MAX)")
            placed()
            for job in jobs:
                admitted(job)
                self._jobs.append(job)
            self._cond.notify_all()

    def take(self, timeout_s: float, ready: Callable[[list[RunSpec]], bool] = lambda specs: True) -> Job | None:
        """The first run that is ready, now the current one; None after timeout_s or once closing. ready(specs) is
        asked of each run in order with its spec, or for a matrix's run with the specs of every run of its matrix
        still queued (so that a matrix's runs start together, interleaved as planned); a run not ready keeps its
        place, and those behind it go first."""
        found: list[Job] = []

        def first() -> bool:
            found[:] = [job for job in self._jobs if ready(self._specs(job))][:1]
            return bool(found) or self._closing

        with self._cond:
            if not self._cond.wait_for(first, timeout_s) or self._closing:
                return None
            self._jobs.remove(found[0])
            self.current = found[0]
            return self.current

    def _specs(self, job: Job) -> list[RunSpec]:
        return [j.spec for j in self._jobs if j.matrix == job.matrix] if job.matrix is not None else [job.spec]

    def wake(self) -> None:
        """Something a run waits for has changed (an environment's build ended): take() looks again."""
        with self._cond:
            self._cond.notify_all()

    def done(self) -> None:
        with self._cond:
            self.current = None
            self._cond.notify_all()

    def cancel(self, run_id: str) -> Job | None:
        """A queued run leaves the queue and is returned; the current one is told to stop (and returned);
        None when it is neither."""
        with self._cond:
            if self.current is not None and self.current.run_id == run_id:
                self.current.stop.set("cancelled")
                return self.current
            job = next((j for j in self._jobs if j.run_id == run_id), None)
            if job is not None:
                self._jobs.remove(job)
            return job

    def busy(self, schedule: str) -> bool:
        """A run of this schedule is queued or running."""
        with self._cond:
            return any(j.schedule == schedule for j in self._jobs) or (
                self.current is not None and self.current.schedule == schedule)

    def close(self) -> list[Job]:
        """Stop taking runs: the current one is interrupted; the queued ones are returned."""
        with self._cond:
            self._closing = True
            if self.current is not None:
                self.current.stop.set("interrupted")
            dropped = list(self._jobs)
            self._jobs.clear()
            self._cond.notify_all()
            return dropped
