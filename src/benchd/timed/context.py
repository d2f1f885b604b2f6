"""What a timed body works through: stop checks, progress, stages and timings, passed on as events."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from benchd.models.loading import resolve_device
from benchd.protocol import events
from benchd.protocol.metadata import RunMetadata
from benchd.protocol.outbox import Outbox
from benchd.spec import KernelSpec, TrainStepSpec
from benchd.stopping import Stopped, StopSignal


class TimedContext:
    """What a timed body works through: stop checks, progress, stages and timings, all passed on as events."""

    def __init__(self, spec: TrainStepSpec | KernelSpec, outbox: Outbox, metadata: RunMetadata, stop: StopSignal | None,
                 model: str | None = None) -> None:
        """model: where to load the spec's model from, when not from its name (a confined path, benchd.models.roots)."""
        self.spec, self.outbox, self.metadata, self.stop = spec, outbox, metadata, stop
        self.model = model or spec.model
        self.device = resolve_device(spec.device)
        self.stage_index = 0  # stages closed so far
        self._open: tuple[Callable[[str, str | None], BaseModel], float] | None = None
        self._closed: list[tuple[BaseModel, float, float]] = []
        self._started = time.perf_counter()

    def check_stop(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise Stopped(self.stop.reason)

    def progress(self, label: str, stages: int, completed: int, expected: int) -> None:
        self.outbox.put(events.TimedProgress(label, self.stage_index, stages, completed, expected,
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
        self._closed.append((summary, start, time.perf_counter()))
        self.stage_index += 1
        self.restate(self.stage_index - 1)
        return summary

    def restate(self, index: int) -> None:
        """Send a closed stage's summary (again, after a later figure changed it)."""
        summary, start, end = self._closed[index]
        self.outbox.put(events.TimedStage(index, summary.model_dump(mode="json"), start, end))

    def restate_all(self) -> None:
        for index in range(len(self._closed)):
            self.restate(index)

    def timing(self, series: str, index: int, warmup: bool, seconds: float, shape: str | None = None,
               dtype: str | None = None) -> None:
        self.outbox.put(events.Timing(self.stage_index, series, index, warmup, seconds, shape, dtype))

    def span(self, name: str, start: float, end: float, attributes: dict[str, Any]) -> None:
        self.outbox.put(events.Span(name, start, end, attributes))
