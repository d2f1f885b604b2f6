"""A run on every GPU at once: its parts (one a GPU) put together into the whole — every stage's records over all
GPUs, a summary per GPU beside the whole's — its progress summed, and the GPUs compared with their siblings."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from benchd.daemon.ingest import Progress
from benchd.measure.result import RunResult, StageResult
from benchd.measure.siblings import compare_gpus
from benchd.spec import RunSpec

STATUS_ORDER = ("failed", "interrupted", "cancelled", "succeeded")  # the whole is its worst part


def merge(spec: RunSpec, parts: Mapping[str, RunResult]) -> RunResult:
    """The whole run from its parts (by GPU label): stage i holds every GPU's stage i records (one clock: stamps are
    CLOCK_MONOTONIC in every worker), so its summary's throughput is the node's and its latencies every request's."""
    first = next(iter(parts.values()))
    worst = min(parts.items(), key=lambda item: STATUS_ORDER.index(item[1].status))
    whole = RunResult(spec=spec, status=worst[1].status, metadata=first.metadata)
    if worst[1].status != "succeeded":
        whole.error = f"GPU {worst[0]}: {worst[1].error}" if worst[1].error else None
        whole.error_stage = worst[1].error_stage
    indices = sorted({s.index for p in parts.values() for s in p.stages})
    for index in indices:
        stages = [s for p in parts.values() for s in p.stages if s.index == index]
        ends = [s.end_s for s in stages if s.end_s is not None]
        peaks = [s.kv_peak for s in stages if s.kv_peak is not None]
        status = min((s.status for s in stages), key=lambda st: STATUS_ORDER.index(st)
                     if st in STATUS_ORDER else -1)
        stage = StageResult.of(whole.spec, index, stages[0].label, min(s.start_s for s in stages))
        stage.records, stage.status = [r for s in stages for r in s.records], status
        stage.end_s, stage.kv_peak = max(ends) if ends else None, max(peaks) if peaks else None
        stops = [s.stop_reason for s in stages if s.stop_reason is not None]
        stage.stop_reason = stops[0] if stops else None
        drains = [s.drain for s in stages if s.drain is not None]
        stage.drain = (min(d[0] for d in drains), max(d[1] for d in drains)) if drains else None
        stage.clocks = [c for s in stages for c in s.clocks]  # every GPU's, each judged
        whole.stages.append(stage)
    whole.timed = first.timed
    whole.part_summaries = {gpu: p.summaries() for gpu, p in parts.items()}
    whole.parts = {"gpus": {gpu: {"status": p.status, "error": p.error,
                                  "stages": [s.model_dump(mode="json") for s in whole.part_summaries[gpu]]}
                            for gpu, p in parts.items()}}
    whole.part_results = dict(parts)
    return whole


def verdicts(whole: RunResult, threshold: float, confidence: float) -> list[dict]:
    """Each GPU against its siblings on the first stage (load levels are not mixed), as plain data to store."""
    parts = whole.part_results
    if not parts or not whole.stages:
        return []
    index = whole.stages[0].index
    records = {gpu: [r for s in p.stages if s.index == index for r in s.records] for gpu, p in parts.items()}
    throughput = {gpu: next((s.summary().output_tokens_per_s for s in p.stages if s.index == index), 0.0)
                  for gpu, p in parts.items()}
    energy: dict[str, float | None] = {}
    hardware = whole.hardware
    for gpu, p in parts.items():
        joules = next((g.energy_joules for g in hardware.gpus if g.gpu == gpu), None) if hardware else None
        tokens = sum(s.measured_tokens() for s in p.stages)
        energy[gpu] = joules / tokens if joules is not None and tokens else None
    windows = {gpu: w for gpu, p in parts.items()
               if (w := next((s.window() for s in p.stages if s.index == index), None)) is not None}
    if len(windows) < len(parts):  # a GPU with no measured request: nothing to set against its siblings
        return []
    return [v.model_dump(mode="json") for v in compare_gpus(records, throughput, energy, windows, threshold,
                                                            confidence)]


class ProgressSum:
    """One progress for the run from its parts' own: completed and expected summed, the first part's stage."""

    def __init__(self, publish: Callable[[Progress], None] | None, parts: int) -> None:
        self.publish = publish
        self.latest: list[Progress | None] = [None] * parts

    def of(self, i: int) -> Callable[[Progress], None]:
        def report(progress: Progress) -> None:
            self.latest[i] = progress
            known = [p for p in self.latest if p is not None]
            expected = [p.expected for p in known]
            bounds = [p.bound_s for p in known]
            self.publish(Progress(
                known[0].stage, known[0].stage_index, known[0].stages, sum(p.completed for p in known),
                sum(expected) if None not in expected and len(known) == len(self.latest) else None,
                max(p.elapsed_s for p in known), known[0].duration_s, None if None in bounds else max(bounds),
                all(p.draining for p in known)))

        return report
