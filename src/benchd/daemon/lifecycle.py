"""A run from the daemon's side, for every kind of run and for the daemon and the CLI alike: handed to a worker (or
to every GPU's worker at once), its events ingested as they come, watched against its deadline, then judged, timed
against the hardware, traced and stored. Nothing it meets stops the caller: a failure is the run's status, with
where it happened."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from benchd.daemon.every_gpu import ProgressSum, decided, merge, round_throughputs, stitch, verdicts
from benchd.daemon.ingest import Progress, RunIngest
from benchd.daemon.server_scrape import ServerScrape
from benchd.hardware.clocks import stage_clocks
from benchd.hardware.sampler import HardwareSampler, Recording
from benchd.measure import timeline
from benchd.measure.compare import CONFIDENCE, THRESHOLD
from benchd.measure.cost import Prices
from benchd.measure.outcome import RunOutcome
from benchd.measure.records import RequestRecord
from benchd.measure.result import RunResult, StageResult
from benchd.measure.timeline import StageSpan
from benchd.models.duration import kernel_deadline, run_bound_s
from benchd.spec import GenerateSpec, RunSpec
from benchd.spec.decide import Decide
from benchd.stopping import StopSignal
from benchd.store.database import Store
from benchd.store.writer import RequestWriter, StageRequests
from benchd.supervisor.pool import RunPool
from benchd.telemetry.run import RunTelemetry, Telemetry

log = logging.getLogger("benchd.daemon.lifecycle")

POLL_S = 0.2
CANCEL_GRACE_S = 60.0  # a worker told to stop that has not within this is hung: it is killed


@dataclass(slots=True)
class Part:
    """The run on one worker: all of it, or one GPU's share of a run on every GPU."""

    device: str  # the worker's slot key
    gpu: str  # its label
    observer: RunTelemetry
    ingest: RunIngest


