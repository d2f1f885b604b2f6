"""Timed runs: training steps and single kernels, with the same store, exports and stop rules as generation.

A timed run is a list of stages (a warm-up level of a training step, or one implementation at one kernel shape),
each ending in a summary built from its raw timings; a stage cut short by a stop or a failure keeps what it timed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from benchd.environment import RunMetadata, collect, utc_now
from benchd.models import resolve_device
from benchd.runner import Progress, StopSignal, Stopped, outcome_json
from benchd.sampler import HardwareSampler, HardwareSummary
from benchd.spec import RunSpec
from benchd.telemetry import RunTelemetry, Telemetry


@dataclass(slots=True)
class Timing:
    """One timed repetition: a phase of a training step, or one call of a kernel."""

    stage_index: int
    series: str  # forward | backward | optimizer | step, or the kernel's implementation
    index: int  # step or repeat number within the stage, warm-up included
    warmup: bool
    seconds: float


@dataclass
class TimedOutcome:
    spec: RunSpec
    status: str
    error: str | None
    metadata: RunMetadata | None
    results: list[Any] = field(default_factory=list)  # stage summaries: TrainStepSummary or KernelResult
    timings: list[Timing] = field(default_factory=list)
    hardware: HardwareSummary | None = None

    def summaries(self) -> list[BaseModel]:
        return list(self.results)

    def to_json(self) -> dict:
        return outcome_json(self)


class TimedContext:
    """What a timed body works through: stop checks, progress, stages, timings and their exports."""

    def __init__(self, spec: RunSpec, outcome: TimedOutcome, observer: RunTelemetry, telemetry: Telemetry,
                 stop: StopSignal | None, on_progress: Callable[[Progress], None] | None) -> None:
        self.spec, self.outcome, self.observer = spec, outcome, observer
        self.metrics = telemetry.metrics
        self.stop, self.on_progress = stop, on_progress
        self.device = resolve_device(spec.device)
        self._open: tuple[Callable[[str, str | None], BaseModel], float] | None = None
        self._started = time.perf_counter()

    @property
    def stage_index(self) -> int:
        return len(self.outcome.results)

    def check_stop(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise Stopped(self.stop.reason)

    def progress(self, label: str, stages: int, completed: int, expected: int) -> None:
        if self.on_progress is not None:
            self.on_progress(Progress(label, self.stage_index, stages, completed, expected,
                                      time.perf_counter() - self._started, None))

    def open_stage(self, build: Callable[[str, str | None], BaseModel]) -> None:
        """build(status, error) makes the stage's summary from what it has timed so far."""
        self._open = (build, time.perf_counter())

    def close_stage(self, status: str = "succeeded", error: str | None = None) -> BaseModel | None:
        if self._open is None:
            return None
        build, start = self._open
        self._open = None
        summary = build(status, error)
        self.outcome.results.append(summary)
        self.observer.span(f"benchd.{self.spec.kind} {summary.stage}", start, time.perf_counter(),
                           _span_attributes(summary), getattr(summary, "error", None))
        return summary

    def timing(self, series: str, index: int, warmup: bool, seconds: float) -> None:
        self.outcome.timings.append(Timing(self.stage_index, series, index, warmup, seconds))

    def exemplar(self) -> dict[str, str]:
        trace_id = self.observer.run_trace_id
        return {"run_id": self.observer.run_id, **({"trace_id": trace_id} if trace_id else {})}


def _span_attributes(summary: BaseModel) -> dict[str, Any]:
    """The stage summary's scalar figures, flattened (phases.step.mean → benchd.phases.step.mean)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}.{key}", item)
        elif isinstance(value, (int, float, str, bool)):
            out[prefix] = value

    walk("benchd", summary.model_dump(mode="json"))
    return out


def run_timed(
    spec: RunSpec,
    stop: StopSignal | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    telemetry: Telemetry | None = None,
    run_id: str | None = None,
    hardware: HardwareSampler | None = None,
) -> TimedOutcome:
    """Run a train_step or kernel spec; whatever happens, return what was timed."""
    from benchd.timed import kernel, train_step

    body = {"train_step": train_step.execute, "kernel": kernel.execute}[spec.kind]
    run_id = run_id or uuid.uuid4().hex
    telemetry = telemetry or Telemetry()
    metadata = collect(resolve_device(spec.device), spec.subject, spec.label)
    metadata.run_id = run_id
    outcome = TimedOutcome(spec=spec, status="running", error=None, metadata=metadata)
    observer = telemetry.for_run(run_id, spec.subject, spec.runner, spec.name)
    context = TimedContext(spec, outcome, observer, telemetry, stop, on_progress)
    started = time.perf_counter()
    if hardware is not None:
        recording = hardware.begin()
    observer.run_started(started)
    metadata.trace_id = observer.run_trace_id
    try:
        body(context)
        context.close_stage()
        outcome.status, outcome.error = _judge(outcome)
    except KeyboardInterrupt:
        outcome.status = "interrupted"
        context.close_stage("interrupted")
    except Stopped as stopped:
        outcome.status = stopped.reason
        context.close_stage(stopped.reason)
    except Exception as error:  # the run's boundary: the failure is recorded with what was timed
        outcome.status, outcome.error = "failed", f"{type(error).__name__}: {error}"
        context.close_stage("failed", outcome.error)
    finally:
        end = time.perf_counter()
        if hardware is not None:
            outcome.hardware = recording.end(started, end, 0)
        observer.run_finished(end, outcome.status, outcome.error)
        metadata.finished_at = utc_now()
    return outcome


def _judge(outcome: TimedOutcome) -> tuple[str, str | None]:
    """A run all of whose stages failed has failed, with the first stage's error."""
    errors = [getattr(r, "error", None) for r in outcome.results]
    if errors and all(errors):
        return "failed", f"every stage failed; first: {errors[0]}"
    return "succeeded", None
