"""Did it get slower, and is that real? Two sides of runs compared per metric with a bootstrap interval."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, computed_field

from benchd.hardware.clocks import clock_difference
from benchd.measure.bootstrap import interval, z
from benchd.measure.context import (
    SideContext,
    StackChange,
    differences,
    spread,
)
from benchd.measure.quality import QualityComparison, RunQuality, compare_quality
from benchd.measure.roofline import moved_toward, utilisation
from benchd.spec.fields import Documented

# faster / slower: the interval lies beyond the threshold that way; no significant change: it does not;
# inconclusive: too little data to say (the reason says what is missing); n/a: nothing to compare (no data on a
# side, or the sides share runs).
Verdict = Literal["faster", "slower", "no significant change", "inconclusive", "n/a"]
DECIDED = ("faster", "slower", "no significant change")

# Per-request latency samples: (metric, percentile) pairs compared.
LATENCIES = ("ttft_s", "itl_s", "tpot_s", "e2e_s")
COMPARED = (50, 90, 99)  # of each latency's summary percentiles (records.PERCENTILES): those a comparison reads
# The defaults of every verdict that compares (runs, baselines, matrix variants, a run's GPUs); the daemon's are
# BENCHD_COMPARE_THRESHOLD and BENCHD_COMPARE_CONFIDENCE.
THRESHOLD = 0.05  # a relative change smaller than this is no regression, nor an outlier
CONFIDENCE = 0.95  # of the bootstrap intervals
REQUESTS_FILE = "requests.jsonl"  # `benchd run --out`: one stored request row (RequestRecord.to_row) a line
# Every figure a comparison names: its metric (the JSON's key, the regression gauges' metric label) → the name a
# reader sees in the CLI, the HTML and the JSON's `name`, and the unit of its values (docs/figures.md).
NAMES = {"ttft_s": "TTFT", "itl_s": "ITL", "tpot_s": "TPOT", "e2e_s": "E2E"}
FIGURES = {"output_tokens_per_s": ("output throughput", "tok/s"), "energy_per_token_j": ("energy per token", "J"),
           "weight_bytes": ("weights", "B"), "peak_memory_bytes": ("peak memory", "B")}


def figure(metric: str) -> tuple[str, str]:
    """(name, unit) of a compared metric: ttft_s.p50 → (TTFT p50, s)."""
    latency, _, percentile = metric.partition(".")
    if latency in NAMES:
        return f"{NAMES[latency]} {percentile}".strip(), "s"
    return FIGURES.get(metric, (metric, ""))


class Side(BaseModel):
    """What one side holds: its runs' per-request samples and their run-level figures; what the runs are
    (context), and their workload's stored runs' figures (history), whose run-to-run spread widens a single run's
    interval; each run's outputs and probe (quality)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    run_ids: list[str]
    samples: dict[str, list[list[float]]]  # latency name → per run, per-request (ITL: per-token) samples, s
    output_tokens_per_s: list[float]  # one per run
    energy_per_token_j: list[float]  # one per run that has it
    invalid: list[str] = []  # runs whose verdict is invalid: their figures are not to be trusted
    roofline: list[dict] = []  # each run's first stage's (measure/roofline.py), those that have one
    clocks: list[list[dict]] = []  # each run's first stage's GPUs' clock events (hardware/clocks.py)
    context: SideContext | None = None
    # The workload's stored runs (a side of one run: its workload, model, engine and label's newest), run id → its
    # figures by metric: their run-to-run spread, measured over those the comparison does not hold itself.
    history: dict[str, dict[str, float]] = {}
    quality: list[RunQuality] = []


class MetricChange(Documented):
    metric: str
    """The figure: ttft_s.p99, output_tokens_per_s, …"""
    a: float | None
    """Its value on side a."""
    b: float | None
    """Its value on side b."""
    relative_change: float | None
    """(b − a) / a."""
    ci_low: float | None
    """The relative change's interval at the given confidence, low end."""
    ci_high: float | None
    """The relative change's interval, high end."""
    samples_a: int
    """Samples on side a (requests, or runs)."""
    samples_b: int
    """Samples on side b."""
    verdict: Verdict
    """faster | slower | no significant change | inconclusive | n/a."""
    reason: str | None = None
    """Why it is inconclusive or n/a; what its interval covers, with one run a side."""
    spread: float | None = None
    """The run-to-run spread its interval was widened by (one run on a side)."""

    @computed_field
    @property
    def name(self) -> str:
        """The figure's name as pages and tables say it (TTFT p99, output tok/s, …)."""
        return figure(self.metric)[0]

    @computed_field
    @property
    def unit(self) -> str:
        """Of a and b (the change and its interval are fractions)."""
        return figure(self.metric)[1]

    @property
    def decided(self) -> bool:
        """faster, slower or no significant change: a verdict a gauge or a script may act on."""
        return self.verdict in DECIDED


