"""The daemon's parts put together: the run queue, the one thread that runs what it holds, the schedules, the worker
pool and the hooks after each run. Each long-lived thread has one loop whose body is guarded: what goes wrong in a
run or a tick is recorded (the run failed, with the stage it failed in; the tick logged and counted in
benchd_internal_errors_total) and the loop goes on. The run loop beats as it waits (for a run, for its workers), so
liveness can tell a loop that died or stopped from one that works; while the store takes no writes it starts no
run."""

from __future__ import annotations

import logging
import threading
import time

from benchd.daemon.fleet import Fleet
from benchd.daemon.followup import Hooks
from benchd.daemon.history import History
from benchd.daemon.ingest import Progress
from benchd.daemon.lifecycle import Lifecycle, deadline_s
from benchd.daemon.matrices import MatrixRuns
from benchd.daemon.queue import Job, QueueFull, RunQueue
from benchd.daemon.schedules import Schedules
from benchd.daemon.settings import Settings, resolve
from benchd.daemon.streams import RunEvent, RunEvents
from benchd.hardware.devices import Slot
from benchd.hardware.sampler import HardwareSampler
from benchd.measure.result import RunResult
from benchd.models.roots import confined
from benchd.spec import RunSpec
from benchd.spec.matrix import MatrixSpec
from benchd.store.database import Store
from benchd.supervisor.environments import Environments
from benchd.supervisor.pool import WorkerPool
from benchd.telemetry.metrics import Metrics
from benchd.telemetry.run import Telemetry

log = logging.getLogger("benchd.daemon.service")

__all__ = ["Daemon", "QueueFull"]


