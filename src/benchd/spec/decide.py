"""How a verdict that compares a GPU with its siblings decides: the effect, its error rates and its budget
(measure/sequential.py applies it)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from benchd.spec.fields import Strict

# The defaults of every sequential verdict (a spec's `decide`, the fleet's node verdicts): the effect a verdict
# decides (a GPU or node this much slower or faster than its peers, or within it), the confidence its error rate is
# held to over all its looks (measure/statistics.py, Sequential), and the most looks.
EFFECT = 0.10
CONFIDENCE = 0.95
# The budget and the most rounds are set so that a GPU at 0.85x of its siblings is flagged on the reference: two
# H200s run its round in about 3 s with 0.158 of ln ratio round to round; within 600 s (about 190 rounds) such a GPU
# is flagged in 98 % of simulated runs, within 300 s in 76 %, within 30 rounds in 24 %; on two H100s (7 s, 0.066) in
# 98 % within 30 rounds; a healthy GPU in none (docs/benchmarks/every-gpu.md). A run of longer rounds spends its
# error over the rounds its budget holds (Decide.planned).
MAX_ROUNDS = 200
BUDGET_S = 600.0  # a run's rounds: no round starts once the next would end past this


class Decide(Strict):
    """Rounds until the verdict decides: a run on every GPU repeats its workload on every GPU at once, round after
    round, until each GPU's output tok/s against its siblings' median decides the effect (slower or faster by more
    than it, or within it), or the budget ends; the chance that any look decides wrongly stays within 1 −
    confidence, whatever the number of looks."""

    effect: Annotated[float, Field(gt=0, lt=1)] = EFFECT
    """The effect the verdict decides: slower below 1 / (1 + effect) of its siblings' median (flagged), faster
    above 1 + effect, equivalent within both."""
    confidence: Annotated[float, Field(gt=0.5, lt=1)] = CONFIDENCE
    """1 − the chance of a wrong decision (a GPU flagged though within the effect, or called equivalent though beyond
    it), spent over its looks (Decide.planned)."""
    max_rounds: Annotated[int, Field(ge=1, le=1000)] = MAX_ROUNDS
    """The most rounds; the error is spent over this many looks, or over the rounds the budget holds at the second
    round's length where fewer; 1: one round, judged by its own bootstrap."""
    budget_s: Annotated[float, Field(gt=0)] = BUDGET_S
    """No round starts once the last round's length would take the run past this many seconds."""

    def planned(self, round_s: float) -> Decide:
        """The rule whose error is spent over the rounds its budget holds at a warm round's length (the second's,
        before its look: the first may have loaded the model), at least two, at most max_rounds: a workload whose
        rounds are long is not held to the strict looks of max_rounds it can never reach."""
        fits = max(2, int(self.budget_s // round_s)) if round_s > 0 else self.max_rounds
        return self if fits >= self.max_rounds else self.model_copy(update={"max_rounds": fits})
