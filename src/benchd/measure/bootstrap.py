"""The bootstrap interval of a relative change between two sides of runs: resampled in two stages (runs, then
samples within each), within a deadline."""

from __future__ import annotations

import math
import time
from statistics import NormalDist

import numpy as np


class OverBudget(Exception):
    """A read that did not end by its deadline: a comparison (BENCHD_READS__COMPARE_TIMEOUT_S), a history
    (BENCHD_READS__HISTORY_TIMEOUT_S)."""


def in_time(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise OverBudget("not done by its deadline")


def resampler(runs: list[np.ndarray], rng: np.random.Generator):
    """Draws of a side in two stages: its runs with replacement, then samples within each chosen run. Several runs'
    draws are made at once from one array (a few numpy calls a draw, whatever the number of runs: a loop over 100
    runs cost 28 s a comparison)."""
    if len(runs) == 1:
        only = runs[0]
        return lambda: only[rng.integers(0, len(only), size=len(only))]
    flat = np.concatenate(runs)
    sizes = np.array([len(run) for run in runs])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])

    def draw() -> np.ndarray:
        chosen = rng.integers(0, len(runs), size=len(runs))
        counts = sizes[chosen]
        within = (rng.random(counts.sum()) * np.repeat(counts, counts)).astype(np.int64)
        return flat[np.repeat(starts[chosen], counts) + within]

    return draw


def interval(a: list[np.ndarray], b: list[np.ndarray], statistic, confidence: float, resamples: int,
               rng: np.random.Generator, deadline: float | None = None) -> tuple[float, float]:
    """Percentile interval of (stat(b) − stat(a)) / stat(a). Each side is resampled in two stages, runs with
    replacement and then samples within each chosen run, so that run-to-run variation widens the interval
    (with one run a side, only the variation within it is covered)."""
    draw_a, draw_b = resampler(a, rng), resampler(b, rng)
    ratios = np.empty(resamples)
    for i in range(resamples):
        if i % 64 == 0:
            in_time(deadline)
        sa, sb = statistic(draw_a()), statistic(draw_b())
        ratios[i] = (sb - sa) / sa if sa else np.nan
    ratios = ratios[np.isfinite(ratios)]
    if not len(ratios):  # A's statistic was 0 in every resample: no relative change to bound
        return math.nan, math.nan
    tail = (1 - confidence) / 2
    return float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1 - tail))


def z(confidence: float) -> float:
    return NormalDist().inv_cdf((1 + confidence) / 2)
