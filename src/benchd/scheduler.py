"""One run at a time on the engine thread, from a FIFO queue and from periodic schedules."""

from __future__ import annotations

import gc
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from benchd.compare import compare, side_from_store
from benchd.api.admission import device_name
from benchd.config import Settings
from benchd.footprint import dtype_bytes, model_shape_and_weights
from benchd.engines import Engine, create_engine
from benchd.events import RunEvent, RunEvents
from benchd.models import LoadedModel, load_model
from benchd.runner import Progress, RunOutcome, StopSignal, check_fits, run
from benchd.spec import RunSpec, length_upper_bound
from benchd.sampler import HardwareSampler
from benchd.store import StageRequests, Store, StoreUnavailable
from benchd.telemetry import Telemetry
from benchd.timed import TimedOutcome, run_timed

log = logging.getLogger("benchd.scheduler")

PROGRESS_INTERVAL_S = 0.2  # at most five progress events a second per run

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


class QueueFull(Exception):
    pass


@dataclass(slots=True)
class Job:
    run_id: str
    spec: RunSpec
    schedule: str | None = None
    stop: StopSignal = field(default_factory=StopSignal)


@dataclass(slots=True)
class Schedule:
    name: str
    spec: RunSpec
    interval_s: float
    enabled: bool = True
    next_due: float = 0.0  # time.monotonic()
    last_run_id: str | None = None
    skipped: int = 0  # ticks skipped because the previous run of this schedule had not finished


