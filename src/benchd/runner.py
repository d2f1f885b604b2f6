"""Runs a workload on an engine: requests leave at their scheduled time, every stamp is recorded."""

from __future__ import annotations

import itertools
import queue
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from benchd import arrivals
from benchd.engines import Engine, GenerationRequest, create_engine
from benchd.environment import RunMetadata, collect, torch_threads, utc_now
from benchd.models import LoadedModel, load_model
from benchd.records import RequestRecord, StageSummary, summarize
from benchd.sampler import HardwareSampler, HardwareSummary
from benchd.spec import ArrivalProfile, RunSpec, SpecError, describe_profile
from benchd.telemetry import RunTelemetry, Telemetry
from benchd.workload import RequestContent, contents, load_tokenizer, text_contents

if TYPE_CHECKING:
    from benchd.timed import TimedOutcome

LOAD_SAMPLE_INTERVAL_S = 0.1  # how often the engine's load (KV-cache occupancy) is read during a stage


class StopSignal:
    """Set from another thread to end a run early; the reason becomes the run's status."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = "cancelled"

    def set(self, reason: str = "cancelled") -> None:
        self.reason = reason
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


class Stopped(Exception):
    """The stop signal was set: the run ends as cancelled or interrupted."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class Progress:
    stage: str
    stage_index: int
    stages: int
    completed: int
    expected: int | None  # requests the stage will submit, when known in advance
    elapsed_s: float
    duration_s: float | None


class Recorder:
    """The TokenSink of one stage: writes engine events into the records and tells the observer
    (engine thread: keep it cheap)."""

    def __init__(self, observer: RunTelemetry) -> None:
        self.observer = observer
        self.records: dict[str, RequestRecord] = {}
        self.completions: queue.SimpleQueue[RequestRecord] = queue.SimpleQueue()
        self.measured_tokens = 0  # output tokens of non-warm-up requests so far

    def admitted(self, request_id: str, t: float) -> None:
        record = self.records[request_id]
        if record.admitted_s is None:
            record.admitted_s = t
            self.observer.admitted(record)

    def tokens(self, request_id: str, t: float, n: int, token_ids: Sequence[int] = ()) -> None:
        record = self.records[request_id]
        if record.finished_s is None:
            record.arrival_s.append(t)
            record.arrival_tokens.append(n)
            record.token_ids.extend(token_ids)
            if not record.warmup:
                self.measured_tokens += n
            self.observer.tokens(record, t, n)

    def stamped_tokens(self, request_id: str, stamps: Sequence[float], token_ids: Sequence[int]) -> None:
        """One token per stamp, passed on in a batch: the per-call costs once, not once per token."""
        record = self.records[request_id]
        if record.finished_s is None and stamps:
            start = len(record.arrival_s)
            record.arrival_s.extend(stamps)
            record.arrival_tokens.extend([1] * len(stamps))
            record.token_ids.extend(token_ids)
            if not record.warmup:
                self.measured_tokens += len(stamps)
            self.observer.stamped_tokens(record, start)

    def submitted(self, request_id: str, t: float) -> None:
        """From engines that send at the scheduled time themselves (the stage handed the request over early)."""
        record = self.records[request_id]
        record.submitted_s = t
        self.observer.submitted(record)

    def prompt_tokens(self, request_id: str, n: int) -> None:
        """The prompt's length as the server counted it (a chat template included)."""
        record = self.records[request_id]
        before, record.prompt_tokens = record.prompt_tokens, n
        self.observer.prompt_counted(record, n - before)

    def finished(self, request_id: str, t: float, error: str | None = None) -> None:
        record = self.records[request_id]
        if record.finished_s is None:  # the first end wins (a cancel can race the last token)
            record.error = error
            record.finished_s = t
            self.observer.finished(record)
            self.completions.put(record)


