"""Change points in one figure's series of runs: candidates by ruptures' kernel change-point detection (PELT, linear
kernel), each kept only if Student's t-test between its two neighbouring segments says it is real (as Apache Otava
tests its splits)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

# The defaults the daemon's BENCHD_CHANGES__* settings start from (daemon/settings.py), chosen on synthetic series
# with benchd's measured run-to-run noise (bench/change_points.py; docs/benchmarks/change-points.md).
ALPHA = 0.001  # a split is kept when its t-test's p-value is below this
MIN_RUNS = 4  # runs in a segment at least: a change is named once this many runs show it
PENALTY = 4.0  # PELT's penalty per change point, in units of the noise's variance × ln(runs)
CONFIDENCE = 0.95  # of the intervals of each segment's mean and of the relative change
WINDOW = 500  # runs PELT sees at once (a longer series: in windows half over each other)
# The noise's scale (of ln(figure)) is never taken below this: a series of identical values (a figure measured at a
# coarse resolution) would otherwise make every difference a change.
NOISE_FLOOR = 1e-4


@dataclass(slots=True, frozen=True)
class Segment:
    start: int  # index of its first run in the series
    end: int  # one past its last
    mean: float  # geometric mean of the figure over its runs: exp(mean of ln), as the test is made
    ci_low: float
    ci_high: float


@dataclass(slots=True, frozen=True)
class Split:
    """A change point: the series' runs from `index` on differ from those before it."""

    index: int  # the first run of the new segment
    before: Segment  # back to the previous change point (or the series' start)
    after: Segment  # up to the next change point (or the series' end)
    relative_change: float  # after / before − 1, of the geometric means
    ci_low: float  # of the relative change
    ci_high: float
    p_value: float  # Student's two-sided t-test, before against after, on ln(figure)


def noise_scale(y: np.ndarray) -> float:
    """The run-to-run noise's standard deviation, robust to the steps themselves: the median absolute difference
    between consecutive runs (a step is one difference among many), scaled to a normal's σ."""
    if len(y) < 3:
        return NOISE_FLOOR
    differences = np.abs(np.diff(y))
    sigma = float(np.median(differences)) / (0.6745 * math.sqrt(2))
    if sigma <= 0:  # more than half the differences are 0: the spread of the rest
        sigma = float(np.std(differences)) / math.sqrt(2)
    return max(sigma, NOISE_FLOOR)


def _difference(a: np.ndarray, b: np.ndarray) -> tuple[float, float, int]:
    """(b's mean − a's, its standard error from the pooled variance, degrees of freedom)."""
    na, nb = len(a), len(b)
    df = na + nb - 2
    pooled = (float(np.sum((a - a.mean()) ** 2)) + float(np.sum((b - b.mean()) ** 2))) / df
    return float(b.mean() - a.mean()), math.sqrt(pooled * (1 / na + 1 / nb)), df


def p_value(a: np.ndarray, b: np.ndarray) -> float:
    """Student's two-sided t-test of equal means (Otava's and Hunter's test; pooled variance: a segment of a few
    runs just after a change borrows the noise's scale from the longer one before it); two constant segments: 0 if
    their values differ, else 1."""
    from scipy import stats

    delta, se, df = _difference(a, b)
    if se == 0:
        return 0.0 if delta != 0 else 1.0
    return float(2 * stats.t.sf(abs(delta) / se, df))


def _segment(y: np.ndarray, start: int, end: int, confidence: float) -> Segment:
    from scipy import stats

    part = y[start:end]
    mean = float(np.mean(part))
    half = (float(stats.t.ppf(0.5 + confidence / 2, len(part) - 1)) * float(np.std(part, ddof=1))
            / math.sqrt(len(part))) if len(part) > 1 else 0.0
    return Segment(start, end, math.exp(mean), math.exp(mean - half), math.exp(mean + half))


def _split(y: np.ndarray, start: int, index: int, end: int, confidence: float) -> Split:
    from scipy import stats

    a, b = y[start:index], y[index:end]
    delta, se, df = _difference(a, b)
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * se if se > 0 else 0.0
    return Split(index, _segment(y, start, index, confidence), _segment(y, index, end, confidence),
                 math.expm1(delta), math.expm1(delta - half), math.expm1(delta + half), p_value(a, b))


def candidates(y: np.ndarray, min_runs: int = MIN_RUNS, penalty: float = PENALTY) -> list[int]:
    """Where PELT over a linear kernel (a change of mean, ruptures' KernelCPD in C) splits ln(figure), its penalty
    scaled by the noise so that it means the same on any figure and at any noise. PELT's time grows with the square
    of the runs it sees when changes are few, so a long series is seen in windows of WINDOW runs, each half over
    the next (as Otava and Hunter analyse long series in windows): of the candidates a change yields in two
    windows, the one found nearer its window's middle is kept."""
    import ruptures

    n = len(y)
    if n < 2 * min_runs:
        return []
    sigma = noise_scale(y)
    found: list[tuple[int, float]] = []  # (index, distance from its window's middle)
    for start in range(0, max(n - WINDOW, 0) + WINDOW // 2, WINDOW // 2):
        part = y[start:start + WINDOW]
        if len(part) < 2 * min_runs or (start > 0 and start + WINDOW // 2 >= n):
            continue
        split = ruptures.KernelCPD(kernel="linear", min_size=min_runs, jump=1).fit(part.reshape(-1, 1)) \
            .predict(pen=penalty * sigma ** 2 * math.log(len(part)))
        found.extend((start + int(i), abs(int(i) - len(part) / 2)) for i in split[:-1])  # the last: its end
    kept: list[tuple[int, float]] = []
    for index, distance in sorted(found):
        if kept and index - kept[-1][0] < min_runs:
            if distance < kept[-1][1]:
                kept[-1] = (index, distance)
            continue
        kept.append((index, distance))
    return [index for index, _ in kept]


def detect(values: np.ndarray | list[float], alpha: float = ALPHA, min_runs: int = MIN_RUNS,
           penalty: float = PENALTY, confidence: float = CONFIDENCE) -> list[Split]:
    """The change points of a series of positive figures, oldest first. Candidates whose t-test between their
    neighbouring segments is not below alpha are dropped one at a time, the weakest first, and the others tested
    again against their new neighbours (as Apache Otava prunes e-divisive's splits)."""
    y = np.log(np.asarray(values, dtype=np.float64))
    splits = candidates(y, min_runs, penalty)
    while splits:
        bounds = [0, *splits, len(y)]
        p = [p_value(y[bounds[i - 1]:bounds[i]], y[bounds[i]:bounds[i + 1]]) for i in range(1, len(bounds) - 1)]
        weakest = int(np.argmax(p))
        if p[weakest] < alpha:
            break
        del splits[weakest]
    bounds = [0, *splits, len(y)]
    return [_split(y, bounds[i - 1], bounds[i], bounds[i + 1], confidence) for i in range(1, len(bounds) - 1)]


def segments(values: np.ndarray | list[float], bounds: list[int], confidence: float = CONFIDENCE) -> list[Segment]:
    """The series cut at bounds (each the first run of a segment), each segment's geometric mean and interval."""
    y = np.log(np.asarray(values, dtype=np.float64))
    edges = [0, *sorted(b for b in bounds if 0 < b < len(y)), len(y)]
    return [_segment(y, a, b, confidence) for a, b in pairwise(edges) if b > a]
