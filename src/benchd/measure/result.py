"""What a run left, as the daemon (or the CLI) assembled it from the worker's events: its status, every stage's
records and summary (or a timed run's summaries and timings), the stack it ran on, its hardware and timeline."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from benchd.hardware.clocks import GPUClocks
from benchd.hardware.sampler import HardwareSummary
from benchd.hardware.speed import DeviceSpeed
from benchd.measure import capacity
from benchd.measure.capacity import CapacityResult
from benchd.measure.outcome import RunOutcome, Summary
from benchd.measure.records import RequestRecord
from benchd.measure.roofline import ModelCost, StepLog, roofline
from benchd.measure.summary import StageSummary, summarize
from benchd.measure.timings import KernelResult, Timing, TrainStepSummary
from benchd.protocol.metadata import RunMetadata
from benchd.spec import SLO, GenerateSpec, RunSpec
from benchd.spec.profiles import Capacity, is_open_loop
from benchd.spec.validity import ValidityRules

TIMED_SUMMARIES: dict[str, type[TrainStepSummary] | type[KernelResult]] = {"train_step": TrainStepSummary,
                                                                            "kernel": KernelResult}


@dataclass
class StageResult:
    """One load level: its records (stamps are perf_counter() seconds), and how it ended."""

    index: int
    label: str
    start_s: float  # when it began dispatching
    records: list[RequestRecord] = field(default_factory=list)
    status: str = "running"
    end_s: float | None = None  # where an aborted stage's window closes
    kv_peak: float | None = None
    slo: SLO | None = None  # the workload's, for goodput
    rules: ValidityRules | None = None  # the workload's, for the verdict
    open_loop: bool = False
    stop_reason: str | None = None  # why a stop rule ended it early
    steps: StepLog | None = None  # the forward steps its engine counted (None: a server's, or none sent)
    drain: tuple[float, float] | None = None  # (when it stopped sending, its drain's bound)
    clocks: list[GPUClocks] = field(default_factory=list)  # its GPUs' clock events (daemon/lifecycle.py)

    @classmethod
    def of(cls, spec: GenerateSpec, index: int, label: str, start_s: float) -> StageResult:
        """Stage `index` of the spec's run, with what its summary needs from the spec."""
        workload = spec.workload
        stages = workload.stages()
        open_loop = isinstance(workload.arrivals, Capacity) or (index < len(stages) and is_open_loop(stages[index]))
        return cls(index, label, start_s, slo=workload.slo, rules=workload.validity, open_loop=open_loop)

    def span(self) -> tuple[float, float] | None:
        """Its start to its end: where it was cut or aborted, else its last request's end (its drain included)."""
        ends = [r.finished_s for r in self.records if r.finished_s is not None]
        if self.end_s is not None:
            ends.append(self.end_s)
        return (self.start_s, max(ends)) if ends else None

    def window(self) -> tuple[float, float] | None:
        """First measured scheduled time → last measured token (the end of an aborted stage)."""
        measured = [r for r in self.records if not r.warmup and r.submitted_s is not None]
        ends = [r.arrival_s[-1] for r in measured if r.arrival_s]
        if not measured or not ends:
            return None
        last = max(ends) if self.end_s is None else max(max(ends), self.end_s)
        return min(r.scheduled_s for r in measured), last

    def summary(self, metadata: RunMetadata | None = None) -> StageSummary:
        """Its figures; with the run's metadata (the device's limits, the model's cost), how far from the hardware
        its steps ran."""
        summary = summarize(self.label, self.status, self.records, self.slo, self.kv_peak, self.end_s, self.rules,
                            self.open_loop, self.stop_reason, self.drain, self.clocks)
        summary.roofline = self.roofline(metadata)
        return summary

    def roofline(self, metadata: RunMetadata | None) -> dict | None:
        """Its steps on the device's roofline (benchd.measure.roofline), over the stage's whole time: from its start
        to its last token, warm-up requests included, as its steps are."""
        if self.steps is None or not len(self.steps) or metadata is None or not metadata.device_limits \
                or not metadata.model_cost:
            return None
        limits = DeviceSpeed.of(metadata.device_limits)
        peak_flops = limits.flops_per_s(metadata.model_cost.get("dtype", "auto")) if limits else None
        ends = [r.arrival_s[-1] for r in self.records if r.arrival_s]
        end = max([*ends, *([self.end_s] if self.end_s is not None else [])], default=None)
        if limits is None or not peak_flops or not limits.copy_bytes_per_s or end is None or end <= self.start_s:
            return None
        line = roofline(self.steps, ModelCost.from_dict(metadata.model_cost), end - self.start_s,
                        limits.copy_bytes_per_s, peak_flops)
        return line.as_dict()

    def measured_tokens(self) -> int:
        return sum(r.output_tokens for r in self.records if not r.warmup)


