"""A matrix's comparison: each variant against the baseline, per metric, with compare's intervals and
verdicts (a variant's repeats are its runs), the share of greedy tokens identical to the baseline's, and its quality
against the baseline's beside its speed (measure/quality.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchd.measure.compare import CONFIDENCE, THRESHOLD, change, compare
from benchd.measure.comparison import MetricChange
from benchd.measure.context import SideContext, StackChange, stack_values
from benchd.measure.quality import QualityComparison, RunQuality, compare_quality, run_quality
from benchd.measure.roofline import moved_toward, utilisation
from benchd.measure.sides import LATENCIES, Side
from benchd.measure.stack import stack_of
from benchd.measure.statistics import Spread
from benchd.protocol.probe import Probe
from benchd.spec.fields import Documented

# Figures every run has once, compared over runs like throughput: (figure, exact). Weight bytes are exact (no noise):
# one run a side says it; peak memory varies a little with what the allocator did, so it takes its runs' spread.
RUN_FIGURES = (("peak_memory_bytes", False), ("weight_bytes", True))


@dataclass(slots=True)
class RunFigures:
    """One run of a variant, as the comparison needs it: its first stage's measured, successful requests."""

    run_id: str
    status: str
    samples: dict[str, list[float]] = field(default_factory=dict)  # latency name → per request (ITL: per token), s
    output_tokens_per_s: float | None = None
    energy_per_token_j: float | None = None
    peak_memory_bytes: int | None = None
    weight_bytes: int | None = None
    model_load_s: float | None = None
    tokens: dict[int, list[int]] = field(default_factory=dict)  # request index → generated token ids
    stack: dict[str, str] = field(default_factory=dict)  # its stack (measure/stack.py)
    quantized_layers: int | None = None
    cold: bool = False  # the first run after its engine started
    invalid: list[str] = field(default_factory=list)  # the first stage's broken validity checks (oversaturated, …)
    roofline: dict | None = None  # the first stage's (measure/roofline.py)
    clocks: list[dict] = field(default_factory=list)  # the first stage's GPUs' clock events (hardware/clocks.py)
    quality: RunQuality | None = None  # its outputs and probe (measure/quality.py)


def run_figures(run_id: str, status: str, records: Sequence, summary: dict | None, metadata: dict | None,
                hardware: dict | None, spec: dict | None = None, node: str | None = None,
                probe: Probe | None = None) -> RunFigures:
    """records: the first stage's; summary: its summary (a dict); metadata, hardware, spec, node and probe as
    stored."""
    good = [r for r in records if not r.warmup and r.ok]
    meta, hw = metadata or {}, hardware or {}
    peak = meta.get("peak_memory_bytes")  # torch's allocator; NVML's device-wide peak where torch gave none
    return RunFigures(
        run_id=run_id, status=status,
        samples={"ttft_s": [r.ttft_s for r in good], "e2e_s": [r.e2e_s for r in good],
                 "tpot_s": [t for r in good if (t := r.tpot_s) is not None],
                 "itl_s": [gap for r in good for gap in r.itl_s()]},
        output_tokens_per_s=(summary or {}).get("output_tokens_per_s"),
        energy_per_token_j=hw.get("energy_per_output_token_joules"),
        peak_memory_bytes=peak if peak is not None else hw.get("gpu_memory_peak_bytes"),
        weight_bytes=meta.get("weight_bytes"), model_load_s=meta.get("model_load_s"),
        tokens={r.index: list(r.token_ids) for r in good if r.token_ids},
        stack=stack_of(spec, meta, hw, node), quantized_layers=meta.get("quantized_layers"),
        cold=meta.get("engine_run") == 1, quality=run_quality(run_id, records, probe),
        invalid=[i["check"] for i in (summary or {}).get("invalid") or []], roofline=(summary or {}).get("roofline"),
        clocks=(summary or {}).get("clocks") or [])


def figures_from_result(run_id: str, result) -> RunFigures:
    """A RunResult held in memory (the CLI, tests)."""
    stage = result.stages[0] if result.stages else None
    summary = stage.summary(result.metadata).model_dump() if stage is not None else None
    return run_figures(run_id, result.status, stage.records if stage is not None else [], summary,
                       result.metadata.model_dump(exclude={"probe"}) if result.metadata is not None else None,
                       result.hardware.model_dump() if result.hardware is not None else None,
                       result.spec.model_dump(mode="json"),
                       probe=result.metadata.probe if result.metadata is not None else None)


