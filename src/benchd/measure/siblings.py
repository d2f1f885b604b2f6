"""The slow GPU found: in a run on every GPU at once, each GPU's output tok/s, TTFT p99 and J/token against the
median of its siblings, and a verdict: over rounds, by the deciding rule (measure/sequential.py); in one round, with
a bootstrap of its throughput; TTFT p99's from its requests against its siblings' (measure/statistics.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import BaseModel

from benchd.measure import statistics
from benchd.measure.records import RequestRecord
from benchd.measure.sequential import Decision, siblings
from benchd.measure.statistics import CONFIDENCE, THRESHOLD, decide
from benchd.spec.decide import Decide

BUCKET_S = 1.0  # throughput is resampled as tokens per bucket of the measured window
RESAMPLES = 2000
MIN_BUCKETS = 5  # fewer seconds of measurement than this on a GPU: no interval, so no throughput verdict


class GPUVerdict(BaseModel):
    gpu: str
    output_tokens_per_s: float
    relative_throughput: float | None  # ÷ the median of its siblings'
    throughput_ci_low: float | None  # of the relative throughput, at the confidence
    throughput_ci_high: float | None
    ttft_p99_s: float | None
    ttft_p99_change: float | None  # (this − siblings) / siblings
    ttft_p99_ci_low: float | None
    ttft_p99_ci_high: float | None
    energy_per_token_j: float | None
    relative_energy_per_token: float | None  # ÷ the median of its siblings'
    outlier: bool
    reasons: list[str] = []
    # Over rounds: the deciding rule's verdict on its output tok/s against its siblings' median (the relative
    # throughput and its interval above are the decision's), and each round's ratio.
    decision: Decision | None = None
    round_ratios: list[float] = []


def _buckets(records: Sequence[RequestRecord], start: float, end: float) -> tuple[np.ndarray, np.ndarray]:
    """Output tokens arriving in each BUCKET_S of [start, end] (measured requests), and each bucket's length (the
    last one's is what is left): tokens over length, summed, is the GPU's output tok/s over its window."""
    buckets = max(1, int(np.ceil((end - start) / BUCKET_S)))
    counts = np.zeros(buckets)
    for record in records:
        if record.warmup:
            continue
        for t, n in zip(record.arrival_s, record.arrival_tokens):
            if start <= t <= end:
                counts[min(buckets - 1, int((t - start) / BUCKET_S))] += n
    lengths = np.full(buckets, BUCKET_S)
    lengths[-1] = max(1e-9, (end - start) - BUCKET_S * (buckets - 1))
    return counts, lengths


def compare_gpus(parts: Mapping[str, Sequence[RequestRecord]], throughput: Mapping[str, float],
                 energy_per_token: Mapping[str, float | None], windows: Mapping[str, tuple[float, float]],
                 threshold: float = THRESHOLD, confidence: float = CONFIDENCE, seed: int = 0) -> list[GPUVerdict]:
    """parts: each GPU's records of the measured stage; throughput: each one's output tok/s (its summary's, over
    its own measured window); windows: each GPU's measured window (first measured scheduled time → its last measured
    token: a GPU that finishes a fixed number of requests sooner has the shorter one). A GPU is an outlier when it
    is slower than its siblings' median by more than the threshold and the interval agrees (its upper end is below
    1, or the TTFT p99 interval's lower end above 0)."""
    if len(parts) < 2:
        return []
    rng = np.random.default_rng(seed)
    buckets = {gpu: _buckets(records, *windows[gpu]) for gpu, records in parts.items()}

    def rate(gpu: str) -> float:
        """Its output tok/s over a resample of its buckets (with replacement): tokens over time, summed."""
        counts, lengths = buckets[gpu]
        pick = rng.integers(0, len(counts), len(counts))
        return counts[pick].sum() / lengths[pick].sum()

    tail = (1 - confidence) / 2
    enough = min(len(counts) for counts, _ in buckets.values()) >= MIN_BUCKETS
    verdicts = []
    for gpu, records in parts.items():
        siblings = [g for g in parts if g != gpu]
        # Throughput: resample each GPU's buckets; this GPU's rate over the median of the siblings' rates.
        ratios = np.empty(RESAMPLES if enough else 0)
        for i in range(len(ratios)):
            others = np.median([rate(g) for g in siblings])
            ratios[i] = rate(gpu) / others if others else np.nan
        ratios = ratios[np.isfinite(ratios)]
        median = float(np.median([throughput[g] for g in siblings]))
        relative = throughput[gpu] / median if median else None
        low, high = (float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1 - tail))) if len(ratios) else (
            None, None)
        # TTFT p99: this GPU's requests against its siblings' pooled (they ran at once: within the run's variation)
        good = lambda rs: [r.ttft_s for r in rs if not r.warmup and r.ok]  # noqa: E731
        own, others = good(records), [t for g in siblings for t in good(parts[g])]
        estimate = statistics.samples(others, own, 0.99)
        interval = estimate.interval(confidence) if estimate is not None else None
        ttft = decide(interval, threshold) if interval is not None else None  # ttft.interval is this interval
        p99 = float(np.percentile(own, 99)) if own else None
        energies = [e for g in siblings if (e := energy_per_token.get(g)) is not None]
        own_energy = energy_per_token.get(gpu)
        relative_energy = own_energy / float(np.median(energies)) if own_energy is not None and energies else None
        reasons = []
        if relative is not None and high is not None and relative < 1 - threshold and high < 1:
            reasons.append(f"output tok/s {relative:.1%} of its siblings' median (interval {low:.1%}–{high:.1%})")
        if ttft is not None and ttft.verdict == "slower":
            assert interval is not None
            reasons.append(f"TTFT p99 {interval.change:+.1%} against its siblings (interval "
                           f"{interval.change_low:+.1%} to {interval.change_high:+.1%})")
        verdicts.append(GPUVerdict(
            gpu=gpu, output_tokens_per_s=throughput[gpu], relative_throughput=relative, throughput_ci_low=low,
            throughput_ci_high=high, ttft_p99_s=p99, ttft_p99_change=interval.change if interval else None,
            ttft_p99_ci_low=interval.change_low if interval else None,
            ttft_p99_ci_high=interval.change_high if interval else None, energy_per_token_j=own_energy,
            relative_energy_per_token=relative_energy, outlier=bool(reasons), reasons=reasons))
    return verdicts