@dataclass
class RunResult:
    spec: RunSpec
    status: str  # succeeded | failed | cancelled | interrupted
    error: str | None = None
    error_stage: str | None = None  # where a failed run failed: load, start, run, worker
    metadata: RunMetadata | None = None
    stages: list[StageResult] = field(default_factory=list)  # generation
    timed: list[dict[str, Any]] = field(default_factory=list)  # a timed run's stage summaries
    timings: list[Timing] = field(default_factory=list)
    hardware: HardwareSummary | None = None
    timeline: dict | None = None
    # A run on every GPU: each GPU's status and stage summaries, and the verdicts of each against its siblings
    # (stored); part_results are the parts themselves (in memory only).
    parts: dict | None = None
    part_results: dict[str, RunResult] | None = None
    part_summaries: dict[str, list[Summary]] | None = None  # each GPU's, as parts["gpus"][gpu]["stages"]
    outcome: RunOutcome | None = None  # once the run has ended: its summaries and verdicts, computed once
    devices: list[str] = field(default_factory=list)  # the GPU labels of its workers (a group's joined by +)

    @property
    def generation(self) -> GenerateSpec:
        """The spec of a generation run: stages, rounds and a run's parts on every GPU are a generation's alone."""
        assert isinstance(self.spec, GenerateSpec)
        return self.spec

    def summaries(self) -> list[Summary]:
        if self.spec.kind == "generate":
            return [stage.summary(self.metadata) for stage in self.stages]
        model = TIMED_SUMMARIES[self.spec.kind]
        return [model.model_validate(summary) for summary in self.timed]

    def capacity(self, summaries: list[Summary] | None = None) -> CapacityResult | None:
        """A capacity search's figure, replayed over every probe; None for other runs."""
        if not isinstance(self.spec, GenerateSpec) or not isinstance(self.spec.workload.arrivals, Capacity):
            return None
        arrivals = self.spec.workload.arrivals
        found = summaries if summaries is not None else self.summaries()
        stages = [s for s in found if isinstance(s, StageSummary)]  # a generation's: every one
        return capacity.conclude(arrivals, [(s.stage, s) for s in stages])

    def valid(self, summaries: list[Summary] | None = None) -> bool | None:
        """The run's verdict: it succeeded and every stage is valid; a capacity search, when its figure rests on
        valid probes, the search ended by its own rule and no probe ran on a throttled GPU. None for timed runs,
        which have no verdict."""
        if self.spec.kind != "generate":
            return None
        if self.status != "succeeded":
            return False
        every = summaries if summaries is not None else self.summaries()
        stages = [s for s in every if isinstance(s, StageSummary)]  # a generation's: every one
        found = self.capacity(every)
        if found is not None:  # its probes were decided in the worker, which cannot see the clocks: judged here
            throttled = any(i.check == "throttled" for s in stages for i in s.invalid)
            return found.complete and found.requests_per_s is not None and not throttled
        return bool(stages) and all(s.valid for s in stages)

    def judge(self) -> None:
        """A run that ran to its end but whose measured requests (or timed stages) all failed has failed, with the
        first error as its reason (those cut at a stage's drain are no failure)."""
        if self.status != "succeeded":
            return
        if self.spec.kind == "generate":  # a request cut at its stage's drain did not fail: it was not let finish
            measured = [r for s in self.stages for r in s.records if not r.warmup and not r.cut]
            if measured and not any(r.ok for r in measured):
                first = min(measured, key=lambda r: r.index)
                self.status = "failed"
                self.error = f"all {len(measured)} measured requests failed; first: {first.error}"
        else:
            errors = [summary.get("error") for summary in self.timed]
            if errors and all(errors):
                self.status, self.error = "failed", f"every stage failed; first: {errors[0]}"
        if self.status == "failed":
            self.error_stage = "run"

    def ended(self) -> RunOutcome:
        """Its outcome: as the lifecycle made it when the run ended, or made now for a result assembled elsewhere."""
        return self.outcome if self.outcome is not None else RunOutcome.of(
            (self.metadata.run_id if self.metadata is not None else None) or "", self)

    def to_json(self) -> dict:
        """summary.json: the status, the verdict, the spec, the stack, every stage's summary, a capacity search's
        figure and the hardware's."""
        outcome = self.ended()
        summaries, found = outcome.summaries, outcome.capacity
        return {
            "status": self.status,
            "valid": outcome.valid,
            "error": self.error,
            "error_stage": self.error_stage,
            "spec": self.spec.model_dump(mode="json"),
            "metadata": self.metadata.model_dump(mode="json") if self.metadata else None,
            "stages": [s.model_dump(mode="json") for s in summaries],
            "capacity": found.model_dump(mode="json") if found is not None else None,
            "hardware": self.hardware.model_dump(mode="json") if self.hardware else None,
            "parts": self.parts,
            "good_tokens": outcome.good_tokens.model_dump(mode="json") if outcome.good_tokens else None,
            "quality": outcome.quality.model_dump(mode="json") if outcome.quality is not None else None,
        }
