"""A run's outcome: what it ended with, its summaries and verdicts computed once (measure/result.py's RunResult
assembles the run; this is what the store writes, telemetry records and what follows a run reads)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from benchd.measure.capacity import CapacityResult
from benchd.measure.cost import GoodTokens, Prices, good_tokens
from benchd.measure.quality import QualitySummary
from benchd.measure.summary import StageSummary
from benchd.measure.timings import KernelResult, Timing, TrainStepSummary

if TYPE_CHECKING:
    from benchd.hardware.sampler import HardwareSummary
    from benchd.measure.result import RunResult
    from benchd.protocol.metadata import RunMetadata
    from benchd.spec import RunSpec

Summary = StageSummary | TrainStepSummary | KernelResult  # by the spec's kind


@dataclass(frozen=True, slots=True)
class RunOutcome:
    run_id: str
    spec: RunSpec
    status: str  # succeeded | failed | cancelled | interrupted
    error: str | None
    error_stage: str | None  # where a failed run failed: load, start, run, worker, daemon
    metadata: RunMetadata | None
    summaries: list[Summary]  # each stage's (generation), or each timed stage's
    valid: bool | None  # the run's verdict (RunResult.valid); None: a timed run
    capacity: CapacityResult | None  # a capacity search's figure
    hardware: HardwareSummary | None
    timeline: dict[str, Any] | None
    timings: list[Timing]  # a timed run's repetitions
    # A run on every GPU: each GPU's status and stage summaries, and the verdicts of each against its siblings (as
    # stored); part_summaries: each GPU's stage summaries (parts["gpus"][gpu]["stages"], typed).
    parts: dict[str, Any] | None = None
    part_summaries: dict[str, list[Summary]] | None = None
    good_tokens: GoodTokens | None = None  # a generation's good tokens and what they took (measure/cost.py)
    quality: QualitySummary | None = None  # a generation's outputs (first stage) and probe (measure/quality.py)

    @classmethod
    def of(cls, run_id: str, result: RunResult, prices: Prices | None = None) -> RunOutcome:
        summaries = result.summaries()
        stages = [s for s in summaries if isinstance(s, StageSummary)]
        metadata = result.metadata
        quality = QualitySummary.of(result.stages[0].records, metadata.prompts if metadata else None,
                                    metadata.probe if metadata else None,
                                    metadata.probe_error if metadata else None) if result.stages else None
        return cls(run_id, result.spec, result.status, result.error, result.error_stage, metadata, summaries,
                   result.valid(summaries), result.capacity(summaries), result.hardware, result.timeline,
                   list(result.timings), result.parts, result.part_summaries,
                   good_tokens(stages, result.hardware, result.devices, prices), quality)

    @property
    def label(self) -> str | None:
        """The run's label as its worker recorded it (the daemon's default filled in), else its spec's."""
        return self.metadata.label if self.metadata is not None else self.spec.label

    @property
    def stages(self) -> list[StageSummary]:
        """A generation's stage summaries; none for a timed run."""
        return [s for s in self.summaries if isinstance(s, StageSummary)]

    @property
    def roofline(self) -> dict | None:
        """How far from the hardware its last stage with counted steps ran (StageSummary.roofline)."""
        return next((s.roofline for s in reversed(self.stages) if s.roofline), None)

    @property
    def energy_per_token_j(self) -> float | None:
        return self.hardware.energy_per_output_token_joules if self.hardware is not None else None

    def summaries_json(self) -> list[dict[str, Any]]:
        return [s.model_dump(mode="json") for s in self.summaries]
