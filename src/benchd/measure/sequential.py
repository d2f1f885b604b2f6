"""The deciding rule: a ratio (a GPU against its siblings, a node against its fleet) looked at after every round
until its interval decides a stated effect or the budget ends: a group-sequential t-test on the log ratio whose error
is split over its looks, so that looking after each round does not raise its error rates (docs/figures.md, "Verdicts
that decide")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from scipy import stats

from benchd.spec.decide import ALPHA, EFFECT, MAX_ROUNDS
from benchd.spec.fields import Documented

Verdict = Literal["slower", "within", "undecided"]


class Decision(Documented):
    """A sequential verdict after its latest look."""

    verdict: Verdict
    """slower (by more than the effect: flagged), within (not slower by the effect), or undecided (the budget ended
    first, or too few rounds)."""
    ratio: float | None
    """The geometric mean of the rounds' ratios."""
    ci_low: float | None
    """Its interval at the look's confidence, low end."""
    ci_high: float | None
    """High end."""
    rounds: int
    """The rounds it looked at."""
    effect: float
    """The effect it decides."""
    confidence: float
    """Each look's interval's (1 − 2 alpha / max_rounds)."""

    def says(self, what: str = "output tok/s") -> str:
        """output tok/s 0.52× its peers' [0.47, 0.58] after 3 rounds: slower by more than 10 %"""
        if self.ratio is None:
            return f"{what}: undecided ({self.rounds} round{'s' * (self.rounds != 1)}, too few to judge)"
        figures = f"{what} {self.ratio:.3f}× [{self.ci_low:.3f}, {self.ci_high:.3f}] after {self.rounds} rounds"
        return figures + {"slower": f": slower by more than {self.effect:.0%}",
                          "within": f": within {self.effect:.0%}",
                          "undecided": f": undecided whether slower by {self.effect:.0%}"}[self.verdict]


def look(log_ratios: Sequence[float], effect: float = EFFECT, alpha: float = ALPHA, max_rounds: int = MAX_ROUNDS,
         reference_variance: float = 0.0) -> Decision:
    """One look after len(log_ratios) rounds, each round's ln(ratio): the t-interval of their mean at confidence
    1 − 2·alpha/max_rounds (Bonferroni over the looks: each one-sided error at most alpha/max_rounds a look, so at
    most alpha over all of them), and the verdict: slower when the interval lies below 1 − effect, within when it
    lies above it. reference_variance: the variance of ln(what the ratio is against), added to the mean's (a
    fleet's median from a few nodes); 0 where each round's ratio carries its own reference (siblings)."""
    x = np.asarray([v for v in log_ratios if math.isfinite(v)], dtype=np.float64)
    n = len(x)
    confidence = 1 - 2 * alpha / max_rounds
    if n < 2:
        return Decision(verdict="undecided", ratio=math.exp(x[0]) if n else None, ci_low=None, ci_high=None,
                        rounds=n, effect=effect, confidence=confidence)
    mean = float(x.mean())
    se = math.sqrt(float(x.var(ddof=1)) / n + reference_variance)
    q = float(stats.t.ppf(1 - alpha / max_rounds, n - 1))
    low, high = math.exp(mean - q * se), math.exp(mean + q * se)
    bound = 1 - effect
    verdict: Verdict = "slower" if high < bound else "within" if low > bound else "undecided"
    return Decision(verdict=verdict, ratio=math.exp(mean), ci_low=low, ci_high=high, rounds=n, effect=effect,
                    confidence=confidence)


def against_siblings(rounds: Sequence[dict[str, float]]) -> dict[str, list[float]]:
    """Each GPU's ln(its figure ÷ its siblings' median) in each round (rounds: GPU → figure, every GPU at once); a
    round where a GPU or all its siblings have no figure leaves that GPU out of it."""
    gpus = list(dict.fromkeys(gpu for r in rounds for gpu in r))
    out: dict[str, list[float]] = {gpu: [] for gpu in gpus}
    for figures in rounds:
        for gpu in gpus:
            own = figures.get(gpu)
            others = [v for g, v in figures.items() if g != gpu and v is not None and v > 0]
            if own is not None and own > 0 and others:
                out[gpu].append(math.log(own / float(np.median(others))))
    return out


def rounds_needed(log_ratios: Sequence[float], effect: float = EFFECT, alpha: float = ALPHA,
                  max_rounds: int = MAX_ROUNDS) -> int | None:
    """How many rounds in all the look would need to decide, were the mean and spread what they are now (None: they
    would not within max_rounds, or too few rounds to say)."""
    x = np.asarray(log_ratios, dtype=np.float64)
    if len(x) < 2:
        return None
    distance = abs(float(x.mean()) - math.log(1 - effect))
    s = float(x.std(ddof=1))
    for n in range(len(x), max_rounds + 1):
        if float(stats.t.ppf(1 - alpha / max_rounds, n - 1)) * s / math.sqrt(n) < distance:
            return n
    return None
