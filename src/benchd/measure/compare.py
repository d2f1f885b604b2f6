"""Did it get slower, and is that real? Two sides of runs compared figure by figure: each side's figure, the ratio's
interval on the log scale from how much the figure moves from run to run (measure/statistics.py), and a verdict."""

from __future__ import annotations

import math

import numpy as np

from benchd.hardware.clocks import clock_difference
from benchd.measure import statistics
from benchd.measure.catalog import figure
from benchd.measure.comparison import Comparison, LeftOut, MetricChange
from benchd.measure.context import differences
from benchd.measure.deadline import in_time
from benchd.measure.quality import compare_quality
from benchd.measure.roofline import moved_toward, utilisation
from benchd.measure.sides import LATENCIES, Side
from benchd.measure.statistics import THRESHOLD, Spread, decide, samples_needed

__all__ = ["THRESHOLD"]  # the threshold, for its readers

# The intervals' confidence a comparison decides at (BENCHD_COMPARE_CONFIDENCE's default): on stored runs of one spec
# on a shared 2-core machine, whose figures move ±15 % from run to run with heavier tails than a normal's, 0.95 called
# up to 6.5 % of the comparisons slower or faster on a figure and 0.99 up to 3.5 %; 0.995 kept every
# figure within 1 % (bench/compare_rule.py, docs/benchmarks.md). A gate that cries wolf is switched off.
CONFIDENCE = 0.995

# Each side's requests pooled: every latency the side holds (measure/sides.py's LATENCIES) at these percentiles.
COMPARED = (50, 90, 99)  # of each latency's summary percentiles (summary.PERCENTILES): those a comparison reads
# One a run: the runs are the samples. Which way is worse, for these and the latencies: the catalog's
# (measure/catalog.py), which names them too (measure/comparison.py).
RUN_LEVEL = ("output_tokens_per_s", "energy_per_token_j")
COLD = ("ran cold: the first run after its engine started, the engine's own warm-up in its figures (left out while "
        "both sides have warm runs)")


def change(metric: str, runs_a: int, runs_b: int, value_a: float | None, value_b: float | None, count_a: int,
           count_b: int, needed: int, spread: Spread | None, threshold: float, confidence: float,
           exact: bool = False) -> MetricChange:
    """One figure, B against A: each side's runs, its value (value_a, value_b) and its samples (count_a, count_b;
    needed a side at least); spread: how much the figure moves from run to run, over groups that hold the sides'
    runs (and the stored runs of their stacks). exact: a figure with no noise (the weights' bytes), whose ratio is
    its own interval. Which way is worse is the catalog's (measure/catalog.py)."""
    relative = (value_b - value_a) / value_a if value_a and value_b is not None else None
    base = dict(metric=metric, a=value_a, b=value_b, relative_change=relative, samples_a=count_a, samples_b=count_b)
    if not count_a or not count_b:
        where = "either side" if not count_a and not count_b else "A" if not count_a else "B"
        return MetricChange(**base, ci_low=None, ci_high=None, verdict="n/a", reason=f"no data on {where}")
    if min(count_a, count_b) < needed:
        return MetricChange(**base, ci_low=None, ci_high=None, verdict="inconclusive",
                            reason=f"too few samples: {count_a} and {count_b}, at least {needed} per side needed")
    if not value_a or not value_b:  # 0 on a side (an energy counter that did not move): no ratio to bound
        return MetricChange(**base, ci_low=None, ci_high=None, verdict="inconclusive",
                            reason=f"{'A' if not value_a else 'B'}'s value is 0: no relative change")
    if exact:
        estimate = statistics.Estimate(math.log(value_b / value_a), 0.0, math.inf)
    elif spread is None:
        return MetricChange(**base, ci_low=None, ci_high=None, verdict="inconclusive", reason=(
            "one run a side and no run-to-run spread of the same stack: nothing says how much one run's figure "
            "moves; compare several runs a side"))
    else:
        estimate = statistics.between(value_a, value_b, runs_a, runs_b, spread)
    rests_on = None if exact else spread  # the spread the interval rests on: none for an exact figure, else one
    interval = estimate.interval(confidence)
    decision = decide(interval, threshold, figure(metric).higher_is_worse)
    reason = decision.reason
    if rests_on is not None and min(runs_a, runs_b) == 1:
        rests = (f"one run on a side: the interval rests on the run-to-run spread of {rests_on.runs} runs of the "
                 f"same stacks in their history segments, the compared ones among them (±{rests_on.relative:.1%} a "
                 "run)")
        reason = f"{reason}; {rests}" if reason else rests
    return MetricChange(**base, ci_low=interval.change_low, ci_high=interval.change_high,
                        verdict=decision.verdict, reason=reason,
                        spread=rests_on.relative if rests_on is not None else None,
                        spread_runs=rests_on.runs if rests_on is not None else None)


def _spread(a: Side, b: Side, metric: str, each_a: dict[str, float], each_b: dict[str, float]) -> Spread | None:
    """How much the figure moves from run to run: the variance of its logarithm over the stored runs of each side's
    stack in its history segments (each group about its mean; the compared runs among them, as stored), and over
    each side's runs that no group holds (a result directory's: the sides' own spread), each run once (two sides
    of one stack share their group)."""
    seen: set[str] = set()
    groups = []
    for group in (*a.history, *b.history):
        groups.append([f[metric] for run_id, f in group.items() if run_id not in seen and metric in f])
        seen.update(group)
    groups += [[v for run_id, v in each.items() if run_id not in seen] for each in (each_a, each_b)]
    return Spread.of(groups)