def figures_from_store(store, run_id: str) -> RunFigures:
    row = store.get_run(run_id)
    if row is None:
        return RunFigures(run_id, "missing")
    return run_figures(run_id, row["status"], store.records(run_id, 0), (row["summary"] or [None])[0],
                       row["run_metadata"], row["hardware"], row["spec"], row.get("node"),
                       Probe.model_validate(row["probe"]) if row.get("probe") else None)


class TokenAgreement(Documented):
    """Greedy tokens of the variant against the baseline's for the same prompts (request index, round by round)."""

    requests: int
    """Requests compared."""
    identical_requests: int
    """Those whose every token is the same."""
    tokens: int
    """Token positions compared (the shorter of each pair)."""
    identical_tokens: int
    """Positions whose tokens are the same."""
    ratio: float | None
    """identical_tokens / tokens."""


class VariantComparison(Documented):
    index: int
    """The variant's index."""
    label: str
    """Its label: the values it sets (engine=static, …)."""
    values: dict[str, Any]
    """The values it sets, by field."""
    baseline: bool
    """It is the baseline the others are compared with."""
    run_ids: list[str]
    """Its runs, by round."""
    statuses: list[str]
    """Each run's status, by round."""
    output_tokens_per_s: float | None
    """Output tokens a second, the mean over its succeeded runs."""
    ttft_p50_s: float | None
    """TTFT p50 pooled over its succeeded runs, in seconds."""
    itl_p50_s: float | None
    """ITL p50 pooled over its succeeded runs, in seconds."""
    tpot_p50_s: float | None
    """TPOT p50 pooled over its succeeded runs, in seconds."""
    weight_bytes: int | None
    """The loaded weights' bytes (after quantization)."""
    quantized_layers: int | None = None
    """The layers its quantization replaced."""
    peak_memory_bytes: int | None
    """torch's allocator peak on a CUDA device, the most of its runs."""
    model_load_s: float | None
    """The model's load, the mean over its runs (it loads again at each)."""
    stack: dict[str, Any]
    """What its runs ran on: its first succeeded run's stack (measure/stack.py; a matrix stored before it, a few of
    its run's metadata's fields)."""
    stack_difference: list[StackChange] = []
    """The fields of the stack whose values differ from the baseline's runs'."""
    metrics: list[MetricChange]
    """Each figure against the baseline (none for the baseline itself)."""
    tokens: TokenAgreement | None
    """Its greedy tokens against the baseline's for the same prompts."""
    quality: QualityComparison | None = None
    """Its outputs and probe against the baseline's, the baseline's own noise, and the verdict: same or different
    (none for the baseline itself)."""
    # Its runs whose (first) stage's verdict is invalid, and those among them whose completions fell behind the
    # offers: their latencies measure a growing queue, and a change against the baseline says how long it grew.
    invalid: list[str] = []
    """Its runs whose (first) stage's verdict is invalid."""
    oversaturated: list[str] = []
    """Those among them whose completions fell behind the offers: their latencies measure a growing queue."""
    # Its mean MBU, MFU and fraction of the roofline bound, and the ceiling it moved toward from the baseline
    # (measure/roofline.py; None: neither utilisation rose, or either lacks them).
    roofline: dict[str, float] | None = None
    """Its mean MBU, MFU and fraction of the roofline bound."""
    moved_toward: str | None = None
    """The ceiling it moved toward from the baseline: bandwidth or compute (null: neither utilisation rose, or either
    lacks them)."""
    clock_states: str | None = None
    """Whether it ran under other clock states than the baseline, and how: a change against it may be the GPU's state,
    not the variant's."""


class MatrixComparison(Documented):
    baseline: int
    """The baseline variant's index."""
    threshold: float
    """The relative change a verdict needs beyond its interval to be faster or slower."""
    confidence: float
    """The intervals' confidence."""
    variants: list[VariantComparison]
    """Each variant, against the baseline."""


def _side(runs: list[RunFigures]) -> Side:
    return Side(run_ids=[r.run_id for r in runs],
                context=SideContext(runs=len(runs), workloads=[], labels=[],
                                    stack=stack_values([r.stack for r in runs])),
                samples={name: [r.samples.get(name, []) for r in runs] for name in LATENCIES},
                output_tokens_per_s=[r.output_tokens_per_s for r in runs],
                energy_per_token_j=[r.energy_per_token_j for r in runs], roofline=[r.roofline for r in runs],
                clocks=[r.clocks for r in runs], cold=[r.run_id for r in runs if r.cold])


