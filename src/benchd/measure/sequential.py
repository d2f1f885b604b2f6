"""Verdicts that decide: a ratio (a GPU against its siblings, a node against its fleet) looked at after every round
until its interval decides a stated effect or the budget ends, by the shared statistics' sequential rule
(measure/statistics.py: the rounds' log ratios, Student's t, the error rate spent over the looks; docs/figures.md,
"Verdicts that decide")."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from benchd.measure.statistics import Decision as StatisticsDecision
from benchd.measure.statistics import Estimate, Sequential, Verdict, paired, t_quantile
from benchd.spec.decide import CONFIDENCE, EFFECT, MAX_ROUNDS
from benchd.spec.fields import Documented

DECIDED = ("slower", "faster", "equivalent")


class Decision(Documented):
    """A sequential verdict after its latest look."""

    verdict: Verdict
    """slower (by more than the effect: flagged), equivalent (within it either way), faster (by more than it), or
    inconclusive (the budget ended first, or too few rounds)."""
    ratio: float | None
    """The geometric mean of the rounds' ratios (for a latency or an energy: the peers' over its own, so that below
    1 is worse)."""
    ci_low: float | None
    """Its interval at the look's confidence, low end."""
    ci_high: float | None
    """High end."""
    rounds: int
    """The rounds it looked at."""
    effect: float
    """The effect it decides: slower below 1 / (1 + effect), faster above 1 + effect."""
    confidence: float
    """Each look's interval's: 1 − (1 − the rule's confidence) / its looks (its planned most rounds)."""
    reason: str | None = None
    """Why it is inconclusive."""

    @property
    def decided(self) -> bool:
        return self.verdict in DECIDED

    def says(self, what: str = "output tok/s") -> str:
        """output tok/s 0.52× [0.47, 0.58] after 3 rounds: slower by more than 10 %"""
        if self.ci_low is None:
            return f"{what}: inconclusive after {self.rounds} round{'s' * (self.rounds != 1)} (too few to judge)"
        figures = f"{what} {self.ratio:.3f}× [{self.ci_low:.3f}, {self.ci_high:.3f}] after {self.rounds} rounds"
        return figures + {"slower": f": slower by more than {self.effect:.0%}",
                          "faster": f": faster by more than {self.effect:.0%}",
                          "equivalent": f": within {self.effect:.0%}",
                          "inconclusive": f": undecided at {self.effect:.0%}"}[self.verdict]


def look(estimate: Estimate | None, rounds: int, effect: float = EFFECT, confidence: float = CONFIDENCE,
         max_rounds: int = MAX_ROUNDS) -> Decision:
    """The rule's look after `rounds` rounds (its look number `rounds` of at most max_rounds) at the estimate of
    ln(ratio), below 0 worse: statistics.Sequential's decision, as stored."""
    rule = Sequential(threshold=effect, confidence=confidence, looks=max_rounds, higher_is_worse=False,
                      taken=min(max(rounds, 1), max_rounds) - 1)
    try:
        found = rule.look(estimate)
    except OverflowError:  # an interval wider than a float holds (two rounds far apart, t with 1 df): none yet
        found = StatisticsDecision("inconclusive", f"interval too wide after {rounds} rounds")
    interval = found.interval
    return Decision(verdict=found.verdict, ratio=interval.ratio if interval else (
        estimate.ratio if estimate is not None else None), ci_low=interval.low if interval else None,
        ci_high=interval.high if interval else None, rounds=rounds, effect=effect,
        confidence=rule.look_confidence, reason=found.reason)


def against_siblings(rounds: Sequence[dict[str, float]]) -> dict[str, tuple[list[float], list[float]]]:
    """Each GPU's rounds paired with its siblings' (rounds: GPU → figure, every GPU at once): (the siblings' median,
    its own) in each round where both are known, for statistics.paired."""
    gpus = list(dict.fromkeys(gpu for r in rounds for gpu in r))
    out: dict[str, tuple[list[float], list[float]]] = {gpu: ([], []) for gpu in gpus}
    for figures in rounds:
        for gpu in gpus:
            own = figures.get(gpu)
            others = [v for g, v in figures.items() if g != gpu and v is not None and v > 0]
            if own is not None and own > 0 and others:
                out[gpu][0].append(float(np.median(others)))
                out[gpu][1].append(own)
    return out


def siblings(rounds: Sequence[dict[str, float]], effect: float = EFFECT, confidence: float = CONFIDENCE,
             max_rounds: int = MAX_ROUNDS) -> dict[str, tuple[Decision, list[float]]]:
    """Each GPU's decision after these rounds, and its ratio in each round."""
    out = {}
    for gpu, (theirs, own) in against_siblings(rounds).items():
        out[gpu] = (look(paired(theirs, own), len(own), effect, confidence, max_rounds),
                    [o / t for t, o in zip(theirs, own)])
    return out


def against_reference(values: Sequence[float], reference: float, reference_variance: float = 0.0,
                      higher_is_worse: bool = False) -> Estimate | None:
    """A node's runs against a reference known only so well (a fleet's median, its ln's variance): the mean of the
    runs' ln(value / reference) (turned over for a figure where higher is worse, so that below 0 is worse), its error
    the runs' spread over their number with the reference's added. None under two runs."""
    logs = [math.log(v / reference) for v in values if v > 0 and reference > 0]
    if len(logs) < 2:
        return None
    x = np.asarray(logs) * (-1.0 if higher_is_worse else 1.0)
    return Estimate(float(x.mean()), math.sqrt(float(x.var(ddof=1)) / len(x) + reference_variance), len(x) - 1)


def rounds_needed(estimate: Estimate | None, rounds: int, effect: float = EFFECT, confidence: float = CONFIDENCE,
                  max_rounds: int = MAX_ROUNDS) -> int | None:
    """How many rounds in all the rule would need to decide, were the mean and spread what they are now (None: not
    within max_rounds, or no estimate yet)."""
    if estimate is None:
        return None
    spread = estimate.se * math.sqrt(rounds)
    edges = (math.log(1 / (1 + effect)), math.log(1 + effect))
    distance = min(abs(estimate.log_ratio - e) for e in edges)  # equivalent, or beyond the nearer edge
    look_confidence = 1 - (1 - confidence) / max_rounds
    for n in range(max(rounds, 2), max_rounds + 1):
        if t_quantile(n - 1, (1 + look_confidence) / 2) * spread / math.sqrt(n) < distance:
            return n
    return None
