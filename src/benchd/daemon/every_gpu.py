"""A run on every GPU at once: its parts (one a GPU) put together into the whole — every stage's records over all
GPUs, a summary per GPU beside the whole's — its rounds (the workload again on every GPU at once, until each GPU's
verdict decides) put one after the other, its progress summed, and the GPUs compared with their siblings."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from benchd.daemon.ingest import Progress
from benchd.measure.result import RunResult, StageResult
from benchd.measure.sequential import siblings
from benchd.measure.siblings import compare_gpus, decide_gpus
from benchd.spec import RunSpec
from benchd.spec.decide import Decide

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
        stage = StageResult.of(whole.generation, index, stages[0].label, min(s.start_s for s in stages))
        stage.open_loop = stages[0].open_loop  # a round's stage keeps its stage's (its index is past the spec's)
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


def stitch(rounds: list[RunResult]) -> RunResult:
    """One GPU's rounds (or a run's only one) as one result: round r's stage i is stage r·S + i of the whole (S: the
    workload's stages), its label the stage's and its round; the status the worst round's, the metadata the last's."""
    first = rounds[0]
    if len(rounds) == 1:
        return first
    worst = min(rounds, key=lambda r: STATUS_ORDER.index(r.status))
    whole = RunResult(spec=first.spec, status=worst.status, error=worst.error, error_stage=worst.error_stage,
                      metadata=rounds[-1].metadata or first.metadata, timed=first.timed)
    count = first.generation.workload.stage_count()
    for r, result in enumerate(rounds):
        for stage in result.stages:
            stage.index = r * count + stage.index
            stage.label = f"{stage.label} · round {r + 1}"
            whole.stages.append(stage)
    return whole


def round_throughputs(parts: Mapping[str, list[RunResult]]) -> list[dict[str, float]]:
    """Each round's output tok/s by GPU (its first stage's, over its own measured window), rounds in order; a GPU
    whose round measured nothing is left out of that round."""
    rounds = max((len(results) for results in parts.values()), default=0)
    out: list[dict[str, float]] = []
    for r in range(rounds):
        figures = {}
        for gpu, results in parts.items():
            stage = results[r].stages[0] if r < len(results) and results[r].stages else None
            if stage is not None and stage.window() is not None:
                figures[gpu] = stage.summary().output_tokens_per_s
        out.append(figures)
    return out


def decided(rounds: list[dict[str, float]], rule: Decide) -> bool:
    """Whether every GPU's verdict is decided after these rounds (slower, faster, or equivalent)."""
    found = siblings(rounds, rule.effect, rule.confidence, rule.max_rounds)
    return bool(found) and all(decision.decided for decision, _ in found.values())


def verdicts(whole: RunResult, threshold: float, confidence: float, rule: Decide | None = None,
             rounds: int = 1) -> list[dict]:
    """Each GPU against its siblings, as plain data to store: over rounds (rounds > 1) by the deciding rule on
    each round's first stage; in one round, on its first stage (load levels are not mixed) with bootstrap
    intervals."""
    parts = whole.part_results
    if not parts or not whole.stages:
        return []
    count = whole.generation.workload.stage_count()
    firsts = [r * count for r in range(rounds)]
    energy: dict[str, float | None] = {}
    hardware = whole.hardware
    for gpu, p in parts.items():
        joules = next((g.energy_joules for g in hardware.gpus if g.gpu == gpu), None) if hardware else None
        tokens = sum(s.measured_tokens() for s in p.stages)
        energy[gpu] = joules / tokens if joules is not None and tokens else None
    if rule is not None and rounds > 1:
        by_round = [{gpu: s.summary().output_tokens_per_s for gpu, p in parts.items() for s in p.stages
                     if s.index == index and s.window() is not None} for index in firsts]
        by_gpu = {gpu: [[r for s in p.stages if s.index == index for r in s.records] for index in firsts]
                  for gpu, p in parts.items()}
        return [v.model_dump(mode="json") for v in decide_gpus(by_round, by_gpu, energy, rule, threshold,
                                                               confidence)]
    index = whole.stages[0].index
    records = {gpu: [r for s in p.stages if s.index == index for r in s.records] for gpu, p in parts.items()}
    throughput = {gpu: next((s.summary().output_tokens_per_s for s in p.stages if s.index == index), 0.0)
                  for gpu, p in parts.items()}
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
        publish = self.publish
        assert publish is not None  # asked only of a sum that publishes (daemon/lifecycle.py, Lifecycle._round)

        def report(progress: Progress) -> None:
            self.latest[i] = progress
            known = [p for p in self.latest if p is not None]
            expected = [p.expected for p in known if p.expected is not None]
            bounds = [p.bound_s for p in known if p.bound_s is not None]
            publish(Progress(
                known[0].stage, known[0].stage_index, known[0].stages, sum(p.completed for p in known),
                sum(expected) if len(expected) == len(known) == len(self.latest) else None,
                max(p.elapsed_s for p in known), known[0].duration_s,
                max(bounds) if len(bounds) == len(known) else None, all(p.draining for p in known)))

        return report
