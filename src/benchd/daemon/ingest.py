"""The daemon's side of a run: the worker's event batches rebuilt into records (the same RecordBook the worker
keeps), observed into Prometheus and spans, written to the store as requests finish, and told as progress; every
figure is derived here, from the raw stamps."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchd.engines import EngineLoad
from benchd.measure.records import RecordBook, RequestRecord, TokenCounts
from benchd.measure.result import RunResult, StageResult
from benchd.measure.roofline import StepLog
from benchd.measure.timeline import LoadSample
from benchd.measure.timings import Timing
from benchd.models.duration import stage_bound_s
from benchd.protocol import events as wire  # not events: RunIngest.events, a method, hides it in the class
from benchd.protocol.events import AnyEvent
from benchd.protocol.metadata import RunMetadata
from benchd.spec import ArrivalProfile, Capacity, GenerateSpec, RunSpec
from benchd.spec.workload import CANCEL_GRACE_S
from benchd.telemetry.run import RunTelemetry

PROGRESS_INTERVAL_S = 0.2  # at most five progress reports a second


@dataclass(slots=True)
class Progress:
    stage: str
    stage_index: int
    stages: int
    completed: int
    expected: int | None  # requests the stage will submit, when known in advance
    elapsed_s: float
    duration_s: float | None
    # The most the stage takes from its start (models/duration.py, stage_bound_s: its sending and its drain; once it
    # drains, exactly); None where the engine's pace decides. draining: it stopped sending, and waits at most its
    # drain for what is in flight.
    bound_s: float | None = None
    draining: bool = False


class _Stage:
    __slots__ = ("result", "book", "load", "bound")

    def __init__(self, result: StageResult) -> None:
        self.result, self.book = result, RecordBook()
        self.load: list[LoadSample] = []
        self.bound: float | None = None  # Progress.bound_s


class RunIngest:
    """A RunSink (supervisor/handle.py): events() and done() arrive on the worker handle's thread, in order."""

    def __init__(self, spec: RunSpec, observer: RunTelemetry,
                 on_finished: Callable[[StageResult, Any], None] | None = None,
                 on_progress: Callable[[Progress], None] | None = None, trace_id: str | None = None) -> None:
        self.spec, self.observer = spec, observer
        self.trace_id = trace_id  # the run's trace, when traced: every request sent joins it (its record says so)
        self.on_finished, self.on_progress = on_finished, on_progress
        self.result = RunResult(spec=spec, status="running")
        self.stages: dict[int, _Stage] = {}
        self.phases: list[tuple[str, float]] = []
        self.ended = threading.Event()
        self._requests: dict[str, _Stage] = {}
        self._last_progress = 0.0
        self._started = time.perf_counter()
        # one for every kind of event (tests/protocol/test_protocol.py)
        self.handlers: dict[type, Callable[[Any], None]] = {
            wire.Phase: self._phase, wire.StageStart: self._stage, wire.Request: self._request,
            wire.Submitted: self._submitted, wire.Admitted: self._admitted, wire.Tokens: self._tokens,
            wire.Prompt: self._prompt, wire.Counted: self._counted, wire.Finished: self._finished,
            wire.Load: self._load, wire.Drain: self._drain,
            wire.StageEnd: self._stage_end, wire.Steps: self._steps,
            wire.EngineRestart: self._engine_restart, wire.Timing: self._timing,
            wire.TimedStage: self._timed_stage, wire.Span: self._span, wire.TimedProgress: self._timed_progress,
        }

    # ---- RunSink -----------------------------------------------------------------------------------

    def events(self, batch: list[AnyEvent]) -> None:
        handlers = self.handlers
        for event in batch:
            handlers[type(event)](event)

    def done(self, status: str, error: str | None, error_stage: str | None, metadata: RunMetadata | None) -> None:
        result = self.result
        result.status, result.error, result.error_stage = status, error, error_stage
        if metadata is not None:
            result.metadata = metadata
        self.ended.set()

    def died(self, cause: str) -> None:
        """The worker died or hung mid-run: the run fails with the cause; every record that arrived is kept."""
        result = self.result
        result.status, result.error, result.error_stage = "failed", f"worker: {cause}", "worker"
        now = time.perf_counter()
        for stage in self.stages.values():
            for record in stage.result.records:  # what was in flight ends here, failed
                if record.finished_s is None:
                    self._finished(wire.Finished(record.request_id, now, "worker_died: the worker died mid-request"))
            if stage.result.status == "running":
                stage.result.status, stage.result.end_s = "failed", now
        self.ended.set()

    # ---- generation ----------------------------------------------------------------------------------

    @property
    def _generation(self) -> GenerateSpec:
        """The spec of a generation run: a generation's events (its stages, its progress) come from no other."""
        assert isinstance(self.spec, GenerateSpec)
        return self.spec

    def _phase(self, event: wire.Phase) -> None:
        self.phases.append((event.name, event.t_s))

    def _stage(self, event: wire.StageStart) -> None:
        stage = _Stage(StageResult.of(self._generation, event.index, event.label, event.t0_s))
        self.stages[event.index] = stage
        self.result.stages.append(stage.result)
        stage.bound = self._bound(event.index)

    def _bound(self, index: int) -> float | None:
        """Stage index's most time by its spec (a capacity search's probes: at its slowest rate); None where the
        engine's pace decides."""
        spec = self._generation
        arrivals = spec.workload.arrivals
        stages = spec.workload.stages()
        profile: ArrivalProfile | None = (arrivals.probe(arrivals.min_rate) if isinstance(arrivals, Capacity)
                                          else stages[index] if index < len(stages) else None)
        return stage_bound_s(profile, spec) if profile is not None else None

    def _drain(self, event: wire.Drain) -> None:
        stage = self.stages[event.stage]
        stage.result.drain = (event.t_s, event.bound_s)
        stage.bound = event.t_s - stage.result.start_s + event.bound_s + CANCEL_GRACE_S
        self._progress(stage, force=True)

    def _request(self, event: wire.Request) -> None:
        stage = self.stages[event.stage]
        record = stage.book.request(event.index, event.request_id, event.warmup, event.prompt_tokens,
                                    event.max_new_tokens, event.scheduled_s, event.submitted_s, event.span_id)
        stage.result.records.append(record)
        self._requests[event.request_id] = stage
        if event.submitted_s is not None:
            self._sent(record)

    def _submitted(self, event: wire.Submitted) -> None:
        self._sent(self._requests[event.request_id].book.submitted(event.request_id, event.t_s))

    def _sent(self, record: RequestRecord) -> None:
        """A request the engine is about to see: its span is a child in the run's trace (spans.requests makes it
        after the run), then it is observed."""
        if self.trace_id is not None:
            record.trace_id = self.trace_id
        self.observer.submitted(record)

    def _admitted(self, event: wire.Admitted) -> None:
        record = self._requests[event.request_id].book.admitted(event.request_id, event.t_s)
        if record is not None:
            self.observer.admitted(record)

    def _tokens(self, event: wire.Tokens) -> None:
        book = self._requests[event.request_id].book
        changed = book.tokens(event.request_id, stamps=event.arrival_s, counts=event.arrival_tokens,
                              token_ids=event.token_ids, logprobs=event.logprobs)
        if changed is not None:  # the record and the index of its first new arrival: into the histograms
            self.observer.arrivals(*changed)

    def _prompt(self, event: wire.Prompt) -> None:
        record, delta = self._requests[event.request_id].book.prompt(event.request_id, event.prompt_tokens)
        self.observer.prompt_counted(record, delta)

    def _counted(self, event: wire.Counted) -> None:
        self._requests[event.request_id].book.counted(event.request_id, TokenCounts(
            event.server_prompt, event.server_output, event.prompt, event.output))

    def _finished(self, event: wire.Finished) -> None:
        stage = self._requests[event.request_id]
        record = stage.book.finished(event.request_id, event.t_s, event.error)
        if record is None:
            return
        self.observer.finished(record)
        if self.on_finished is not None:
            self.on_finished(stage.result, record)
        self._progress(stage)

    def _load(self, event: wire.Load) -> None:
        stage = self.stages[event.stage]
        load = EngineLoad(event.running, event.waiting, event.kv_blocks_used, event.kv_blocks_total)
        start = stage.book.measured_from_s  # the stage's window opens there (StageResult.window)
        elapsed = event.t_s - start if start is not None else 0.0
        throughput = stage.book.measured_tokens / elapsed if elapsed > 0 else 0.0
        stage.load.append(LoadSample(event.t_s, event.running, event.waiting, load.kv_occupancy, throughput))
        self.observer.sample(load, throughput)

    def _stage_end(self, event: wire.StageEnd) -> None:
        result = self.stages[event.index].result
        result.status, result.end_s, result.kv_peak = event.status, event.end_s, event.kv_peak
        result.stop_reason = event.stop_reason
        self._progress(self.stages[event.index], force=True)

    def _steps(self, event: wire.Steps) -> None:
        self.stages[event.stage].result.steps = StepLog.of_columns(
            event.prefill_tokens, event.decode_tokens, event.kv_read_tokens, event.attended, event.sampled)

    def _engine_restart(self, event: wire.EngineRestart) -> None:
        self.observer.engine_restarted(event.reason)

    def _progress(self, stage: _Stage, force: bool = False) -> None:
        now = time.perf_counter()
        if self.on_progress is None or (now - self._last_progress < PROGRESS_INTERVAL_S and not force):
            return
        self._last_progress = now
        workload = self._generation.workload
        stop, warmup = workload.stop, workload.warmup
        expected = stop.requests + warmup.requests if stop.requests is not None and not warmup.seconds else None
        done = stage.book.ended
        duration = stop.duration_s + warmup.seconds if stop.duration_s is not None else None
        self.on_progress(Progress(stage.result.label, stage.result.index, workload.stage_count(), done,
                                  expected, now - stage.result.start_s, duration, stage.bound,
                                  stage.result.drain is not None))

    def load_samples(self) -> list[LoadSample]:
        return [sample for stage in self.stages.values() for sample in stage.load]

    # ---- timed runs ----------------------------------------------------------------------------------

    def _timing(self, event: wire.Timing) -> None:
        self.result.timings.append(Timing(event.stage, event.series, event.index, event.warmup, event.seconds))
        if not event.warmup:
            self.observer.timing(self.spec.kind, event.series, event.seconds, event.shape, event.dtype)

    def _timed_stage(self, event: wire.TimedStage) -> None:
        timed, summary = self.result.timed, event.summary
        if event.index < len(timed):  # restated with a later figure
            timed[event.index] = summary
            return
        timed.append(summary)
        self.observer.spans.stage(f"benchd.{self.spec.kind} {summary['stage']}", event.start_s, event.end_s,
                           _flatten(summary), summary.get("error"))

    def _span(self, event: wire.Span) -> None:
        self.observer.spans.stage(event.name, event.start_s, event.end_s, event.attributes)

    def _timed_progress(self, event: wire.TimedProgress) -> None:
        now = time.perf_counter()
        if self.on_progress is not None and (now - self._last_progress >= PROGRESS_INTERVAL_S or
                                             event.completed == event.expected):
            self._last_progress = now
            self.on_progress(Progress(event.label, event.index, event.stages, event.completed, event.expected,
                                      event.elapsed_s, event.duration_s))


def _flatten(summary: dict[str, Any]) -> dict[str, Any]:
    """A stage summary's scalar figures as span attributes (phases.step.mean → benchd.phases.step.mean)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}.{key}", item)
        elif isinstance(value, (int, float, str, bool)):
            out[prefix] = value

    walk("benchd", summary)
    return out