class Comparison(Documented):
    a: list[str]
    """Side a's runs."""
    b: list[str]
    """Side b's runs."""
    threshold: float
    """The relative change a verdict needs beyond its interval to be faster or slower."""
    confidence: float
    """The intervals' confidence."""
    metrics: list[MetricChange]
    """Each figure's change from a to b."""
    invalid: list[str] = []
    """Runs on either side whose verdict is invalid: read the verdicts first."""
    # How far from the hardware (measure/roofline.py): each side's mean MBU, MFU and fraction of the bound, and the
    # ceiling b moved toward from a (bandwidth, compute; None: neither utilisation rose, or either side lacks them).
    roofline_a: dict[str, float] | None = None
    """Side a's mean MBU, MFU and fraction of the roofline bound."""
    roofline_b: dict[str, float] | None = None
    """Side b's mean MBU, MFU and fraction of the roofline bound."""
    moved_toward: str | None = None
    """The ceiling b moved toward from a: bandwidth or compute (null: neither utilisation rose, or either side lacks
    them)."""
    # What was compared: each side's runs, workloads, labels, dates and stack, and the stack entries that differ.
    context_a: SideContext | None = None
    """Side a: its runs, workloads, labels, dates and stack."""
    context_b: SideContext | None = None
    """Side b: its runs, workloads, labels, dates and stack."""
    stack_difference: list[StackChange] = []
    """The stack entries that differ between the sides."""
    warnings: list[str] = []
    """What makes the verdicts weaker or void (shared runs, one run a side, invalid runs)."""
    clock_states: str | None = None
    """Whether the two sides ran under different clock states, and how: a change between them may be the GPU's state,
    not the software's (null: the same, or no GPU samples)."""
    quality: QualityComparison | None = None
    """b's outputs and quality probe against a's, judged against a's own noise (its runs against each other): same or
    different beside the speed (null: a side holds no outputs)."""

    @property
    def regressions(self) -> list[MetricChange]:
        return [m for m in self.metrics if m.verdict == "slower"]


def _verdict(low: float, high: float, threshold: float, higher_is_worse: bool) -> Verdict:
    """Significant and beyond the threshold in one direction; otherwise no significant change."""
    if low > threshold:
        return "slower" if higher_is_worse else "faster"
    if high < -threshold:
        return "faster" if higher_is_worse else "slower"
    return "no significant change"


