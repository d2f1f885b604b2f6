"""One set of statistics for every verdict that compares two sides: a figure's ratio B / A with its interval on the
log scale, the decision that interval carries against an effect threshold, and what a sequential rule needs to look
again after every round (docs/figures.md, "Verdicts: comparisons").

- An Estimate is ln(B / A) with its standard error and degrees of freedom. It comes from
  - runs(): each side's per-run figures, the sides run apart. The runs are the units: a figure moves more from run
    to run than within one, so the sides' run-to-run variance of ln(figure) is pooled, with that of other runs of
    the same stack where one side has too few (a Spread); one run a side and no Spread: no estimate. between() is
    the same from a Spread whose groups hold the sides' runs already.
  - paired(): rounds that ran both sides together (an interleaved matrix's rounds, a GPU beside its siblings): the
    variance of the rounds' log ratios.
  - samples(): two sets of independent samples (requests): a quantile's or a mean's error within them only.
- Its interval (Estimate.interval) is Student's t on ln(B / A), taken back to the ratio: it never reaches 0, so a
  relative change is never below −100 %.
- decide() reads an interval against the effect threshold: faster, slower, equivalent, or inconclusive with why.
- Sequential spends a rule's error rate over the looks it may take, so that it may look after every round and stop
  at the first decision.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

THRESHOLD = 0.05  # a ratio within 1 ± this (on the log scale: 1 / 1.05 to 1.05) is no change worth a verdict
CONFIDENCE = 0.95  # of the intervals
LEAST = 20  # samples a side a quantile or a mean needs at least …
BEYOND = 10  # … and observations beyond a quantile (in its tail), so that p99 needs 1,000

# faster / slower: the interval lies wholly beyond the threshold that way; equivalent: wholly within it;
# inconclusive: neither (the reason says which way it reaches) or too little data; n/a: nothing to compare.
Verdict = Literal["faster", "slower", "equivalent", "inconclusive", "n/a"]
DECIDED: tuple[Verdict, ...] = ("faster", "slower", "equivalent")


def percent(ratio: float) -> str:
    """A ratio as the relative change a reader sees: 1.052 → +5.2 %."""
    return f"{(ratio - 1) * 100:+.1f} %"


def t_quantile(df: float, p: float) -> float:
    """Student's t quantile (the normal's at df = inf)."""
    from scipy.special import stdtrit  # lazily: the daemon's start does not pay for it

    return float(stdtrit(df, p))


@dataclass(frozen=True, slots=True)
class Interval:
    """B / A and its interval at `confidence`, all ratios (> 0)."""

    ratio: float
    low: float
    high: float
    confidence: float

    @property
    def change(self) -> float:
        """The relative change B / A − 1."""
        return self.ratio - 1

    @property
    def change_low(self) -> float:
        return self.low - 1

    @property
    def change_high(self) -> float:
        return self.high - 1

    def says(self) -> str:
        """+5.2 % [+1.0 %, +9.6 %]"""
        return f"{percent(self.ratio)} [{percent(self.low)}, {percent(self.high)}]"


@dataclass(frozen=True, slots=True)
class Estimate:
    """ln(B / A), its standard error, and the degrees of freedom of that error (inf: known, normal)."""

    log_ratio: float
    se: float
    df: float

    @property
    def ratio(self) -> float:
        return math.exp(self.log_ratio)

    def interval(self, confidence: float = CONFIDENCE) -> Interval:
        half = t_quantile(self.df, (1 + confidence) / 2) * self.se
        return Interval(math.exp(self.log_ratio), math.exp(self.log_ratio - half), math.exp(self.log_ratio + half),
                        confidence)


def _logs(values: Iterable[float]) -> np.ndarray:
    """ln of the positive values (a figure of 0 has no ratio: left out)."""
    array = np.asarray(list(values), dtype=np.float64)
    return np.log(array[np.isfinite(array) & (array > 0)])


@dataclass(frozen=True, slots=True)
class Spread:
    """How much a figure moves from run to run: the variance of ln(figure) pooled over groups of runs, each group
    about its own mean (a side's runs; the runs of one stack in one segment of a workload's history), with its
    degrees of freedom (runs − groups). √variance is about the relative standard deviation of one run's figure."""

    variance: float
    df: int
    runs: int

    @classmethod
    def of(cls, groups: Iterable[Sequence[float]]) -> Spread | None:
        """None: no group holds two runs."""
        logs = [g for g in map(_logs, groups) if len(g)]
        df = sum(len(g) - 1 for g in logs)
        if df < 1:
            return None
        squares = sum(float(np.sum((g - g.mean()) ** 2)) for g in logs)
        return cls(squares / df, df, sum(len(g) for g in logs))

    def pooled(self, other: Spread | None) -> Spread:
        if other is None:
            return self
        df = self.df + other.df
        return Spread((self.variance * self.df + other.variance * other.df) / df, df, self.runs + other.runs)

    @property
    def relative(self) -> float:
        """One run's figure's spread, as a fraction (0.05: ±5 % a run)."""
        return math.sqrt(self.variance)