class Scheduler:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        events: RunEvents,
        loader: Callable[..., LoadedModel] = load_model,
        telemetry: Telemetry | None = None,
        hardware: HardwareSampler | None = None,
    ) -> None:
        self.settings, self.store, self.events, self.loader = settings, store, events, loader
        self.telemetry, self.hardware = telemetry, hardware
        self._queue: deque[Job] = deque()
        self._cond = threading.Condition()
        self._current: Job | None = None
        self._closing = False
        self._schedules: dict[str, Schedule] = {}
        self._loaded: LoadedModel | None = None
        self._loaded_key: tuple[str, str, str] | None = None
        self.load_error: str | None = None  # why the daemon's model is not loaded, for /readyz
        self._loaded_once = False
        self._engine: Engine | None = None
        self._engine_key: tuple | None = None
        self._engine_thread = threading.Thread(target=self._engine_loop, name="benchd-engine", daemon=True)
        self._schedule_thread = threading.Thread(target=self._schedule_loop, name="benchd-schedules", daemon=True)

    # ---- state seen by the API -----------------------------------------------------------------

    @property
    def model_loaded(self) -> bool:
        return self._loaded is not None

    @property
    def ready(self) -> bool:
        """The daemon's model loaded once and runs execute (a training step releasing it does not change that)."""
        return self.alive and self._loaded_once and self.load_error is None

    @property
    def alive(self) -> bool:
        return self._engine_thread.is_alive() and self._schedule_thread.is_alive()

    def held_bytes(self, device: str) -> int:
        """Memory the cached model holds on this device (estimated; released before another model loads)."""
        if self._loaded_key is None:
            return 0
        ref, dtype, loaded_on = self._loaded_key
        if device_name(loaded_on, 1 if device.startswith("cuda") else 0) != device:
            return 0
        device_type = "cuda" if device.startswith("cuda") else "cpu"
        _, weights = model_shape_and_weights(ref, dtype_bytes(dtype, device_type))
        return weights or 0

    def queued(self) -> int:
        return len(self._queue)

    def schedules(self) -> list[Schedule]:
        with self._cond:
            return list(self._schedules.values())

    # ---- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        now = time.monotonic()
        try:
            rows = self.store.list_schedules()
        except StoreUnavailable as error:
            log.error("schedules could not be read: %s", error)
            rows = []
        for row in rows:
            spec = RunSpec.model_validate(row["spec"])
            self._schedules[row["name"]] = Schedule(row["name"], spec, row["interval_s"], row["enabled"], now)
        self._engine_thread.start()
        self._schedule_thread.start()

    def stop(self, timeout_s: float = 60.0) -> None:
        """The current run ends as interrupted with what it measured; queued runs are cancelled."""
        with self._cond:
            self._closing = True
            if self._current is not None:
                self._current.stop.set("interrupted")
            dropped = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        for job in dropped:
            self._end(job.run_id, "cancelled", "the daemon stopped before the run started", "queue")
        self._engine_thread.join(timeout_s)
        self._schedule_thread.join(5)

    # ---- submitting and cancelling -------------------------------------------------------------

    def resolve(self, spec: RunSpec) -> RunSpec:
        """What the spec leaves unset comes from the daemon: its model, dtype, device and label."""
        daemon = {"model": self.settings.model, "dtype": self.settings.dtype, "device": self.settings.device,
                  "label": self.settings.label}
        unset = {k: v for k, v in daemon.items() if k not in spec.model_fields_set and v is not None}
        return spec.model_copy(update=unset)

    def submit(self, spec: RunSpec, schedule: str | None = None) -> str:
        spec = self.resolve(spec)
        with self._cond:
            if self._closing:
                raise QueueFull("the daemon is shutting down")
            if len(self._queue) >= self.settings.queue_max:
                raise QueueFull(f"the run queue is full ({self.settings.queue_max} runs)")
            job = Job(uuid.uuid4().hex, spec, schedule)
            self.store.create_run(job.run_id, spec.model_dump(mode="json"), schedule)
            self._queue.append(job)
            self._cond.notify_all()
        self.events.publish(job.run_id, RunEvent("status", {"status": "queued"}))
        return job.run_id

    def cancel(self, run_id: str) -> str | None:
        """Cancel a queued or running run; None when it is neither."""
        with self._cond:
            if self._current is not None and self._current.run_id == run_id:
                self._current.stop.set("cancelled")
                return "cancelling"
            job = next((j for j in self._queue if j.run_id == run_id), None)
            if job is None:
                return None
            self._queue.remove(job)
        self._end(run_id, "cancelled", "cancelled before it started", "queue")
        return "cancelled"

    def put_schedule(self, name: str, spec: RunSpec, interval_s: float, enabled: bool = True) -> Schedule:
        self.store.put_schedule(name, spec.model_dump(mode="json", exclude_unset=True), interval_s, enabled)
        schedule = Schedule(name, spec, interval_s, enabled, time.monotonic())
        with self._cond:
            self._schedules[name] = schedule
            self._cond.notify_all()
        return schedule

    def delete_schedule(self, name: str) -> bool:
        with self._cond:
            found = self._schedules.pop(name, None) is not None
        self.store.delete_schedule(name)
        return found

    # ---- the engine thread ---------------------------------------------------------------------

    def _engine_loop(self) -> None:
        try:
            self._model_for(self.settings.model, self.settings.dtype, self.settings.device)
        except Exception as error:  # the daemon still serves: a run that names a loadable model can follow
            self.load_error = f"{type(error).__name__}: {error}"
            log.error("could not load the daemon's model %s: %s", self.settings.model, self.load_error)
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if self._closing:
                    break
                job = self._current = self._queue.popleft()
            try:
                self._execute(job)
            finally:
                with self._cond:
                    self._current = None
                    self._cond.notify_all()
        self._close_engine()

    def _execute(self, job: Job) -> None:
        self.store.mark_running(job.run_id)
        self.events.publish(job.run_id, RunEvent("status", {"status": "running"}))
        spec = job.spec
        if spec.kind != "generate":
            self._execute_timed(job)
            return
        try:
            # Loading is part of the run: a model that fails to load fails this run, not the daemon.
            load_s = (None if spec.engine == "openai"  # the server holds the model
                      else self._model_for(spec.model, spec.dtype, spec.device, spec.trust_remote_code))
            if self._loaded is not None and spec.engine != "openai":
                check_fits(spec, self._loaded)
            engine = self._engine_for(spec)
        except Exception as error:  # the daemon's boundary around what precedes the runner's own
            self._end(job.run_id, "failed", f"{type(error).__name__}: {error}", "load")
            return
        writer = self.store.requests_writer(job.run_id)
        stages: dict[int, StageRequests] = {}

        def written(stage, record) -> None:
            key = stages.get(stage.index)
            if key is None:
                key = stages[stage.index] = StageRequests(stage.index, stage.label, stage.start_s)
            writer.add(key, record)

        outcome = run(spec, loaded=self._loaded, engine=engine, stop=job.stop,
                      on_progress=self._progress_publisher(job.run_id), telemetry=self.telemetry, run_id=job.run_id,
                      hardware=self.hardware, on_finished=written)
        if outcome.metadata is not None:
            outcome.metadata.model_load_s = load_s
        writer.close((StageRequests(i, stage.label, stage.start_s), stage.records)
                     for i, stage in enumerate(outcome.stages))
        self._record(job, outcome)

    def _execute_timed(self, job: Job) -> None:
        # A timed run has the process to itself: no idle engine beside it holding its KV cache, its generation
        # thread and its setting of torch's CPU threads (a CUDA engine's cpu_threads). It starts again, warmed up,
        # at the next generation run.
        self._close_engine()
        if job.spec.kind == "train_step":
            # A training step builds its own model and needs the device's memory: the cached model is released too,
            # and loads again at the next generation run.
            self._loaded = self._loaded_key = None
            gc.collect()
            _empty_cuda_cache()
        outcome = run_timed(job.spec, stop=job.stop, on_progress=self._progress_publisher(job.run_id),
                            telemetry=self.telemetry, run_id=job.run_id, hardware=self.hardware)
        self._record(job, outcome)

    def _record(self, job: Job, outcome: RunOutcome | TimedOutcome) -> None:
        summaries = store_outcome(self.store, job.run_id, outcome)
        if job.schedule in self._schedules:
            self._schedules[job.schedule].last_run_id = job.run_id
            # Baselines compare generation latencies; timed runs are compared with `benchd runs show`.
            if outcome.status == "succeeded" and job.spec.kind == "generate":
                self._check_regression(job)
        summary = {"status": outcome.status, "error": outcome.error, "stages": summaries}
        self.events.publish(job.run_id, RunEvent("summary", summary, final=True))

    def _check_regression(self, job: Job) -> None:
        """A scheduled run against its workload's baseline: the regression gauges the alert rules watch."""
        metrics = self.telemetry.metrics if self.telemetry is not None else None
        baseline = self.store.baseline(job.spec.name)
        if metrics is None or baseline is None or baseline == job.run_id:
            return
        result = compare(side_from_store(self.store, [baseline]), side_from_store(self.store, [job.run_id]),
                         self.settings.compare_threshold, self.settings.compare_confidence)
        for change in result.metrics:
            if change.verdict == "inconclusive":
                continue
            metrics.regression.labels(job.spec.name, change.metric).set(float(change.verdict == "slower"))
            if change.relative_change is not None:
                metrics.regression_change.labels(job.spec.name, change.metric).set(change.relative_change)

    def _end(self, run_id: str, status: str, error: str | None, error_stage: str | None = None) -> None:
        self.store.set_status(run_id, status, error, error_stage)
        self.events.publish(run_id, RunEvent("summary", {"status": status, "error": error, "stages": []},
                                             final=True))

    def _progress_publisher(self, run_id: str) -> Callable[[Progress], None]:
        last = 0.0

        def publish(p: Progress) -> None:
            nonlocal last
            now = time.monotonic()
            if now - last < PROGRESS_INTERVAL_S and p.completed != p.expected:
                return
            last = now
            self.events.publish(run_id, RunEvent("progress", {
                "stage": p.stage, "stage_index": p.stage_index, "stages": p.stages, "completed": p.completed,
                "expected": p.expected, "elapsed_s": p.elapsed_s, "duration_s": p.duration_s,
            }))

        return publish

    def _model_for(self, ref: str, dtype: str, device: str, trust_remote_code: bool = False) -> float | None:
        """Keep the loaded model unless another is needed; the load time when this call loaded one."""
        if self._loaded is not None and self._loaded_key == (ref, dtype, device):
            return None
        self._close_engine()
        self._loaded = self._loaded_key = None
        gc.collect()
        _empty_cuda_cache()
        self._loaded = self.loader(ref, dtype, device, trust_remote_code=trust_remote_code)
        self._loaded_key = (ref, dtype, device)
        self.load_error = None
        self._loaded_once = True
        return self._loaded.load_s

    def _engine_for(self, spec: RunSpec) -> Engine:
        """One engine stays started across runs that would configure it identically (no new warm-up)."""
        workload = spec.workload
        key = (spec.engine, spec.transformers, spec.static, spec.openai, spec.model, workload.ignore_eos,
               length_upper_bound(workload.prompt_tokens), length_upper_bound(workload.output_tokens))
        if self._engine is not None and self._engine_key == key and self._engine.alive():
            return self._engine
        self._close_engine()
        engine = create_engine(self._loaded, spec)
        engine.start()
        self._engine, self._engine_key = engine, key
        return engine

    def _close_engine(self) -> None:
        if self._engine is not None:
            self._engine.stop()
            self._engine = self._engine_key = None

    # ---- the schedule thread -------------------------------------------------------------------

    def _schedule_loop(self) -> None:
        while True:
            with self._cond:
                if self._closing:
                    return
                due = [s for s in self._schedules.values() if s.enabled and s.next_due <= time.monotonic()]
            for schedule in due:
                self._tick(schedule)
            with self._cond:
                if self._closing:
                    return
                self._cond.wait(0.25)

    def _tick(self, schedule: Schedule) -> None:
        now = time.monotonic()
        schedule.next_due += schedule.interval_s
        if schedule.next_due <= now:  # late by more than an interval: the missed ticks are not made up
            schedule.next_due = now + schedule.interval_s
        with self._cond:
            busy = any(j.schedule == schedule.name for j in self._queue) or (
                self._current is not None and self._current.schedule == schedule.name)
        if busy:  # never pile up behind itself
            schedule.skipped += 1
            return
        try:
            self.submit(schedule.spec, schedule=schedule.name)
        except QueueFull:
            schedule.skipped += 1


def store_outcome(store: Store, run_id: str, outcome: RunOutcome | TimedOutcome) -> list[dict]:
    """The run's end in the store; its stage summaries as stored."""
    summaries = [s.model_dump(mode="json") for s in outcome.summaries()]
    meta = outcome.metadata.model_dump(mode="json") if outcome.metadata else None
    timings = ([{"stage_index": t.stage_index, "series": t.series, "index": t.index, "warmup": t.warmup,
                 "seconds": t.seconds} for t in outcome.timings] if isinstance(outcome, TimedOutcome) else [])
    store.finish_run(
        run_id, status=outcome.status, error=outcome.error,
        error_stage="run" if outcome.status == "failed" else None, subject=outcome.spec.subject,
        label=meta.get("label") if meta else outcome.spec.label, summaries=summaries, metadata=meta,
        hardware=outcome.hardware.model_dump(mode="json") if outcome.hardware else None,
        timeline=getattr(outcome, "timeline", None),
        timings_rows=timings)
    return summaries


def _empty_cuda_cache() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