def _like_for_like(a: Side, b: Side) -> tuple[Side, Side, list[LeftOut], str | None]:
    """Warm runs against warm ones while both sides have some; else cold against cold; else no verdict (the
    reason). The runs left out, with why."""
    warm_a, warm_b = [r for r in a.run_ids if r not in a.cold], [r for r in b.run_ids if r not in b.cold]
    if warm_a and warm_b:
        return a.only(warm_a), b.only(warm_b), [LeftOut(run_id=r, reason=COLD) for r in (*a.cold, *b.cold)], None
    if a.cold and b.cold:
        left = [LeftOut(run_id=r, reason="ran warm: the other side's runs all ran cold, compared cold against cold")
                for r in (*warm_a, *warm_b)]
        return a.only(a.cold), b.only(b.cold), left, None
    which = "A" if not warm_a else "B"
    return a, b, [], (f"{which}'s runs all ran cold (the first after their engine started) and the other side's warm: "
                      "a change may be the engine's warm-up; compare warm runs")


def compare(a: Side, b: Side, threshold: float = THRESHOLD, confidence: float = CONFIDENCE,
            deadline: float | None = None) -> Comparison:
    """Latency percentiles of each side's requests pooled, throughput and energy the mean of its runs'; each
    interval from the run-to-run variance of the figure (the sides' runs and the stored runs of their stacks).
    Sides that share a run get no verdict: a run compared with itself says nothing. deadline: time.monotonic() past
    which OverBudget is raised."""
    given_a, given_b = a, b
    a, b, left, apart = _like_for_like(a, b)
    metrics = []
    for name in LATENCIES:
        in_time(deadline)
        runs_a = {i: np.asarray(r, dtype=np.float64) for i, r in zip(a.run_ids, a.samples.get(name, [])) if len(r)}
        runs_b = {i: np.asarray(r, dtype=np.float64) for i, r in zip(b.run_ids, b.samples.get(name, [])) if len(r)}
        pooled_a = np.percentile(np.concatenate(list(runs_a.values())), COMPARED) if runs_a else None
        pooled_b = np.percentile(np.concatenate(list(runs_b.values())), COMPARED) if runs_b else None
        each_a = {i: np.percentile(r, COMPARED) for i, r in runs_a.items()}
        each_b = {i: np.percentile(r, COMPARED) for i, r in runs_b.items()}
        for k, p in enumerate(COMPARED):
            metric = f"{name}.p{p}"
            spread = _spread(a, b, metric, {i: v[k] for i, v in each_a.items()}, {i: v[k] for i, v in each_b.items()})
            metrics.append(change(
                metric, len(runs_a), len(runs_b), None if pooled_a is None else float(pooled_a[k]),
                None if pooled_b is None else float(pooled_b[k]), sum(map(len, runs_a.values())),
                sum(map(len, runs_b.values())), samples_needed(p / 100), spread, threshold, confidence))
    for name in RUN_LEVEL:  # the runs are the samples
        values_a = {i: v for i, v in zip(a.run_ids, getattr(a, name)) if v is not None}
        values_b = {i: v for i, v in zip(b.run_ids, getattr(b, name)) if v is not None}
        metrics.append(change(name, len(values_a), len(values_b),
                              float(np.mean(list(values_a.values()))) if values_a else None,
                              float(np.mean(list(values_b.values()))) if values_b else None, len(values_a),
                              len(values_b), 1, _spread(a, b, name, values_a, values_b), threshold, confidence))
    warnings = []
    if shared := [r for r in given_a.run_ids if r in set(given_b.run_ids)]:
        warnings.append(f"A and B share {len(shared)} of their runs ({', '.join(shared[:3])}"
                        f"{', …' if len(shared) > 3 else ''}): a run compared with itself says nothing, so no verdict "
                        "is given; choose runs apart (a_label and b_label, or run ids)")
        metrics = [m.model_copy(update=dict(verdict="n/a", ci_low=None, ci_high=None, spread=None, spread_runs=None,
                                            reason="A and B share runs")) for m in metrics]
    elif apart is not None:
        warnings.append(apart)
        metrics = [m.model_copy(update=dict(verdict="inconclusive", reason=apart)) if m.decided else m
                   for m in metrics]
    if single := [side for side, runs in (("A", a.run_ids), ("B", b.run_ids)) if len(runs) == 1]:
        most = max((m.spread_runs or 0) for m in metrics) if metrics else 0
        warnings.append(f"one run on {'each side' if len(single) == 2 else f'side {single[0]}'}: "
                        + (f"the intervals rest on the run-to-run spread of up to {most} runs of the same stacks in "
                           "their history segments" if most else "no stored runs of the same stack say how much "
                           "one run's figure moves; compare several runs a side"))
    if left:
        warnings.append(f"left out: {', '.join(o.run_id for o in left)} ({left[0].reason})")
    if invalid := [*given_a.invalid, *given_b.invalid]:
        warnings.append(f"INVALID runs (their figures are not to be trusted): {', '.join(invalid)}")
    line_a, line_b = utilisation(a.roofline), utilisation(b.roofline)
    return Comparison(a=given_a.run_ids, b=given_b.run_ids, threshold=threshold, confidence=confidence,
                      metrics=metrics, invalid=invalid, left_out=left, roofline_a=line_a, roofline_b=line_b,
                      moved_toward=moved_toward(line_a, line_b), context_a=given_a.context,
                      context_b=given_b.context, stack_difference=differences(given_a.context, given_b.context),
                      warnings=warnings, clock_states=clock_difference(a.clocks, b.clocks),
                      quality=compare_quality(a.quality, b.quality) if a.quality and b.quality else None)