def between(value_a: float, value_b: float, runs_a: int, runs_b: int, spread: Spread) -> Estimate:
    """ln(value_b / value_a) of two sides of runs_a and runs_b runs, its error from a spread measured over groups
    that hold the sides' runs among others (each side's figure a mean over its runs: variance × (1/n_a + 1/n_b))."""
    return Estimate(math.log(value_b / value_a), math.sqrt(spread.variance * (1 / runs_a + 1 / runs_b)), spread.df)


def runs(a: Sequence[float], b: Sequence[float], spread: Spread | None = None, value_a: float | None = None,
         value_b: float | None = None) -> Estimate | None:
    """Two sides of runs run apart, each run's figure: ln(B / A) of the sides' figures (value_a and value_b where a
    side's figure is not the mean of its runs', as a percentile of their requests pooled is not), and its error from
    the run-to-run variance of ln(figure), pooled over the two sides and `spread` (other runs of the same stack). None
    when no variance is known: one run a side and no spread."""
    la, lb = _logs(a), _logs(b)
    if not len(la) or not len(lb):
        return None
    found = Spread.of([a, b])
    pooled = spread.pooled(found) if spread is not None else found
    if pooled is None:
        return None
    va = float(np.mean(np.exp(la))) if value_a is None else value_a
    vb = float(np.mean(np.exp(lb))) if value_b is None else value_b
    if not va > 0 or not vb > 0:
        return None
    return between(va, vb, len(la), len(lb), pooled)


def paired(a: Sequence[float], b: Sequence[float]) -> Estimate | None:
    """Rounds that ran both sides together, a[i] beside b[i]: the mean of the rounds' ln(b / a) and its standard
    error (what the two sides share in a round, such as the machine's state, cancels). None under two rounds."""
    pairs = [(x, y) for x, y in zip(a, b) if x > 0 and y > 0]
    if len(pairs) < 2:
        return None
    d = np.log([y for _, y in pairs]) - np.log([x for x, _ in pairs])
    return Estimate(float(d.mean()), float(d.std(ddof=1)) / math.sqrt(len(d)), len(d) - 1)


def samples_needed(quantile: float | None) -> int:
    """Samples a side needs for a quantile (0–1; None: a mean): LEAST, and BEYOND observations in its tail."""
    if quantile is None:
        return LEAST
    tail = min(quantile, 1 - quantile)
    return max(LEAST, round(BEYOND / tail)) if tail > 0 else LEAST


def _value_and_se(x: np.ndarray, quantile: float | None) -> tuple[float, float]:
    """A side's statistic and the standard error of its ln, within the samples: a quantile's from the order
    statistics one standard error of its rank away (√(n q (1 − q)) ranks each side; no assumption on the
    distribution), a mean's from the samples' standard deviation."""
    n = len(x)
    if quantile is None:
        mean = float(x.mean())
        return mean, float(x.std(ddof=1)) / (mean * math.sqrt(n))
    ordered = np.sort(x)
    value = float(np.quantile(ordered, quantile))
    rank, step = quantile * (n - 1), math.sqrt(n * quantile * (1 - quantile))
    low = ordered[max(0, math.floor(rank - step))]
    high = ordered[min(n - 1, math.ceil(rank + step))]
    return value, (math.log(high) - math.log(low)) / 2


