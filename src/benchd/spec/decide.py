"""How a verdict that compares a GPU with its siblings decides: the effect, its error rates and its budget
(measure/sequential.py applies it)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from benchd.spec.fields import Strict

# The defaults of every sequential verdict (a spec's `decide`, the fleet's node verdicts): the effect a verdict
# decides (a GPU or node this much slower than its peers, or not), each error rate, and the looks it is split over.
EFFECT = 0.10
ALPHA = 0.05
MAX_ROUNDS = 10
BUDGET_S = 300.0  # a run's rounds: no round starts once the next would end past this


class Decide(Strict):
    """Rounds until the verdict decides: a run on every GPU repeats its workload on every GPU at once, round after
    round, until each GPU's output tok/s against its siblings' median decides the effect (slower by more than it, or
    not), or the budget ends; each error rate at most alpha, whatever the number of looks."""

    effect: Annotated[float, Field(gt=0, lt=1)] = EFFECT
    """The slowdown the verdict decides: slower than 1 − effect of its siblings' median, or not."""
    alpha: Annotated[float, Field(gt=0, lt=0.5)] = ALPHA
    """Each error rate: a GPU flagged though it is within the effect, or cleared though it is slower by more."""
    max_rounds: Annotated[int, Field(ge=1, le=100)] = MAX_ROUNDS
    """The most rounds (the error is split over this many looks); 1: one round, judged by its own bootstrap."""
    budget_s: Annotated[float, Field(gt=0)] = BUDGET_S
    """No round starts once the last round's length would take the run past this many seconds."""