def metric_change(name: str, a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], statistic, threshold: float,
                  confidence: float, min_samples: int, higher_is_worse: bool, rng: np.random.Generator,
                  resamples: int, single: str | None = None, spread: float | None = None,
                  spread_runs: int = 0, deadline: float | None = None) -> MetricChange:
    """a, b: each side's samples, one list per run. single: which sides hold one run ("side A", "side B", "each
    side"), whose run-to-run variation the bootstrap cannot see: the interval is widened by the spread (a single
    run's figure's relative standard deviation, measured over spread_runs stored runs) where there is one, and its
    reason says what it covers."""
    ra = [np.asarray(run, dtype=np.float64) for run in a if len(run)]
    rb = [np.asarray(run, dtype=np.float64) for run in b if len(run)]
    na, nb = sum(map(len, ra)), sum(map(len, rb))
    va = float(statistic(np.concatenate(ra))) if ra else None
    vb = float(statistic(np.concatenate(rb))) if rb else None
    change = (vb - va) / va if va and vb is not None else None
    base = dict(metric=name, a=va, b=vb, relative_change=change, samples_a=na, samples_b=nb)
    if not na or not nb:
        where = "either side" if not na and not nb else "A" if not na else "B"
        return MetricChange(**base, ci_low=None, ci_high=None, verdict="n/a", reason=f"no data on {where}")
    if min(na, nb) < min_samples:
        return MetricChange(**base, ci_low=None, ci_high=None, verdict="inconclusive",
                            reason=f"too few samples: {na} and {nb}, at least {min_samples} per side needed")
    if not va:  # 0 on A (an energy counter that did not move): a change relative to it means nothing
        return MetricChange(**base, ci_low=None, ci_high=None, verdict="inconclusive",
                            reason="A's value is 0: no relative change")
    # Time grows with resamples × samples: per-token ITL samples get fewer resamples.
    resamples = max(200, min(resamples, int(2e7 // max(na, nb))))
    low, high = interval(ra, rb, statistic, confidence, resamples, rng, deadline)
    if math.isnan(low):
        return MetricChange(**base, ci_low=None, ci_high=None, verdict="inconclusive",
                            reason="A's value is 0 in its resamples: no relative change")
    reason = None
    if single is not None and spread is not None and change is not None:
        # The two variations add: the bootstrap's (within the runs) and a single run's figure from run to run.
        extra = z(confidence) * spread * math.sqrt(2 if single == "each side" else 1)
        low = change - math.hypot(change - low, extra)
        high = change + math.hypot(high - change, extra)
        reason = (f"one run on {single}: the interval is widened by the workload's run-to-run spread (±{spread:.1%} "
                  f"a run, over {spread_runs} stored runs)")
    elif single is not None:
        reason = (f"one run on {single}: the interval covers the variation within the run, not from run to run "
                  "(no run-to-run spread of this workload is known: compare several runs a side)")
    return MetricChange(**base, ci_low=low, ci_high=high, verdict=_verdict(low, high, threshold, higher_is_worse),
                        reason=reason, spread=spread if single is not None else None)


def _run_level(name: str, a: list[float], b: list[float], threshold: float, confidence: float, min_runs: int,
               higher_is_worse: bool, rng: np.random.Generator, resamples: int, spread: float | None,
               spread_runs: int, deadline: float | None = None) -> MetricChange:
    """A per-run figure (the runs are the samples): with fewer than min_runs a side, the interval comes from the
    workload's run-to-run spread, where the store has one: the means' relative change ± z · spread · √(1/na + 1/nb)."""
    found = metric_change(name, [a], [b], np.mean, threshold, confidence, min_runs, higher_is_worse, rng, resamples,
                          deadline=deadline)
    if found.verdict != "inconclusive" or spread is None or found.relative_change is None:
        if found.verdict == "inconclusive" and found.reason.startswith("too few"):
            found.reason = f"{found.reason} (or a stored history of the workload, for its run-to-run spread)"
        return found
    half = z(confidence) * spread * math.sqrt(1 / len(a) + 1 / len(b))
    low, high = found.relative_change - half, found.relative_change + half
    return found.model_copy(update=dict(
        ci_low=low, ci_high=high, verdict=_verdict(low, high, threshold, higher_is_worse), spread=spread,
        reason=f"{len(a)} and {len(b)} runs: the interval is the workload's run-to-run spread (±{spread:.1%} a run, "
               f"over {spread_runs} stored runs)"))


def compare(a: Side, b: Side, threshold: float = THRESHOLD, confidence: float = CONFIDENCE, min_samples: int = 20,
            min_runs: int = 2, resamples: int = 2000, seed: int = 0, deadline: float | None = None) -> Comparison:
    """Latency percentiles from per-request samples; throughput and energy from per-run figures (so they need
    min_runs runs on each side to say anything, or the workload's run-to-run spread). Sides that share a run get no
    verdict: a run compared with itself says nothing. deadline: time.monotonic() past which OverBudget is raised."""
    rng = np.random.default_rng(seed)
    ones = [label for label, side in (("A", a), ("B", b)) if len(side.run_ids) == 1]
    single = "each side" if len(ones) == 2 else f"side {ones[0]}" if ones else None
    compared = {*a.run_ids, *b.run_ids}
    history = [figures for side in (a, b) for run_id, figures in side.history.items() if run_id not in compared]
    if a.history:  # the baseline's runs alone, where it has them
        history = [figures for run_id, figures in a.history.items() if run_id not in compared] or history
    measured = spread(history)
    metrics = []
    for name in LATENCIES:
        for p in COMPARED:
            # A percentile needs observations beyond it: at least 10 in its tail (p99: 1,000 samples), else its
            # bootstrap interval is an artefact of the few largest values.
            needed = max(min_samples, round(10 / (1 - p / 100)))
            metric = f"{name}.p{p}"
            metrics.append(metric_change(
                metric, a.samples.get(name, []), b.samples.get(name, []),
                lambda x, p=p: np.percentile(x, p), threshold, confidence, needed, higher_is_worse=True, rng=rng,
                resamples=resamples, single=single, spread=measured.get(metric), spread_runs=len(history),
                deadline=deadline))
    # Run-level figures: the runs are the samples.
    for name, worse in (("output_tokens_per_s", False), ("energy_per_token_j", True)):
        metrics.append(_run_level(name, getattr(a, name), getattr(b, name), threshold, confidence, min_runs, worse,
                                  rng, resamples, measured.get(name), len(history), deadline))
    warnings = []
    if shared := [r for r in a.run_ids if r in set(b.run_ids)]:
        warnings.append(f"A and B share {len(shared)} of their runs ({', '.join(shared[:3])}"
                        f"{', …' if len(shared) > 3 else ''}): a run compared with itself says nothing, so no verdict "
                        "is given; choose runs apart (a_label and b_label, or run ids)")
        metrics = [m.model_copy(update=dict(verdict="n/a", ci_low=None, ci_high=None, spread=None,
                                            reason="A and B share runs")) for m in metrics]
    elif single is not None:
        warnings.append(next((m.reason for m in metrics if m.reason and m.reason.startswith("one run")),
                             f"one run on {single}"))
    if invalid := [*a.invalid, *b.invalid]:
        warnings.append(f"INVALID runs (their figures are not to be trusted): {', '.join(invalid)}")
    line_a, line_b = utilisation(a.roofline), utilisation(b.roofline)
    return Comparison(a=a.run_ids, b=b.run_ids, threshold=threshold, confidence=confidence, metrics=metrics,
                      invalid=invalid, roofline_a=line_a, roofline_b=line_b,
                      moved_toward=moved_toward(line_a, line_b), context_a=a.context, context_b=b.context,
                      stack_difference=differences(a.context, b.context), warnings=warnings,
                      clock_states=clock_difference(a.clocks, b.clocks),
                      quality=compare_quality(a.quality, b.quality) if a.quality and b.quality else None)