def samples(a: Sequence[float], b: Sequence[float], quantile: float | None = None) -> Estimate | None:
    """Two sets of independent samples (one run's requests a side, a GPU's and its siblings'): ln(B / A) of a
    quantile (0–1) or, with None, of the mean, and its error within the samples only (what varies from run to run is
    not in it). None when either side has fewer than samples_needed(quantile) positive samples."""
    xa, xb = (np.asarray(s, dtype=np.float64) for s in (a, b))
    xa, xb = xa[np.isfinite(xa) & (xa > 0)], xb[np.isfinite(xb) & (xb > 0)]
    if min(len(xa), len(xb)) < samples_needed(quantile):
        return None
    (va, sa), (vb, sb) = _value_and_se(xa, quantile), _value_and_se(xb, quantile)
    return Estimate(math.log(vb / va), math.hypot(sa, sb), math.inf)


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    reason: str | None = None
    interval: Interval | None = None

    @property
    def decided(self) -> bool:
        return self.verdict in DECIDED


def decide(interval: Interval, threshold: float = THRESHOLD, higher_is_worse: bool = True) -> Decision:
    """The verdict an interval of B / A carries: beyond 1 + threshold or below 1 / (1 + threshold) wholly (slower or
    faster, by higher_is_worse), within both wholly (equivalent), or neither: inconclusive, "interval too wide" when
    it reaches past the threshold on both sides, else the way it may go."""
    up, down = 1 + threshold, 1 / (1 + threshold)
    words: tuple[Verdict, Verdict] = ("slower", "faster") if higher_is_worse else ("faster", "slower")
    if interval.low > up:
        return Decision(words[0], None, interval)
    if interval.high < down:
        return Decision(words[1], None, interval)
    if interval.low >= down and interval.high <= up:
        return Decision("equivalent", None, interval)
    if interval.low < down and interval.high > up:
        return Decision("inconclusive", f"interval too wide: it reaches past the threshold ({percent(down)} / "
                                        f"{percent(up)}) on both sides", interval)
    way, bound = (words[0], up) if interval.high > up else (words[1], down)
    return Decision("inconclusive", f"the interval reaches past the threshold ({percent(bound)}) without lying "
                                    f"beyond it: it may be {way}", interval)


@dataclass(slots=True)
class Sequential:
    """A rule that looks at its estimate again after each round, at most `looks` times, and stops at its first
    decision. Each look's interval is at confidence 1 − (1 − confidence) / looks: the error rate spent evenly over
    the looks (Bonferroni's bound), so that the chance any look decides wrongly (slower or faster where the change is
    within the threshold, equivalent where it is beyond) stays within 1 − confidence whenever the rule stops, as
    long as ln(figure) is about normal and the rounds independent. Fewer looks planned cost less width at each."""

    threshold: float = THRESHOLD
    confidence: float = CONFIDENCE
    looks: int = 10
    higher_is_worse: bool = True
    taken: int = 0

    @property
    def look_confidence(self) -> float:
        return 1 - (1 - self.confidence) / self.looks

    @property
    def left(self) -> int:
        return self.looks - self.taken

    def look(self, estimate: Estimate | None) -> Decision:
        """This round's decision (a look spent even on no estimate: the rounds so far cannot give one)."""
        if self.taken >= self.looks:
            raise ValueError(f"all {self.looks} looks are taken")
        self.taken += 1
        if estimate is None:
            return Decision("inconclusive", f"no estimate yet (look {self.taken} of {self.looks})")
        decision = decide(estimate.interval(self.look_confidence), self.threshold, self.higher_is_worse)
        if not decision.decided and not self.left:
            return Decision("inconclusive", f"undecided after {self.looks} looks: {decision.reason}",
                            decision.interval)
        return decision