def decide_gpus(rounds: Sequence[Mapping[str, float]], parts: Mapping[str, Sequence[Sequence[RequestRecord]]],
                energy_per_token: Mapping[str, float | None], rule: Decide, threshold: float = THRESHOLD,
                confidence: float = CONFIDENCE) -> list[GPUVerdict]:
    """rounds: each round's output tok/s by GPU (every GPU at once); parts: each GPU's measured records, a list a
    round. Each GPU's ratio to its siblings' median, round by round, decided by the rule (an outlier when slower by
    more than its effect); its TTFT p99 against its siblings' requests of every round pooled, told but not
    deciding: the rule's error rates hold for the throughput alone."""
    if len(parts) < 2:
        return []
    decided = siblings([dict(r) for r in rounds], rule.effect, rule.confidence, rule.max_rounds)
    good = lambda rs: [r.ttft_s for r in rs if not r.warmup and r.ok]  # noqa: E731
    verdicts = []
    for gpu, own in parts.items():
        decision, ratios = decided.get(gpu, (None, []))
        others = [g for g in parts if g != gpu]
        own_ttft = [t for r in own for t in good(r)]
        estimate = statistics.samples([t for g in others for r in parts[g] for t in good(r)], own_ttft, 0.99)
        interval = estimate.interval(confidence) if estimate is not None else None
        energies = [e for g in others if (e := energy_per_token.get(g)) is not None]
        own_energy = energy_per_token.get(gpu)
        relative_energy = own_energy / float(np.median(energies)) if own_energy is not None and energies else None
        throughput = [r[gpu] for r in rounds if r.get(gpu) is not None]
        verdicts.append(GPUVerdict(
            gpu=gpu, output_tokens_per_s=float(np.mean(throughput)) if throughput else 0.0,
            relative_throughput=decision.ratio if decision else None,
            throughput_ci_low=decision.ci_low if decision else None,
            throughput_ci_high=decision.ci_high if decision else None,
            ttft_p99_s=float(np.percentile(own_ttft, 99)) if own_ttft else None,
            ttft_p99_change=interval.change if interval else None,
            ttft_p99_ci_low=interval.change_low if interval else None,
            ttft_p99_ci_high=interval.change_high if interval else None,
            energy_per_token_j=own_energy, relative_energy_per_token=relative_energy,
            outlier=decision is not None and decision.verdict == "slower",
            reasons=[decision.says()] if decision else [], decision=decision, round_ratios=ratios))
    return verdicts
