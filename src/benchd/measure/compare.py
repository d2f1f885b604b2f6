"""Did it get slower, and is that real? Two sides of runs compared figure by figure: each side's figure, the ratio's
interval on the log scale from how much the figure moves from run to run (measure/statistics.py), and a verdict."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, computed_field, model_validator

from benchd.hardware.clocks import clock_difference
from benchd.measure import statistics
from benchd.measure.context import SideContext, StackChange, differences
from benchd.measure.deadline import in_time
from benchd.measure.quality import QualityComparison, RunQuality, compare_quality
from benchd.measure.roofline import moved_toward, utilisation
from benchd.measure.statistics import DECIDED, THRESHOLD, Spread, Verdict, decide, samples_needed
from benchd.spec.fields import Documented

__all__ = ["DECIDED", "THRESHOLD", "Verdict"]  # the verdicts' words and the threshold, for their readers

# The intervals' confidence a comparison decides at (BENCHD_COMPARE_CONFIDENCE's default): on stored runs of one spec
# on a shared 2-core machine, whose figures move ±15 % from run to run with heavier tails than a normal's, 0.95 called
# up to 6.5 % of the comparisons slower or faster on a figure and 0.99 up to 3.5 %; 0.995 kept every
# figure within 1 % (bench/compare_rule.py, docs/benchmarks.md). A gate that cries wolf is switched off.
CONFIDENCE = 0.995

# Per-request latency samples: (metric, percentile) pairs compared.
LATENCIES = ("ttft_s", "itl_s", "tpot_s", "e2e_s")
COMPARED = (50, 90, 99)  # of each latency's summary percentiles (summary.PERCENTILES): those a comparison reads
RUN_LEVEL = (("output_tokens_per_s", False), ("energy_per_token_j", True))  # (figure, higher is worse), one a run
# Every figure a comparison names: its metric (the JSON's key, the regression gauges' metric label) → the name a
# reader sees in the CLI, the HTML and the JSON's `name`, and the unit of its values (docs/figures.md).
NAMES = {"ttft_s": "TTFT", "itl_s": "ITL", "tpot_s": "TPOT", "e2e_s": "E2E"}
FIGURES = {"output_tokens_per_s": ("output throughput", "tok/s"), "energy_per_token_j": ("energy per token", "J"),
           "weight_bytes": ("weights", "B"), "peak_memory_bytes": ("peak memory", "B")}
# What a comparison stored before issue 53 (a matrix's) may say where "equivalent" is now: its interval did not lie
# beyond the threshold (it may have reached past it: the verdict is read back as stored, and counts as decided).
STORED = "no significant change"
COLD = ("ran cold: the first run after its engine started, the engine's own warm-up in its figures (left out while "
        "both sides have warm runs)")


def figure(metric: str) -> tuple[str, str]:
    """(name, unit) of a compared metric: ttft_s.p50 → (TTFT p50, s)."""
    latency, _, percentile = metric.partition(".")
    if latency in NAMES:
        return f"{NAMES[latency]} {percentile}".strip(), "s"
    return FIGURES.get(metric, (metric, ""))


class Side(BaseModel):
    """What one side holds, run by run (each list one entry a run, in run_ids' order): its per-request samples and
    run-level figures, what the runs are (context), which ran cold, and stored runs of the same stack (history),
    whose run-to-run spread it pools with its own; each run's outputs and probe (quality)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    run_ids: list[str]
    samples: dict[str, list[list[float]]]  # latency name → per run, per-request (ITL: per-token) samples, s
    output_tokens_per_s: list[float | None]  # one a run
    energy_per_token_j: list[float | None]  # one a run (None: no GPU energy counter)
    invalid: list[str] = []  # runs whose verdict is invalid: their figures are not to be trusted
    roofline: list[dict | None] = []  # each run's first stage's (measure/roofline.py), or none
    clocks: list[list[dict]] = []  # each run's first stage's GPUs' clock events (hardware/clocks.py), or none
    cold: list[str] = []  # runs that were the first after their engine started
    context: SideContext | None = None
    # Groups of stored runs (run id → its figures by metric), each of one stack in one segment of its workload's
    # history: the runs of this side's stack whose run-to-run spread is pooled with the runs compared.
    history: list[dict[str, dict[str, float]]] = []
    quality: list[RunQuality] = []

    @model_validator(mode="after")
    def _one_a_run(self) -> Side:
        runs = len(self.run_ids)
        lists = {"output_tokens_per_s": self.output_tokens_per_s, "energy_per_token_j": self.energy_per_token_j,
                 **{f"samples.{k}": v for k, v in self.samples.items()}}
        lists.update((k, v) for k, v in (("roofline", self.roofline), ("clocks", self.clocks),
                                         ("quality", self.quality)) if v)
        if wrong := [name for name, values in lists.items() if len(values) != runs]:
            raise ValueError(f"{', '.join(wrong)}: one entry a run ({runs})")
        return self

    def only(self, keep: Iterable[str]) -> Side:
        """This side with only the runs kept."""
        keep = set(keep)
        index = [i for i, run_id in enumerate(self.run_ids) if run_id in keep]

        def pick(values: list) -> list:
            return [values[i] for i in index] if values else values

        return self.model_copy(update=dict(
            run_ids=pick(self.run_ids), samples={k: pick(v) for k, v in self.samples.items()},
            output_tokens_per_s=pick(self.output_tokens_per_s), energy_per_token_j=pick(self.energy_per_token_j),
            roofline=pick(self.roofline), clocks=pick(self.clocks), quality=pick(self.quality),
            invalid=[r for r in self.invalid if r in keep], cold=[r for r in self.cold if r in keep]))


class MetricChange(Documented):
    metric: str
    """The figure: ttft_s.p99, output_tokens_per_s, …"""
    a: float | None
    """Its value on side a: a percentile of its runs' requests pooled, or the mean of its runs' figures."""
    b: float | None
    """Its value on side b."""
    relative_change: float | None
    """b / a − 1."""
    ci_low: float | None
    """The relative change's interval at the given confidence, low end (never below −1: taken on the log scale)."""
    ci_high: float | None
    """The relative change's interval, high end."""
    samples_a: int
    """Samples on side a (requests, tokens, or runs)."""
    samples_b: int
    """Samples on side b."""
    verdict: Verdict | Literal["no significant change"]
    """faster | slower | equivalent | inconclusive | n/a (no significant change: a matrix's comparison stored before
    equivalent was, whose interval did not lie beyond the threshold)."""
    reason: str | None = None
    """Why it is inconclusive or n/a; what its interval rests on, with one run on a side."""
    spread: float | None = None
    """How much one run's figure moves from run to run, which the interval rests on: √ of the variance of ln(figure)
    pooled over the runs compared and stored runs of the same stack (0.05: about ±5 % a run)."""
    spread_runs: int | None = None
    """The runs that spread was measured over, stored ones included."""

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
        """faster, slower or equivalent: a verdict a gauge or a script may act on."""
        return self.verdict in DECIDED or self.verdict == STORED


class LeftOut(Documented):
    run_id: str
    """The run."""
    reason: str
    """Why the comparison left it out."""


class Comparison(Documented):
    a: list[str]
    """Side a's runs."""
    b: list[str]
    """Side b's runs."""
    threshold: float
    """The relative change a verdict needs beyond its interval to be faster or slower (on the log scale: slower above
    1 + threshold, faster below 1 / (1 + threshold))."""
    confidence: float
    """The intervals' confidence."""
    metrics: list[MetricChange]
    """Each figure's change from a to b."""
    invalid: list[str] = []
    """Runs on either side whose verdict is invalid: read the verdicts first."""
    left_out: list[LeftOut] = []
    """Runs given that the comparison left out, and why (a run that ran cold beside warm ones)."""
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
    """The fields of the stack (measure/stack.py) whose values differ between the sides."""
    warnings: list[str] = []
    """What makes the verdicts weaker or void (shared runs, one run a side, invalid or cold runs)."""
    clock_states: str | None = None
    """Whether the two sides ran under different clock states, and how: a change between them may be the GPU's state,
    not the software's (null: the same, or no GPU samples)."""
    quality: QualityComparison | None = None
    """b's outputs and quality probe against a's, judged against a's own noise (its runs against each other): same or
    different beside the speed (null: a side holds no outputs)."""

    @property
    def regressions(self) -> list[MetricChange]:
        return [m for m in self.metrics if m.verdict == "slower"]


def change(metric: str, runs_a: int, runs_b: int, value_a: float | None, value_b: float | None, count_a: int,
           count_b: int, needed: int, higher_is_worse: bool, spread: Spread | None, threshold: float,
           confidence: float, exact: bool = False) -> MetricChange:
    """One figure, B against A: each side's runs, its value (value_a, value_b) and its samples (count_a, count_b;
    needed a side at least); spread: how much the figure moves from run to run, over groups that hold the sides'
    runs (and the stored runs of their stacks). exact: a figure with no noise (the weights' bytes), whose ratio is
    its own interval."""
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
    decision = decide(estimate.interval(confidence), threshold, higher_is_worse)
    reason = decision.reason
    if not exact and min(runs_a, runs_b) == 1:
        rests = (f"one run on a side: the interval rests on the run-to-run spread of {spread.runs} runs of the "
                 f"same stacks in their history segments, the compared ones among them (±{spread.relative:.1%} a run)")
        reason = f"{reason}; {rests}" if reason else rests
    return MetricChange(**base, ci_low=decision.interval.change_low, ci_high=decision.interval.change_high,
                        verdict=decision.verdict, reason=reason, spread=None if exact else spread.relative,
                        spread_runs=None if exact else spread.runs)


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
                sum(map(len, runs_b.values())), samples_needed(p / 100), True, spread, threshold, confidence))
    for name, worse in RUN_LEVEL:  # the runs are the samples
        values_a = {i: v for i, v in zip(a.run_ids, getattr(a, name)) if v is not None}
        values_b = {i: v for i, v in zip(b.run_ids, getattr(b, name)) if v is not None}
        metrics.append(change(name, len(values_a), len(values_b),
                              float(np.mean(list(values_a.values()))) if values_a else None,
                              float(np.mean(list(values_b.values()))) if values_b else None, len(values_a),
                              len(values_b), 1, worse, _spread(a, b, name, values_a, values_b), threshold,
                              confidence))
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
        spread = max((m.spread_runs or 0) for m in metrics) if metrics else 0
        warnings.append(f"one run on {'each side' if len(single) == 2 else f'side {single[0]}'}: "
                        + (f"the intervals rest on the run-to-run spread of up to {spread} runs of the same stacks in "
                           "their history segments" if spread else "no stored runs of the same stack say how much "
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