class Daemon:
    def __init__(self, settings: Settings, store: Store, telemetry: Telemetry, sampler: HardwareSampler | None,
                 events: RunEvents, slots: list[Slot]) -> None:
        self.settings, self.store, self.telemetry, self.events = settings, store, telemetry, events
        self.metrics: Metrics | None = telemetry.metrics
        self.queue = RunQueue(settings.queue_max)
        self.pool = WorkerPool(slots, settings.workers, (settings.model, settings.dtype), on_restart=self._restarted,
                               watch=sampler.watch_process if sampler is not None else lambda name, pid: None,
                               memory_fraction=settings.limits.memory_fraction,
                               environments=Environments(settings.environments, settings.environments_dir))
        self.pool.environments.on_prepared = self.queue.wake
        faults = settings.faults.model_dump() if settings.faults.workload else None
        self.lifecycle = Lifecycle(self.pool, telemetry, sampler, store, faults, settings.compare_threshold,
                                   settings.compare_confidence, settings.prices, on_beat=self._beat)
        store.spool.on_writable = self.queue.wake
        self.schedules = Schedules(store, self.submit, self.queue.busy, self.internal_error,
                                   self.submit_scheduled_matrix, self.skipped)
        self.matrices = MatrixRuns(store, self.queue, self.metrics, settings.compare_threshold,
                                   settings.compare_confidence, self.internal_error)
        self.history = History(settings.history, store, self.metrics, settings.node_name, set(settings.environments),
                               self.submit_internal_matrix, settings.compare_confidence, self.internal_error)
        self.matrices.listeners.append(self.history.concluded)
        self.fleet = Fleet(settings.fleet, settings.prices, store, self.metrics, settings.node_name,
                           settings.reads.fleet_max_rows, self.internal_error)
        self.hooks = Hooks(settings, store, events, self.schedules, self.metrics, self.internal_error, self.matrices,
                           self.history, self.fleet)
        self._thread = threading.Thread(target=self._loop, name="benchd-runs", daemon=True)
        self._closing = threading.Event()
        self._beaten = time.monotonic()  # the run loop's last beat

    # ---- state -------------------------------------------------------------------------------------

    def _beat(self) -> None:
        self._beaten = time.monotonic()

    def failing(self) -> str | None:
        """Why the daemon cannot work and must be restarted (liveness): a long-lived loop that died, or a run loop
        that has not beaten within BENCHD_LIVENESS_TIMEOUT_S; None while it works."""
        if not self._thread.is_alive():
            return "the run loop has stopped"
        if (silent := time.monotonic() - self._beaten) > self.settings.liveness_timeout_s:
            return (f"the run loop has not moved for {silent:.0f} s (BENCHD_LIVENESS_TIMEOUT_S: "
                    f"{self.settings.liveness_timeout_s:g} s)")
        if not self.schedules.alive:
            return "the schedules' loop has stopped"
        if not self.store.alive:
            return "the store's writer has stopped"
        return None

    @property
    def alive(self) -> bool:
        return self.failing() is None

    def unready(self) -> list[str]:
        """Why runs cannot execute now (readiness): empty once every worker answers and has tried the daemon's
        model, the loops work, and the store takes writes."""
        reasons = [why for why in (self.failing(), self.store.refusal()) if why is not None]
        if (error := self.pool.load_error()) is not None:
            reasons.append(f"the daemon's model did not load: {error}")
        elif not self.pool.ready:
            reasons.append("a worker is starting or has not loaded the daemon's model yet")
        return reasons

    @property
    def ready(self) -> bool:
        """Runs execute, and every worker answers and has tried the daemon's model (a failed load leaves the daemon
        unready: /readyz says why)."""
        return not self.unready()

    def skipped(self, reason: str) -> None:
        """A schedule's tick that queued nothing (busy, queue_full)."""
        if self.metrics is not None:
            self.metrics.schedule_skipped(reason)

    def internal_error(self, component: str) -> None:
        if self.metrics is not None:
            self.metrics.internal_error(component)

    def _restarted(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.worker_restarted(reason)

    # ---- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        self.pool.start()
        self._thread.start()
        self.schedules.start()
        self.history.start()
        self.fleet.start()

    def stop(self, timeout_s: float = 60.0) -> None:
        """The current run ends as interrupted with what it measured; queued runs are cancelled."""
        self._closing.set()
        for job in self.queue.close():
            self._end(job, "cancelled", "the daemon stopped before the run started", "queue")
        self._thread.join(timeout_s)
        self.schedules.stop()
        self.history.stop()
        self.fleet.stop()
        self.pool.stop()

    # ---- runs --------------------------------------------------------------------------------------

    def resolve(self, spec: RunSpec) -> RunSpec:
        """What the spec leaves unset comes from the daemon's settings (daemon/settings.py)."""
        return resolve(spec, self.settings)

    def submit(self, spec: RunSpec, schedule: str | None = None) -> str:
        spec = self.resolve(spec)
        job = self.queue.put(spec, schedule,
                             lambda job: self.store.create_run(job.run_id, spec.model_dump(mode="json"), schedule))
        self.events.publish(job.run_id, RunEvent("status", {"status": "queued"}))
        return job.run_id

    def submit_matrix(self, matrix: MatrixSpec, specs: list[RunSpec]) -> tuple[str, list[str]]:
        """specs: the variants' specs as resolved and admitted; its runs are queued together, interleaved."""
        matrix_id, run_ids = self.matrices.submit(matrix, specs)
        for run_id in run_ids:
            self.events.publish(run_id, RunEvent("status", {"status": "queued"}))
        return matrix_id, run_ids

    def submit_scheduled_matrix(self, matrix: MatrixSpec, schedule: str) -> tuple[str, list[str]]:
        """A declared schedule's matrix: its variants resolved as runs are (the settings' schedules are the
        operator's, so not admitted as an HTTP spec is), its runs the schedule's, its comparison the regression
        gauges' (daemon/matrices.py)."""
        matrix_id, run_ids = self.matrices.submit(matrix, [self.resolve(v.spec) for v in matrix.variants()],
                                                  schedule)
        for run_id in run_ids:
            self.events.publish(run_id, RunEvent("status", {"status": "queued"}))
        return matrix_id, run_ids

    def submit_internal_matrix(self, matrix: MatrixSpec) -> tuple[str, list[str]]:
        """A matrix the daemon itself runs (a change point's confirmation, daemon/history.py): its variants are the
        stored spec of a run it took, resolved as runs are, not admitted again."""
        matrix_id, run_ids = self.matrices.submit(matrix, [self.resolve(v.spec) for v in matrix.variants()])
        for run_id in run_ids:
            self.events.publish(run_id, RunEvent("status", {"status": "queued"}))
        return matrix_id, run_ids

    def cancel(self, run_id: str) -> str | None:
        """Cancel a queued or running run; None when it is neither."""
        job = self.queue.cancel(run_id)
        if job is None:
            return None
        if job is self.queue.current:
            return "cancelling"
        self._end(job, "cancelled", "cancelled before it started", "queue")
        return "cancelled"

    def _loop(self) -> None:
        while not self._closing.is_set():
            self._beat()
            job = self.queue.take(timeout_s=1.0, ready=self._startable)
            if job is None:
                continue
            try:
                self._execute(job)
            except Exception as error:  # the loop's one boundary: the run fails, the next one runs
                log.exception("run %s failed in the daemon", job.run_id)
                self.internal_error("runs")
                self._end(job, "failed", f"{type(error).__name__}: {error}", "daemon")  # the store never raises
            finally:
                self.queue.done()

    def _startable(self, specs: list[RunSpec]) -> bool:
        """A run starts while the store takes writes (else it keeps its place: store/spool.py) and its environment
        can start workers."""
        return self.store.refusal() is None and self._environments_ready(specs)

    def _environments_ready(self, specs: list[RunSpec]) -> bool:
        """Whether the runs' environments can start workers now: one that must be built first is built on a thread
        of its own (supervisor/environments.py), and the run waits in the queue while the runs behind it go on."""
        environments = self.pool.environments
        for spec in specs:
            if spec.requirements is not None:
                environments.adopt(spec.requirements)
        return all([environments.ready(spec.worker_environment) for spec in specs])  # every build starts

    def _execute(self, job: Job) -> None:
        if job.matrix is not None:
            self.matrices.started(job)
        self.store.mark_running(job.run_id)
        self.events.publish(job.run_id, RunEvent("status", {"status": "running"}))
        # Paths a spec from HTTP names were checked at admission; its worker checks them again on what it opens
        # (benchd.models.roots). The settings' own schedules are the operator's, as the daemon's model is.
        declared = {s.name for s in self.settings.schedules}
        confine = None if job.schedule in declared else confined(job.spec, self.settings.model,
                                                                 self.settings.model_roots)
        result = self.lifecycle.execute(job.run_id, job.spec, job.spec.device, job.stop,
                                        self._progress(job.run_id),
                                        deadline_s(job.spec, self.settings.limits.max_duration_s,
                                                   self.settings.limits.max_run_duration_s), confine)
        self.hooks.after(job, result, result.outcome.summaries_json() if result.outcome is not None else [])

    def _progress(self, run_id: str):
        def publish(p: Progress) -> None:
            self.events.publish(run_id, RunEvent("progress", {
                "stage": p.stage, "stage_index": p.stage_index, "stages": p.stages, "completed": p.completed,
                "expected": p.expected, "elapsed_s": p.elapsed_s, "duration_s": p.duration_s, "bound_s": p.bound_s,
                "draining": p.draining}))

        return publish

    def _end(self, job: Job, status: str, error: str | None, error_stage: str) -> None:
        self.store.set_status(job.run_id, status, error, error_stage)
        self.hooks.after(job, RunResult(spec=job.spec, status=status, error=error, error_stage=error_stage), [])
