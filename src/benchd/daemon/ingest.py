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
from benchd.measure.metadata import RunMetadata
from benchd.measure.records import RecordBook
from benchd.measure.result import RunResult, StageResult
from benchd.measure.timeline import LoadSample
from benchd.measure.timings import Timing
from benchd.spec import RunSpec
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


class _Stage:
    __slots__ = ("result", "book", "load")

    def __init__(self, result: StageResult) -> None:
        self.result, self.book = result, RecordBook()
        self.load: list[LoadSample] = []


class RunIngest:
    """A RunSink (supervisor/handle.py): events() and done() arrive on the worker handle's thread, in order."""

    def __init__(self, spec: RunSpec, observer: RunTelemetry,
                 on_finished: Callable[[StageResult, Any], None] | None = None,
                 on_progress: Callable[[Progress], None] | None = None) -> None:
        self.spec, self.observer = spec, observer
        self.on_finished, self.on_progress = on_finished, on_progress
        self.result = RunResult(spec=spec, status="running")
        self.stages: dict[int, _Stage] = {}
        self.phases: list[tuple[str, float]] = []
        self.ended = threading.Event()
        self._requests: dict[str, _Stage] = {}
        self._last_progress = 0.0
        self._started = time.perf_counter()
        self._handlers = {
            "phase": self._phase, "stage": self._stage, "request": self._request, "submitted": self._submitted,
            "admitted": self._admitted, "tokens": self._tokens, "prompt": self._prompt, "finished": self._finished,
            "load": self._load, "stage_end": self._stage_end, "engine_restart": self._engine_restart,
            "timing": self._timing,
            "timed_stage": self._timed_stage, "span": self._span, "progress": self._timed_progress,
        }

    # ---- RunSink -----------------------------------------------------------------------------------

    def events(self, batch: list[tuple[Any, ...]]) -> None:
        handlers = self._handlers
        for event in batch:
            handlers[event[0]](*event[1:])

    def done(self, status: str, error: str | None, error_stage: str | None, metadata: dict | None) -> None:
        result = self.result
        result.status, result.error, result.error_stage = status, error, error_stage
        if metadata is not None:
            result.metadata = RunMetadata.model_validate(metadata)
        self.ended.set()

    def died(self, cause: str) -> None:
        """The worker died or hung mid-run: the run fails with the cause; every record that arrived is kept."""
        result = self.result
        result.status, result.error, result.error_stage = "failed", f"worker: {cause}", "worker"
        now = time.perf_counter()
        for stage in self.stages.values():
            for record in stage.result.records:  # what was in flight ends here, failed
                if record.finished_s is None:
                    self._finished(record.request_id, now, "worker_died: the worker died mid-request")
            if stage.result.status == "running":
                stage.result.status, stage.result.end_s = "failed", now
        self.ended.set()

    # ---- generation ----------------------------------------------------------------------------------

    def _phase(self, name: str, t: float) -> None:
        self.phases.append((name, t))

    def _stage(self, index: int, label: str, t0: float) -> None:
        stage = _Stage(StageResult.of(self.spec, index, label, t0))
        self.stages[index] = stage
        self.result.stages.append(stage.result)

    def _request(self, stage_index: int, index: int, request_id: str, warmup: bool, prompt_tokens: int,
                 max_new_tokens: int, scheduled_s: float, submitted_s: float | None, span_id: str | None) -> None:
        stage = self.stages[stage_index]
        record = stage.book.request(index, request_id, warmup, prompt_tokens, max_new_tokens, scheduled_s,
                                    submitted_s, span_id)
        stage.result.records.append(record)
        self._requests[request_id] = stage
        if submitted_s is not None:
            self.observer.submitted(record)

    def _submitted(self, request_id: str, t: float) -> None:
        self.observer.submitted(self._requests[request_id].book.submitted(request_id, t))

    def _admitted(self, request_id: str, t: float) -> None:
        record = self._requests[request_id].book.admitted(request_id, t)
        if record is not None:
            self.observer.admitted(record)

    def _tokens(self, request_id: str, stamps, counts, token_ids) -> None:
        changed = self._requests[request_id].book.tokens(request_id, stamps, counts, token_ids)
        if changed is not None:
            self.observer.arrivals(*changed)

    def _prompt(self, request_id: str, n: int) -> None:
        record, delta = self._requests[request_id].book.prompt(request_id, n)
        self.observer.prompt_counted(record, delta)

    def _finished(self, request_id: str, t: float, error: str | None) -> None:
        stage = self._requests[request_id]
        record = stage.book.finished(request_id, t, error)
        if record is None:
            return
        self.observer.finished(record)
        if self.on_finished is not None:
            self.on_finished(stage.result, record)
        self._progress(stage)

    def _load(self, stage_index: int, t: float, running: int, waiting: int, kv_used: int | None,
              kv_total: int | None) -> None:
        stage = self.stages[stage_index]
        load = EngineLoad(running, waiting, kv_used, kv_total)
        start = stage.book.measured_from_s  # the stage's window opens there (StageResult.window)
        elapsed = t - start if start is not None else 0.0
        throughput = stage.book.measured_tokens / elapsed if elapsed > 0 else 0.0
        stage.load.append(LoadSample(t, running, waiting, load.kv_occupancy, throughput))
        self.observer.sample(load, throughput)

    def _stage_end(self, index: int, status: str, end_s: float | None, kv_peak: float | None,
                   stop_reason: str | None = None) -> None:
        result = self.stages[index].result
        result.status, result.end_s, result.kv_peak, result.stop_reason = status, end_s, kv_peak, stop_reason
        self._progress(self.stages[index], force=True)

    def _engine_restart(self, index: int, reason: str) -> None:
        self.observer.engine_restarted(reason)

    def _progress(self, stage: _Stage, force: bool = False) -> None:
        now = time.perf_counter()
        if self.on_progress is None or (now - self._last_progress < PROGRESS_INTERVAL_S and not force):
            return
        self._last_progress = now
        stop, warmup = self.spec.workload.stop, self.spec.workload.warmup
        expected = stop.requests + warmup.requests if stop.requests is not None and not warmup.seconds else None
        done = stage.book.ended
        duration = stop.duration_s + warmup.seconds if stop.duration_s is not None else None
        self.on_progress(Progress(stage.result.label, stage.result.index, self.spec.workload.stage_count(), done,
                                  expected, now - stage.result.start_s, duration))

    def load_samples(self) -> list[LoadSample]:
        return [sample for stage in self.stages.values() for sample in stage.load]

    # ---- timed runs ----------------------------------------------------------------------------------

    def _timing(self, stage_index: int, series: str, index: int, warmup: bool, seconds: float, shape: str | None,
                dtype: str | None) -> None:
        self.result.timings.append(Timing(stage_index, series, index, warmup, seconds))
        if not warmup:
            self.observer.timing(self.spec.kind, series, seconds, shape, dtype)

    def _timed_stage(self, index: int, summary: dict, start: float, end: float) -> None:
        timed = self.result.timed
        if index < len(timed):  # restated with a later figure
            timed[index] = summary
            return
        timed.append(summary)
        self.observer.span(f"benchd.{self.spec.kind} {summary['stage']}", start, end, _flatten(summary),
                           summary.get("error"))

    def _span(self, name: str, start: float, end: float, attributes: dict) -> None:
        self.observer.span(name, start, end, attributes)

    def _timed_progress(self, label: str, index: int, stages: int, completed: int, expected: int,
                        elapsed_s: float, duration_s: float | None) -> None:
        now = time.perf_counter()
        if self.on_progress is not None and (now - self._last_progress >= PROGRESS_INTERVAL_S or
                                             completed == expected):
            self._last_progress = now
            self.on_progress(Progress(label, index, stages, completed, expected, elapsed_s, duration_s))


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
