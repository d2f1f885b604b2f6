"""Runs a workload on an engine, in the worker: requests leave at their scheduled time and every event is recorded
and passed on to the daemon (which derives every figure from them)."""

from __future__ import annotations

import itertools
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

from benchd.engines import Engine, GenerationRequest
from benchd.engines.handoff import Handoff
from benchd.loadgen import arrivals, priority
from benchd.loadgen.contents import RequestContent
from benchd.loadgen.recorder import Recorder
from benchd.measure import capacity
from benchd.measure.records import CUT, RequestRecord
from benchd.measure.summary import StageSummary, summarize
from benchd.measure.watch import Watch
from benchd.protocol import events
from benchd.protocol.outbox import Outbox
from benchd.spec import ArrivalProfile, GenerateSpec, Workload, describe_profile
from benchd.spec.profiles import Capacity, is_open_loop
from benchd.spec.workload import CANCEL_GRACE_S
from benchd.stopping import Stopped, StopSignal

LOAD_SAMPLE_INTERVAL_S = 0.1  # how often the engine's load (KV-cache occupancy) is read during a stage
STOP_CHECK_S = 0.1  # how soon a waiting dispatcher notices a stop


class StageStopped(Exception):
    """A stage's stop rule was broken (validity.Watch): it ends early, the run goes on."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Stage:
    """One load level of a workload: dispatches its requests and waits for them."""

    def __init__(self, engine: Engine, spec: GenerateSpec, profile: ArrivalProfile,
                 content: Callable[[], RequestContent], outbox: Outbox, index: int = 0,
                 clock: Callable[[], float] = time.perf_counter, trace_id: str | None = None,
                 dispatch_priority: int = 0) -> None:
        self.engine, self.spec, self.profile = engine, spec, profile
        self.dispatch_priority = dispatch_priority  # an open loop sends in SCHED_FIFO at it (benchd.loadgen.priority)
        self.trace_id = trace_id  # the run's trace, when it is traced: a server engine's requests join it
        self.workload: Workload = spec.workload
        self.content = content
        self.label = describe_profile(profile)
        self.index = index
        self.clock = clock
        self.outbox = outbox
        self.recorder = Recorder(outbox)
        self.in_flight: dict[str, RequestRecord] = {}
        self.kv_peak: float | None = None
        self.status = "pending"
        self.end_s: float | None = None  # where the stage was cut or aborted
        self.drain: tuple[float, float] | None = None  # (when it stopped sending, its drain's bound)
        self._t0 = 0.0
        self._steps_from: int | None = None  # the engine's steps before this stage
        self._sampled = threading.Event()  # set when the stage ends: load sampling stops
        self._measured_submitted = 0
        self._stop: StopSignal | None = None
        self._ready: deque[RequestContent] = deque()  # contents made ahead of their scheduled time
        self._exhausted = False  # a trace's contents ran out
        self._dispatching = False
        self.open_loop = is_open_loop(profile)
        self.cap = arrivals.cap(profile)
        self.watch = Watch(self.workload.validity, self.open_loop)
        self.stop_reason: str | None = None  # set by a stop rule (the load sampler's thread, or the dispatcher's)

    @property
    def records(self) -> list[RequestRecord]:
        return list(self.recorder.records.values())

    # ---- dispatch ------------------------------------------------------------------------------

    def run(self, stop: StopSignal | None = None) -> None:
        self._stop = stop
        self.status = "running"
        slots = arrivals.concurrency(self.profile)
        self._prepare(self._first_burst(slots))
        self._t0 = self.clock()
        self.outbox.put(events.StageStart(self.index, self.label, self._t0))
        steps = getattr(self.engine, "steps", None)  # an engine of a test's making may count none
        self._steps_from = len(steps) if steps is not None else None
        sampling = threading.Thread(target=self._sample_load, name="benchd-load", daemon=True)
        sampling.start()
        try:
            self._dispatching = True
            if slots is None:
                self._open_loop()
            else:
                self._closed_loop(slots)
            self._dispatching = False
            self._ready.clear()
            self._drain()
        except StageStopped as stopped:
            self._sampled.set()
            sampling.join()
            self.abort("stopped", f"stopped: {stopped.reason}", stop_reason=stopped.reason)
            return
        finally:
            self._sampled.set()
            sampling.join()
        self.status = "succeeded"
        self._send_steps()
        self.outbox.put(events.StageEnd(self.index, self.status, self.end_s, self.kv_peak, None))

    def summary(self) -> StageSummary:
        """The stage's figures and verdict as the daemon derives them (the same function, the same records)."""
        return summarize(self.label, self.status, self.records, self.workload.slo, self.kv_peak, self.end_s,
                         self.workload.validity, self.open_loop, self.stop_reason, self.drain)

    def _drain(self) -> None:
        """Wait for the requests in flight at most the stage's drain (stop.drain_for); then cut those still out: the
        stage ends there, each cut request with the tokens it had (docs/figures.md)."""
        stopped = self.clock()
        bound = self.workload.stop.drain_for(stopped - self._t0)
        self.drain = (stopped, bound)
        self.outbox.put(events.Drain(self.index, stopped, bound))
        deadline = stopped + bound
        while self.in_flight:
            left = deadline - self.clock()
            if left <= 0:
                self.end_s = self.clock()
                self._cancel_in_flight(CUT)
                return
            self._wait(left)

    def _open_loop(self) -> None:
        # An engine that sends at t_s itself gets the request this early; not under a cap, which decides at t_s
        # whether a slot is free.
        lead = self.engine.dispatch_lead_s if self.cap is None else 0.0
        handoff = self.engine.handoff
        try:
            with priority.realtime(self.dispatch_priority):  # woken at t_s, it runs then, not after a slice
                self._send_open_loop(lead, handoff)
        finally:
            if handoff is not None:
                handoff.clear()

    def _send_open_loop(self, lead: float, handoff: Handoff | None) -> None:
        for i, offset in enumerate(arrivals.offsets(self.profile, self.spec.seed)):
            t_s = self._t0 + offset
            if self._done_dispatching(t_s):
                return
            if handoff is not None:
                handoff.expect(t_s - lead)  # the engine's thread gives way then
            while (now := self.clock()) < t_s - lead:
                self._wait(t_s - lead - now)
            while self.cap is not None and len(self.in_flight) >= self.cap:
                if handoff is not None:
                    handoff.clear()  # the send waits for a completion, which needs the engine
                if (left := self._left_s()) is not None and left <= 0:
                    return  # its stop came while it was held back: the stage ends when its spec says
                self._wait(left)  # held back: it keeps its scheduled time, the wait is its dispatch lag
            self._submit(i, t_s)
            if handoff is not None:
                handoff.clear()

    def _closed_loop(self, slots: int) -> None:
        # Each slot's next request is scheduled when the slot frees up: at its previous request's end.
        starts = deque([self._t0] * slots)
        for i in itertools.count():
            while not starts:
                if (left := self._left_s()) is not None and left <= 0:
                    return  # no slot freed before the stop: the stage stops sending when its spec says
                finished = self._wait(left)
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
        while len(self._ready) < n and not self._exhausted:
            try:
                self._ready.append(self.content())
            except StopIteration:  # a trace's last request is made: its offsets end there too
                self._exhausted = True

    def _done_dispatching(self, t_s: float) -> bool:
        stop = self.workload.stop
        if stop.requests is not None and self._measured_submitted >= stop.requests:
            return True
        return stop.duration_s is not None and t_s >= self._t0 + self.workload.warmup.seconds + stop.duration_s

    def _left_s(self) -> float | None:
        """Seconds until the stage's stop.duration_s ends its sending; None without one."""
        stop = self.workload.stop
        if stop.duration_s is None:
            return None
        return self._t0 + self.workload.warmup.seconds + stop.duration_s - self.clock()

    def _is_warmup(self, index: int, t_s: float) -> bool:
        warmup = self.workload.warmup
        return index < warmup.requests or t_s < self._t0 + warmup.seconds

    def _submit(self, index: int, t_s: float) -> None:
        content = self._ready.popleft() if self._ready else self.content()
        request_id = f"s{self.index}-r{index}"
        warmup = self._is_warmup(index, t_s)
        leads = bool(self.engine.dispatch_lead_s) and self.cap is None
        submitted = None if leads else self.clock()  # an engine with a lead stamps it when it sends
        span_id = traceparent = None
        if self.trace_id is not None and content.prompt_text is not None:
            # A server that traces puts its span under this request's span, made later with this id.
            span_id = format(random.getrandbits(64) or 1, "016x")
            traceparent = f"00-{self.trace_id}-{span_id}-01"
        record = self.recorder.book.request(index, request_id, warmup, content.prompt_tokens,
                                            content.max_new_tokens, t_s, submitted, span_id)
        self.outbox.put(events.Request(self.index, index, request_id, warmup, content.prompt_tokens,
                                       content.max_new_tokens, t_s, submitted, span_id))
        self.in_flight[request_id] = record
        if not warmup:
            self._measured_submitted += 1
        request = GenerationRequest(request_id, content.prompt_ids, content.max_new_tokens, content.prompt_text,
                                    traceparent)
        if leads:
            self.engine.submit(request, self.recorder, at=t_s)
        else:
            self.engine.submit(request, self.recorder)

    # ---- waiting -------------------------------------------------------------------------------

    def _wait(self, timeout: float | None) -> RequestRecord | None:
        """Wait up to timeout (at most a stop check's interval) for one completion."""
        if self._stop is not None and self._stop.is_set():
            raise Stopped(self._stop.reason)
        if self.stop_reason is not None:
            raise StageStopped(self.stop_reason)
        if self._dispatching:
            self._prepare(1)  # the next request's content, while there is time
        limit = STOP_CHECK_S if timeout is None else min(timeout, STOP_CHECK_S)
        try:
            record = self.recorder.completions.get(timeout=max(limit, 0.0))
        except queue.Empty:
            record = None
        if record is not None:
            self.in_flight.pop(record.request_id, None)
        if (record is not None and record.error) or (record is None and not self.engine.alive()):
            failure = self.engine.failure()
            if failure is not None and failure.out_of_memory:  # a new engine can serve the next stages
                raise OutOfMemory(failure.message)
            if not self.engine.alive():
                # A dead engine fails every request at once: a closed loop would send thousands a second to it.
                detail = failure.message if failure is not None else record.error if record is not None else None
                raise EngineStopped(f"the engine stopped{f' ({detail})' if detail else ''}")
        if record is not None and not record.warmup and (reason := self.watch.finished(record.ok)) is not None:
            self.stop_reason = reason
            raise StageStopped(reason)
        return record

    def _sample_load(self) -> None:
        """The engine's load every LOAD_SAMPLE_INTERVAL_S on a thread of its own, so samples fall anywhere in the
        engine's work, not where the dispatcher wakes (at completions, which a closed loop's requests share)."""
        while True:
            now = self.clock()
            load = self.engine.load()
            occupancy = load.kv_occupancy
            if occupancy is not None and (self.kv_peak is None or occupancy > self.kv_peak):
                self.kv_peak = occupancy
            self.outbox.put(events.Load(self.index, now, load.running, load.waiting, load.kv_blocks_used,
                                        load.kv_blocks_total))
            if self._dispatching and self.stop_reason is None:
                self.stop_reason = self.watch.load(now, len(self.recorder.records), self.recorder.finished_count)
            if self._sampled.wait(LOAD_SAMPLE_INTERVAL_S):
                return

    # ---- ending --------------------------------------------------------------------------------

    def abort(self, status: str, reason: str, stop_reason: str | None = None) -> None:
        """Cancel what is in flight and keep everything measured so far; stop_reason: why a stop rule ended it."""
        self._sampled.set()
        self.status = status
        self.stop_reason = stop_reason
        self.end_s = self.clock()
        self._cancel_in_flight(reason)
        self._send_steps()
        self.outbox.put(events.StageEnd(self.index, status, self.end_s, self.kv_peak, stop_reason))

    def _cancel_in_flight(self, reason: str) -> None:
        """Every request in flight cancelled with reason as its error; its engine's end (with its last tokens) waited
        for CANCEL_GRACE_S, else it ends at end_s (nothing it produced after that is counted)."""
        for request_id in list(self.in_flight):
            self.engine.cancel(request_id, reason)
        deadline = self.clock() + CANCEL_GRACE_S
        while self.in_flight and self.clock() < deadline:
            try:
                record = self.recorder.completions.get(timeout=0.05)
            except queue.Empty:
                continue
            self.in_flight.pop(record.request_id, None)
        for request_id in list(self.in_flight):
            self.recorder.finished(request_id, self.end_s, reason)
        self.in_flight.clear()

    def _send_steps(self) -> None:
        """The steps the engine counted since the stage began (benchd.measure.roofline), taken from its log."""
        steps = getattr(self.engine, "steps", None)
        if steps is None or self._steps_from is None:
            return
        self.outbox.put(events.Steps(self.index, *steps.take(self._steps_from).columns()))