class Stage:
    """One load level of a workload: dispatches its requests and waits for them."""

    def __init__(
        self,
        engine: Engine,
        spec: RunSpec,
        profile: ArrivalProfile,
        content: Callable[[], RequestContent],
        observer: RunTelemetry,
        index: int = 0,
        stages: int = 1,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.engine, self.spec, self.profile = engine, spec, profile
        self.workload = spec.workload
        self.content = content
        self.label = describe_profile(profile)
        self.index, self.stages = index, stages
        self.clock = clock
        self.observer = observer
        self.recorder = Recorder(observer)
        self._measure_start: float | None = None  # the first measured request's scheduled time
        self.in_flight: dict[str, RequestRecord] = {}
        self.kv_peak: float | None = None
        self.status = "pending"
        self.end_s: float | None = None
        self._t0 = 0.0
        self._next_sample = 0.0
        self._measured_submitted = 0
        self._on_progress: Callable[[Progress], None] | None = None
        self._stop: StopSignal | None = None
        self._ready: deque[RequestContent] = deque()  # contents made ahead of their scheduled time
        self._dispatching = False

    @property
    def start_s(self) -> float:
        return self._t0

    @property
    def records(self) -> list[RequestRecord]:
        return list(self.recorder.records.values())

    # ---- dispatch ------------------------------------------------------------------------------

    def run(self, stop: StopSignal | None = None, on_progress: Callable[[Progress], None] | None = None) -> None:
        self._stop, self._on_progress = stop, on_progress
        self.status = "running"
        slots = arrivals.concurrency(self.profile)
        self._prepare(self._first_burst(slots))
        self._t0 = self.clock()
        self._dispatching = True
        if slots is None:
            self._open_loop()
        else:
            self._closed_loop(slots)
        self._dispatching = False
        self._ready.clear()
        while self.in_flight:
            self._wait(None)
        self.status = "succeeded"
        self._report()

    def _open_loop(self) -> None:
        lead = self.engine.dispatch_lead_s  # an engine that sends at t_s itself gets the request this early
        for i, offset in enumerate(arrivals.offsets(self.profile, self.spec.seed)):
            t_s = self._t0 + offset
            if self._done_dispatching(t_s):
                return
            while (now := self.clock()) < t_s - lead:
                self._wait(t_s - lead - now)
            self._submit(i, t_s)

    def _closed_loop(self, slots: int) -> None:
        # Each slot's next request is scheduled when the slot frees up: at its previous request's end.
        starts = deque([self._t0] * slots)
        for i in itertools.count():
            while not starts:
                finished = self._wait(None)
                if finished is not None:
                    starts.append(finished.finished_s)
            t_s = starts.popleft()
            if self._done_dispatching(t_s):
                return
            self._submit(i, t_s)

    def _first_burst(self, slots: int | None) -> int:
        """Requests due at the start: a closed loop fills every slot at once."""
        if slots is None:
            return 1
        stop = self.workload.stop
        return slots if stop.requests is None else min(slots, stop.requests + self.workload.warmup.requests)

    def _prepare(self, n: int) -> None:
        """Make request contents before they are due (a 256-token prompt over a 128k vocabulary takes ~90 µs):
        a burst then leaves as fast as the engine takes it, and later requests are made while the stage waits."""
        while len(self._ready) < n:
            self._ready.append(self.content())

    def _done_dispatching(self, t_s: float) -> bool:
        stop = self.workload.stop
        if stop.requests is not None and self._measured_submitted >= stop.requests:
            return True
        return stop.duration_s is not None and t_s >= self._t0 + self.workload.warmup.seconds + stop.duration_s

    def _is_warmup(self, index: int, t_s: float) -> bool:
        warmup = self.workload.warmup
        return index < warmup.requests or t_s < self._t0 + warmup.seconds

    def _submit(self, index: int, t_s: float) -> None:
        content = self._ready.popleft() if self._ready else self.content()
        request_id = f"s{self.index}-r{index}"
        record = RequestRecord(
            index=index,
            request_id=request_id,
            warmup=self._is_warmup(index, t_s),
            prompt_tokens=content.prompt_tokens,
            max_new_tokens=content.max_new_tokens,
            scheduled_s=t_s,
        )
        self.recorder.records[request_id] = record
        self.in_flight[request_id] = record
        if not record.warmup:
            self._measured_submitted += 1
            if self._measure_start is None:
                self._measure_start = t_s
        request = GenerationRequest(request_id, content.prompt_ids, content.max_new_tokens, content.prompt_text,
                                    self.observer.traceparent(record) if content.prompt_text is not None else None)
        if self.engine.dispatch_lead_s:
            self.engine.submit(request, self.recorder, at=t_s)  # it stamps submitted_s when it sends
            return
        record.submitted_s = self.clock()
        self.observer.submitted(record)
        self.engine.submit(request, self.recorder)

    # ---- waiting -------------------------------------------------------------------------------

    def _wait(self, timeout: float | None) -> RequestRecord | None:
        """Wait up to timeout for one completion, sampling the engine's load meanwhile."""
        if self._stop is not None and self._stop.is_set():
            raise Stopped(self._stop.reason)
        if self._dispatching:
            self._prepare(1)  # the next request's content, while there is time
        now = self.clock()
        if now >= self._next_sample:
            self._sample_load()
            self._next_sample = now + LOAD_SAMPLE_INTERVAL_S
        limit = LOAD_SAMPLE_INTERVAL_S if timeout is None else min(timeout, LOAD_SAMPLE_INTERVAL_S)
        try:
            record = self.recorder.completions.get(timeout=max(limit, 0.0))
        except queue.Empty:
            return None
        self.in_flight.pop(record.request_id, None)
        self._report()
        return record

    def _sample_load(self) -> None:
        load = self.engine.load()
        occupancy = load.kv_occupancy
        if occupancy is not None and (self.kv_peak is None or occupancy > self.kv_peak):
            self.kv_peak = occupancy
        window = self.clock() - self._measure_start if self._measure_start is not None else 0.0
        self.observer.sample(load, self.recorder.measured_tokens / window if window > 0 else 0.0)

    def _report(self) -> None:
        if self._on_progress is None:
            return
        stop, warmup = self.workload.stop, self.workload.warmup
        expected = stop.requests + warmup.requests if stop.requests is not None and not warmup.seconds else None
        done = len(self.recorder.records) - len(self.in_flight)  # not a scan of every record per completion
        duration = stop.duration_s + warmup.seconds if stop.duration_s is not None else None
        self._on_progress(
            Progress(self.label, self.index, self.stages, done, expected, self.clock() - self._t0, duration)
        )

    # ---- ending --------------------------------------------------------------------------------

    def abort(self, status: str, reason: str, grace_s: float = 2.0) -> None:
        """Cancel what is in flight and keep everything measured so far."""
        self.status = status
        self.end_s = self.clock()
        for request_id in list(self.in_flight):
            self.engine.cancel(request_id, reason)
        deadline = self.clock() + grace_s
        while self.in_flight and self.clock() < deadline:
            try:
                record = self.recorder.completions.get(timeout=0.05)
            except queue.Empty:
                continue
            self.in_flight.pop(record.request_id, None)
        for record in self.in_flight.values():
            if record.finished_s is None:
                record.finished_s, record.error = self.end_s, reason
        self.in_flight.clear()

    def window(self) -> tuple[float, float] | None:
        """First measured scheduled time → last measured token (the end of an aborted stage)."""
        ends = [r.arrival_s[-1] for r in self.recorder.records.values() if not r.warmup and r.arrival_s]
        if self._measure_start is None or not ends:
            return None
        return self._measure_start, max(ends) if self.end_s is None else max(max(ends), self.end_s)

    def summary(self) -> StageSummary:
        return summarize(
            self.label, self.status, self.records, self.workload.slo,
            kv_cache_occupancy_peak=self.kv_peak, end_s=self.end_s,
        )


@dataclass
class RunOutcome:
    spec: RunSpec
    status: str  # running | succeeded | failed | cancelled | interrupted
    error: str | None
    metadata: RunMetadata | None
    stages: list[Stage] = field(default_factory=list)
    hardware: HardwareSummary | None = None

    def summaries(self) -> list[StageSummary]:
        return [stage.summary() for stage in self.stages]

    def to_json(self) -> dict:
        return outcome_json(self)


def outcome_json(outcome: RunOutcome | TimedOutcome) -> dict:
    """summary.json: the status, the spec, the stack, every stage's summary and the hardware's."""
    return {
        "status": outcome.status,
        "error": outcome.error,
        "spec": outcome.spec.model_dump(mode="json"),
        "metadata": outcome.metadata.model_dump(mode="json") if outcome.metadata else None,
        "stages": [s.model_dump(mode="json") for s in outcome.summaries()],
        "hardware": outcome.hardware.model_dump(mode="json") if outcome.hardware else None,
    }


def check_fits(spec: RunSpec, loaded: LoadedModel) -> None:
    limit = loaded.max_positions
    need = spec.workload.max_sequence_tokens()
    if limit is not None and need > limit:
        raise SpecError(
            f"workload.prompt_tokens: prompt + output may reach {need} tokens, "
            f"beyond the model's {limit} positions"
        )


def run(
    spec: RunSpec,
    loaded: LoadedModel | None = None,
    engine: Engine | None = None,
    stop: StopSignal | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    telemetry: Telemetry | None = None,
    run_id: str | None = None,
    hardware: HardwareSampler | None = None,
) -> RunOutcome:
    """Load (unless given), run every stage, and return what was measured, whatever happened."""
    run_id = run_id or uuid.uuid4().hex
    server = spec.engine == "openai"  # a served model: nothing loads here, prompts are text
    if server:
        tokenizer = load_tokenizer(spec.openai.tokenizer) if spec.openai.tokenizer else None
        new_stream = lambda: text_contents(spec.workload, spec.seed, tokenizer)  # noqa: E731
    else:
        if loaded is None:
            loaded = load_model(spec.model, spec.dtype, spec.device, spec.seed,
                                trust_remote_code=spec.trust_remote_code)
        check_fits(spec, loaded)
        new_stream = lambda: contents(spec.workload, spec.seed, loaded.vocab_size, loaded.special_ids)  # noqa: E731
    own_engine = engine is None
    if engine is None:
        engine = create_engine(loaded, spec)
    metadata = collect(loaded.device if loaded else None, spec.model, spec.label, loaded.load_s if loaded else None)
    if server:
        metadata.device_name = spec.openai.base_url
    metadata.run_id = run_id
    outcome = RunOutcome(spec=spec, status="running", error=None, metadata=metadata)
    observer = (telemetry or Telemetry()).for_run(run_id, spec.model, engine.name, spec.name)
    stages = spec.workload.stages()
    stage: Stage | None = None
    recording = False  # the hardware sampler is recording this run
    started = time.perf_counter()
    try:
        if own_engine:
            engine.start()
        metadata.engine_settings = engine.settings()
        if loaded is not None:
            metadata.torch_threads = torch_threads()  # as the engine set it
        started = time.perf_counter()
        if hardware is not None:
            hardware.begin()
            recording = True
        observer.run_started(started)
        metadata.trace_id = observer.run_trace_id
        for index, profile in enumerate(stages):
            # Every stage sends the same request contents: load levels differ only in timing.
            stage = Stage(engine, spec, profile, new_stream().__next__, observer, index, len(stages))
            outcome.stages.append(stage)
            stage.run(stop, on_progress)
        outcome.status, outcome.error = _judge(outcome.stages)
    except KeyboardInterrupt:
        outcome.status = "interrupted"
        if stage is not None:
            stage.abort("interrupted", "interrupted")
    except Stopped as stopped:
        outcome.status = stopped.reason
        if stage is not None:
            stage.abort(stopped.reason, stopped.reason)
    except Exception as error:  # the run's one boundary: record the failure with what was measured
        outcome.status, outcome.error = "failed", f"{type(error).__name__}: {error}"
        if stage is not None:
            stage.abort("failed", outcome.error)
    finally:
        if own_engine:
            engine.stop()
        end = time.perf_counter()
        if recording:
            windows = [w for stage in outcome.stages if (w := stage.window()) is not None]
            start, stop = (windows[0][0], windows[-1][1]) if windows else (started, end)
            tokens = sum(stage.recorder.measured_tokens for stage in outcome.stages)
            outcome.hardware = hardware.end(start, stop, tokens)
            observer.energy(outcome.hardware.energy_per_output_token_joules)
        observer.trace_requests([r for stage in outcome.stages for r in stage.records])
        observer.run_finished(end, outcome.status, outcome.error)
        metadata.finished_at = utc_now()
    return outcome


def _judge(stages: list[Stage]) -> tuple[str, str | None]:
    """A run whose measured requests all failed has failed, with the first error as its reason."""
    measured = [r for stage in stages for r in stage.records if not r.warmup]
    if measured and not any(r.ok for r in measured):
        first = min(measured, key=lambda r: r.index)
        return "failed", f"all {len(measured)} measured requests failed; first: {first.error}"
    return "succeeded", None
