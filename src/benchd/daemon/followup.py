"""What follows a run's end in the daemon: the schedule's bookkeeping, the comparison with its workload's
baseline (the regression gauges the alert rules watch), its workload's history analysed for change points (on the
history's thread), and the final event its followers wait for."""

from __future__ import annotations

import logging
from collections.abc import Callable

from benchd.daemon.history import History
from benchd.daemon.matrices import MatrixRuns
from benchd.daemon.queue import Job
from benchd.daemon.schedules import Schedules
from benchd.daemon.settings import Settings
from benchd.daemon.streams import RunEvent, RunEvents
from benchd.measure.compare import compare
from benchd.measure.result import RunResult
from benchd.measure.sides import side_from_store
from benchd.store.database import Store
from benchd.telemetry import comparisons
from benchd.telemetry.metrics import Metrics

log = logging.getLogger("benchd.daemon.followup")


class Hooks:
    def __init__(self, settings: Settings, store: Store, events: RunEvents, schedules: Schedules,
                 metrics: Metrics | None, on_error: Callable[[str], None] = lambda component: None,
                 matrices: MatrixRuns | None = None, history: History | None = None) -> None:
        self.settings, self.store, self.events, self.schedules = settings, store, events, schedules
        self.metrics, self.on_error, self.matrices, self.history = metrics, on_error, matrices, history

    def after(self, job: Job, result: RunResult, summaries: list[dict]) -> None:
        """Each hook on its own: one that fails is logged and counted, and the others still run."""
        for name, hook in (("schedules", lambda: self.schedules.ran(job.schedule, job.run_id)),
                           ("regression", lambda: self._regression(job, result)),
                           ("matrix", lambda: self._matrix(job, result)),
                           ("history", lambda: self._history(job, result))):
            try:
                hook()
            except Exception:  # a hook's boundary: the run is stored already, the daemon goes on
                log.exception("the %s hook failed after run %s", name, job.run_id)
                self.on_error(f"hook_{name}")
        self.events.publish(job.run_id, RunEvent("summary", {"status": result.status, "error": result.error,
                                                             "stages": summaries}, final=True))

    def _history(self, job: Job, result: RunResult) -> None:
        """The run's workload analysed for change points, on the history's thread (daemon/history.py)."""
        if self.history is not None:
            self.history.ran(job, result)

    def _matrix(self, job: Job, result: RunResult) -> None:
        """A matrix's run ended: the last one has its matrix compared."""
        if job.matrix is not None and self.matrices is not None:
            self.matrices.ended(job, result)

    def _regression(self, job: Job, result: RunResult) -> None:
        """A scheduled run against its workload's baseline (timed runs are compared with `benchd runs show`; a
        scheduled matrix's runs, against its baseline variant: daemon/matrices.py)."""
        if (job.schedule is None or job.matrix is not None or result.status != "succeeded"
                or job.spec.kind != "generate"):
            return
        baseline = self.store.baseline(job.spec.name)
        if self.metrics is None or baseline is None or baseline == job.run_id or not self.store.flush(10):
            return
        before, latest = side_from_store(self.store, [baseline]), side_from_store(self.store, [job.run_id])
        if before.invalid or latest.invalid:  # figures that are not to be trusted say nothing about a regression
            return
        comparison = compare(before, latest, self.settings.compare_threshold, self.settings.compare_confidence)
        comparisons.regression(self.metrics, job.spec.name, comparison)