class EngineStopped(RuntimeError):
    """The engine's loop ended during a stage (a fault in it): the stage ends failed with what it measured."""


class OutOfMemory(RuntimeError):
    """The engine ran out of device memory during a stage: the stage ends failed with what it measured, and the
    next stages run on a new engine."""


def stage_plan(spec: GenerateSpec) -> Iterator[tuple[ArrivalProfile, Callable[[StageSummary], None]]]:
    """The stages' profiles in turn, each with what its summary is told to: a capacity search decides each probe's
    rate from the probes before it (capacity.Search, replayed by the daemon over the same summaries)."""
    arrivals = spec.workload.arrivals
    if not isinstance(arrivals, Capacity):
        for profile in spec.workload.stages():
            yield profile, lambda summary: None
        return
    search = capacity.Search(arrivals)
    while (rate := search.next_rate()) is not None:
        yield arrivals.probe(rate), search.record


def run_stages(spec: GenerateSpec, engine: Engine, new_stream: Callable[[], Callable[[], RequestContent]],
               outbox: Outbox, stop: StopSignal | None = None, trace_id: str | None = None,
               dispatch_priority: int = 0, renew: Callable[[], Engine] | None = None) -> tuple[str, str | None]:
    """Every stage in turn on a started engine; (status, error). Whatever happens, what was measured has been
    passed on: a stage cut short cancels what is in flight and reports where its window ends; a stage a stop rule
    ends (errors, over-saturation) reports why, and the next stage runs. A stage whose engine runs out of device
    memory fails alone: renew() gives a new engine (the old one's memory released) for the stages after it, and the
    run fails naming each such stage."""
    stage: Stage | None = None
    out_of_memory: list[str] = []
    try:
        for index, (profile, judged) in enumerate(stage_plan(spec)):
            # Every stage sends the same request contents: load levels differ only in timing.
            stage = Stage(engine, spec, profile, new_stream(), outbox, index, trace_id=trace_id,
                          dispatch_priority=dispatch_priority)
            try:
                stage.run(stop)
            except OutOfMemory as error:
                if renew is None:
                    raise
                stage.abort("failed", "out_of_memory: the engine ran out of device memory")
                out_of_memory.append(f"stage {index} ({stage.label}) ran {error}")
                outbox.put(events.EngineRestart(index, "out_of_memory"))
                judged(stage.summary())
                stage = None  # ended: a failing renewal must not end it again
                engine = renew()
                continue
            judged(stage.summary())
        if out_of_memory:
            return "failed", "; ".join(out_of_memory) + " (the engine was started again after each)"
        return "succeeded", None
    except KeyboardInterrupt:
        if stage is not None:
            stage.abort("interrupted", "interrupted")
        return "interrupted", None
    except Stopped as stopped:
        if stage is not None:
            stage.abort(stopped.reason, stopped.reason)
        return stopped.reason, None
    except Exception as error:  # the run's one boundary in the worker: the failure is recorded, measures kept
        message = f"{type(error).__name__}: {error}"
        if stage is not None:
            stage.abort("failed", message)
        return "failed", message