def agreement(baseline: list[RunFigures | None], variant: list[RunFigures | None]) -> TokenAgreement | None:
    """Runs paired by round; within a pair, requests by index; tokens by position."""
    requests = same_requests = tokens = same_tokens = 0
    for a, b in zip(baseline, variant):
        if a is None or b is None:
            continue
        for index, ours in b.tokens.items():
            theirs = a.tokens.get(index)
            if theirs is None:
                continue
            n = min(len(ours), len(theirs))
            same = sum(1 for x, y in zip(ours[:n], theirs[:n]) if x == y)
            requests += 1
            same_requests += ours == theirs
            tokens += n
            same_tokens += same
    if not requests:
        return None
    return TokenAgreement(requests=requests, identical_requests=same_requests, tokens=tokens,
                          identical_tokens=same_tokens, ratio=same_tokens / tokens if tokens else None)


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def _pooled_p50(runs: list[RunFigures], name: str) -> float | None:
    pooled = [x for r in runs for x in r.samples.get(name, [])]
    return float(np.percentile(pooled, 50)) if pooled else None


def compare_matrix(variants: Sequence, runs: dict[int, list[RunFigures | None]], baseline: int,
                   threshold: float = THRESHOLD, confidence: float = CONFIDENCE) -> MatrixComparison:
    """variants: objects with index, label and values (matrix.Variant, or their stored form); runs: per variant,
    its runs in round order (None for one that never ran). Only succeeded runs enter a figure."""
    good = {i: [r for r in rs if r is not None and r.status == "succeeded"] for i, rs in runs.items()}
    base = good.get(baseline, [])
    base_line = utilisation(r.roofline for r in base)
    out = []
    for variant in variants:
        index = _get(variant, "index")
        mine, every = good.get(index, []), runs.get(index, [])
        metrics: list[MetricChange] = []
        tokens = clocks = quality = None
        differs: list[StackChange] = []
        if index != baseline:
            against = compare(_side(base), _side(mine), threshold, confidence)
            metrics, clocks, differs = against.metrics, against.clock_states, against.stack_difference
            for name, exact in RUN_FIGURES:
                a = [getattr(r, name) for r in base if getattr(r, name) is not None]
                b = [getattr(r, name) for r in mine if getattr(r, name) is not None]
                metrics.append(change(name, len(a), len(b), float(np.mean(a)) if a else None,
                                      float(np.mean(b)) if b else None, len(a), len(b), 1, Spread.of([a, b]),
                                      threshold, confidence, exact=exact))
            tokens = agreement(runs.get(baseline, []), every)
            quality = compare_quality(_qualities(runs.get(baseline, [])), _qualities(every))
        stack = next((r.stack for r in mine), next((r.stack for r in every if r is not None), {}))
        out.append(VariantComparison(
            index=index, label=_get(variant, "label"), values=_get(variant, "values"), baseline=index == baseline,
            run_ids=[r.run_id for r in every if r is not None], statuses=[r.status for r in every if r is not None],
            output_tokens_per_s=_mean([r.output_tokens_per_s for r in mine]),
            ttft_p50_s=_pooled_p50(mine, "ttft_s"), itl_p50_s=_pooled_p50(mine, "itl_s"),
            tpot_p50_s=_pooled_p50(mine, "tpot_s"),
            weight_bytes=next((r.weight_bytes for r in mine if r.weight_bytes is not None), None),
            peak_memory_bytes=max((r.peak_memory_bytes for r in mine if r.peak_memory_bytes is not None), default=None),
            model_load_s=_mean([r.model_load_s for r in mine]), stack=stack, stack_difference=differs,
            quantized_layers=next((r.quantized_layers for r in mine if r.quantized_layers is not None), None),
            metrics=metrics, tokens=tokens, quality=quality,
            invalid=[r.run_id for r in every if r is not None and r.invalid],
            oversaturated=[r.run_id for r in every if r is not None and "oversaturated" in r.invalid],
            roofline=(line := utilisation(r.roofline for r in mine)),
            moved_toward=moved_toward(base_line, line) if index != baseline else None, clock_states=clocks))
    return MatrixComparison(baseline=baseline, threshold=threshold, confidence=confidence, variants=out)


def _qualities(runs: list[RunFigures | None]) -> list[RunQuality | None]:
    """By round: each succeeded run's outputs and probe."""
    return [r.quality if r is not None and r.status == "succeeded" else None for r in runs]


def _get(variant, name: str):
    return variant[name] if isinstance(variant, dict) else getattr(variant, name)