class Lifecycle:
    def __init__(self, pool: RunPool, telemetry: Telemetry, hardware: HardwareSampler | None = None,
                 store: Store | None = None, faults: dict | None = None, threshold: float = THRESHOLD,
                 confidence: float = CONFIDENCE, prices: Prices | None = None,
                 on_beat: Callable[[], None] = lambda: None) -> None:
        self.pool, self.telemetry, self.hardware, self.store, self.faults = pool, telemetry, hardware, store, faults
        self.threshold, self.confidence, self.prices = threshold, confidence, prices
        self.on_beat = on_beat  # the caller's loop moves: called as the run is waited for (daemon/service.py)

    def execute(self, run_id: str, spec: RunSpec, device: str, stop: StopSignal,
                on_progress: Callable[[Progress], None] | None = None, deadline_s: float | None = None,
                confine: dict | None = None) -> RunResult:
        """Run the spec on the device's worker, or its tensor-parallel group's (placement every_gpu: on every one at
        once, round after round until each GPU's verdict decides: spec.rounds()) and return what it left, whatever
        happens; with a store, every request is written as it finishes and the run's end once known. confine: the
        spec's paths its worker re-checks against the roots as it loads (benchd.models.confinement); a kernel run
        is also ended by its worker's supervisor past its deadline (benchd.models.duration)."""
        environment = spec.worker_environment
        if spec.requirements is not None:  # its own: declared under their name, built when a worker first needs it
            self.pool.environments.adopt(spec.requirements)
        slots = self.pool.arrange(device, spec.placement, spec.tensor_parallel, environment)
        single = len(slots) == 1
        observer = self.telemetry.for_run(run_id, spec.subject, spec.runner, spec.name, slots[0].gpu if single else "",
                                          spec)
        observers = [observer if single else observer.part(slot.gpu) for slot in slots]
        writer = self.store.requests_writer(run_id) if self.store is not None else None
        rule = spec.rounds() if isinstance(spec, GenerateSpec) and not single else None
        rounds: list[list[Part]] = []
        recording: Recording | None = None
        scrape: ServerScrape | None = None
        late: float | None = None
        trace_id: str | None = None
        started = time.perf_counter()
        try:
            recording = self.hardware.begin() if self.hardware is not None else None
            started = time.perf_counter()
            scrape = self._scrape(spec, observer)
            for part_observer in observers:  # the run's trace, the same for every part: its requests join it
                trace_id = part_observer.run_started(started)
            settings = self.pool.settings
            deadline = lambda speed: kernel_deadline(spec, speed, settings.deadline_factor,  # noqa: E731
                                                     settings.deadline_slack_s)
            while True:
                begun = time.perf_counter()
                parts = self._round(run_id, spec, slots, observers, writer, on_progress, len(rounds), rule,
                                    trace_id)
                rounds.append(parts)
                for part in parts:
                    self.pool.submit(part.device, run_id, spec.model_dump(mode="json"), self.faults, part.ingest,
                                     environment=environment, wait_s=settings.start_timeout_s,
                                     trace_id=trace_id, confine=confine, deadline=deadline,
                                     beat=self.on_beat)
                late = self._wait(run_id, parts, stop, started, deadline_s)
                if rule is not None and len(rounds) == 2:  # its looks planned before the first (spec/decide.py)
                    rule = rule.planned(time.perf_counter() - begun)
                if not self._another_round(rule, rounds, stop, late, started, begun):
                    break
        except Exception as error:  # the run's one boundary in the daemon: the failure is recorded, measures kept
            log.exception("run %s failed in the daemon", run_id)
            late = None
            for part in rounds[-1] if rounds else []:
                if not part.ingest.ended.is_set():
                    result = part.ingest.result
                    result.status, result.error, result.error_stage = ("failed", f"{type(error).__name__}: {error}",
                                                                        "daemon")
        everything = [part for parts in rounds for part in parts]
        for part in everything:
            result = part.ingest.result
            if result.status == "running":  # the worker never answered (the daemon is stopping)
                result.status, result.error_stage = "interrupted", "worker"
            result.judge()
        if recording is not None:
            self._clocks(run_id, recording, everything)
        by_gpu = {slot.gpu: stitch([parts[i].ingest.result for parts in rounds]) for i, slot in enumerate(slots)} \
            if rounds else {}
        result = (by_gpu[slots[0].gpu] if single else merge(spec, by_gpu)) if rounds else \
            RunResult(spec=spec, status="failed", error="no round started", error_stage="daemon")
        result.devices = [slot.gpu for slot in slots]
        if late is not None:
            result.status, result.error_stage = "failed", "run"
            result.error = (f"the run went past its limit of {late:g} s (BENCHD_LIMITS__MAX_DURATION_S per stage) "
                            "and was stopped")
        if scrape is not None:
            scrape.stop()
        self._finish(run_id, result, everything, observer, observers, recording, started, writer, scrape,
                     rule, len(rounds))
        return result

    def _round(self, run_id: str, spec: RunSpec, slots: list, observers: list[RunTelemetry],
               writer: RequestWriter | None, on_progress: Callable[[Progress], None] | None, r: int,
               rule: Decide | None, trace_id: str | None) -> list[Part]:
        """Round r's parts, one a slot: each with an ingest of its own, its requests written under the stages
        they will have in the whole (round r's stage i: r·S + i) and its progress told as the round's."""
        count = spec.workload.stage_count() if isinstance(spec, GenerateSpec) else 1
        offset = r * count
        told = on_progress
        if on_progress is not None and rule is not None:
            def told(p: Progress) -> None:
                on_progress(replace(p, stage=f"{p.stage} · round {r + 1}", stage_index=offset + p.stage_index,
                                    stages=count * rule.max_rounds))
        progress = ProgressSum(told, len(slots))
        single = len(slots) == 1
        parts = []
        for i, slot in enumerate(slots):
            finished = self._writes(writer, "" if single else slot.gpu, offset, r if rule is not None else None) \
                if writer is not None else None
            parts.append(Part(slot.key, slot.gpu, observers[i],
                              RunIngest(spec, observers[i], finished, progress.of(i) if told else None, trace_id)))
        return parts

    @staticmethod
    def _another_round(rule: Decide | None, rounds: list[list[Part]], stop: StopSignal, late: float | None,
                       started: float, begun: float) -> bool:
        """Whether the GPUs go another round: their verdicts not all decided yet, every part of this round
        succeeded, the run neither stopped nor late, rounds left, and another as long as this one ends within the
        budget."""
        if rule is None or late is not None or stop.is_set() or len(rounds) >= rule.max_rounds:
            return False
        if any(part.ingest.result.status != "succeeded" for part in rounds[-1]):
            return False
        now = time.perf_counter()
        if now - started + (now - begun) > rule.budget_s:
            return False
        results = {part.gpu: [parts[i].ingest.result for parts in rounds] for i, part in enumerate(rounds[0])}
        return not decided(round_throughputs(results), rule)

    @staticmethod
    def _clocks(run_id: str, recording: Recording, parts: list[Part]) -> None:
        """Each stage's GPUs (its part's: NVML indices, a group's joined by +) over its span, by clock event
        (hardware/clocks.py), before its summary is made and judged; none on a CPU."""
        try:
            recording.stop()
            for part in parts:
                gpus = [gpu for gpu in part.gpu.split("+") if gpu]
                for stage in part.ingest.result.stages:
                    if gpus and (span := stage.span()) is not None:
                        stage.clocks = stage_clocks(recording.snapshots, *span, gpus)
        except Exception:  # the hardware's boundary: a failing sampler means fewer figures, never a lost run
            log.exception("run %s: the stages' clock events failed", run_id)

    def _scrape(self, spec: RunSpec, observer: RunTelemetry) -> ServerScrape | None:
        """A run whose server has a metrics page (an openai run's metrics_url): read on a thread of the daemon,
        which stamps no token (the client loops are processes of the worker's)."""
        page = spec.metrics_page() if isinstance(spec, GenerateSpec) else None
        if page is None:
            return None
        return ServerScrape(*page, observer.server_gauges()).start()

    @staticmethod
    def _writes(writer: RequestWriter, gpu: str, offset: int = 0,
                round_: int | None = None) -> Callable[[StageResult, RequestRecord], None]:
        """Each request as it finishes, under its stage's index in the whole run (offset: a round's first) and
        its label there (stitch's)."""
        keys: dict[int, StageRequests] = {}

        def finished(stage: StageResult, record: RequestRecord) -> None:
            label = stage.label if round_ is None else f"{stage.label} · round {round_ + 1}"
            key = keys.get(stage.index) or keys.setdefault(
                stage.index, StageRequests(offset + stage.index, label, stage.start_s, gpu))
            writer.add(key, record)

        return finished

    def _wait(self, run_id: str, parts: list[Part], stop: StopSignal, started: float,
              deadline_s: float | None) -> float | None:
        """Until every part has ended; the deadline when it was passed (the run was stopped), else None."""
        told: float | None = None  # when the workers were told to stop
        late = False
        while True:
            self.on_beat()
            now = time.perf_counter()
            # The deadline counts from when requests start: loading a model is bounded by the worker's own watch.
            running = [t for p in parts for name, t in p.ingest.phases if name == "run"]
            if told is None and deadline_s is not None and running and now - min(running) > deadline_s:
                late, reason = True, "cancelled"
            elif told is None and stop.is_set():
                reason = stop.reason
            else:
                reason = None
            if reason is not None:
                for part in parts:
                    self.pool.cancel(part.device, run_id, reason)
                told = now
            elif told is not None and now - told > CANCEL_GRACE_S:
                for part in parts:
                    if not part.ingest.ended.is_set():
                        self.pool.kill(part.device, "no_progress",
                                       f"the run did not stop within {CANCEL_GRACE_S:g} s of being told to")
                told = float("inf")
            if all(p.ingest.ended.wait(POLL_S / len(parts)) for p in parts):
                return deadline_s if late else None

    def _finish(self, run_id: str, result: RunResult, parts: list[Part], observer: RunTelemetry,
                observers: list[RunTelemetry], recording: Recording | None, started: float,
                writer: RequestWriter | None, scrape: ServerScrape | None = None, rule: Decide | None = None,
                rounds: int = 1) -> None:
        """Hardware, timeline, verdicts, spans, then the run's outcome (its summaries and verdicts, once) recorded by
        telemetry and written by the store: each on its own, so one failing leaves the others."""
        end = time.perf_counter()
        try:
            if recording is not None:
                windows = [w for stage in result.stages if (w := stage.window()) is not None]
                start, stop = (windows[0][0], windows[-1][1]) if windows else (started, end)
                tokens = sum(stage.measured_tokens() for stage in result.stages)
                result.hardware = recording.end(start, stop, tokens)
            spans = [StageSpan(s.index, s.label, s.start_s, s.end_s or (w[1] if (w := s.window()) else end))
                     for s in result.stages]
            load = [sample for part in parts for sample in part.ingest.load_samples()]
            result.timeline = timeline.build(started, spans, load,
                                             recording.snapshots if recording is not None else [],
                                             scrape.timeline(started) if scrape is not None else None)
        except Exception:  # the hardware's boundary: a failing sampler means fewer figures, never a lost run
            log.exception("run %s: the hardware summary failed", run_id)
        if result.parts is not None:
            try:
                result.parts["rounds"] = rounds
                result.parts["verdicts"] = verdicts(result, self.threshold, self.confidence, rule, rounds)
            except Exception:  # the comparison's boundary: the run keeps its figures without it
                log.exception("run %s: comparing its GPUs failed", run_id)
        if result.metadata is not None:
            result.metadata.trace_id = observer.run_trace_id
            result.metadata.environment = result.spec.worker_environment
            result.metadata.commit = result.spec.commit.model_dump() if result.spec.commit is not None else None
        for part in parts:
            part.observer.spans.requests([r for stage in part.ingest.result.stages for r in stage.records])
        for i, part_observer in enumerate(observers):
            if part_observer is not observer:
                own = result.part_results.get(part_observer.gpu) if result.part_results else None
                part_observer.run_finished(end, own.status if own else parts[i].ingest.result.status,
                                           own.error if own else parts[i].ingest.result.error)
        result.outcome = outcome = RunOutcome.of(run_id, result, self.prices)
        observer.record(outcome)
        observer.run_finished(end, outcome.status, outcome.error)
        if self.store is not None:
            assert writer is not None  # made with the store (Lifecycle.execute)
            writer.close((StageRequests(s.index, s.label, s.start_s, "" if len(observers) == 1 else p.gpu),
                          s.records) for p in parts for s in p.ingest.result.stages)
            self.store.finish_run(outcome)


DEADLINE_SLACK_S = 30.0  # beyond a run's bound: its stages' starts and ends, a busy host


def deadline_s(spec: RunSpec, max_duration_s: float, max_run_duration_s: float | None = None) -> float:
    """How long a run from HTTP may run its requests (or timed stages) before it is stopped: the limit per stage,
    and one more for what is in flight when dispatching ends, and at most the limit of a run's stages together and
    that one more; never under the most its stages take by their spec (models/duration.py, run_bound_s: sending and
    drain), with DEADLINE_SLACK_S. Admission already refused what could not send its requests in time; this bounds
    what it cannot foresee (a closed loop on a slow engine)."""
    stages = spec.workload.stage_count() if isinstance(spec, GenerateSpec) else 1
    limit = max_duration_s * (stages + 1)
    if max_run_duration_s is not None:
        limit = min(limit, max_run_duration_s + max_duration_s)
    bound = run_bound_s(spec)
    return limit if bound is None else max(limit, bound + DEADLINE_SLACK_S)
