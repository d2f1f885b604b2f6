"""The deciding rule on simulated rounds (no GPU): how often a GPU at a given ratio to its sibling is flagged, and in
how many rounds, at a given round-to-round spread of ln(ratio), looking after every round as the daemon does.

    python bench/decide_power.py [--sd 0.066] [--max-rounds 10 20 30] [--runs 400] [--fit N]

0.066 is the spread two H100s gave on the reference workload (docs/data/gpu_decide_h100x2.json); prints a table."""

from __future__ import annotations

import argparse
import math

import numpy as np
from common import ROOT  # noqa: F401 (benchd from this checkout)

from benchd.measure.sequential import siblings


def simulate(true: float, sd: float, max_rounds: int, runs: int, rng,
             fit: int | None = None) -> tuple[float, float, float | None, float]:
    """(flagged share, undecided share, median rounds to a flag, median rounds a run took); fit: the rounds the
    budget lets run, if fewer than max_rounds (the error still spent over max_rounds looks)."""
    flagged, undecided, rounds, took = 0, 0, [], []
    for _ in range(runs):
        found = []
        for _ in range(min(max_rounds, fit or max_rounds)):
            found.append({"0": math.exp(rng.normal(0, sd / 2**0.5)), "1": true * math.exp(rng.normal(0, sd / 2**0.5))})
            if len(found) >= 3 and all(d.decided for d, _ in siblings(found, max_rounds=max_rounds).values()):
                break
        decision = siblings(found, max_rounds=max_rounds)["1"][0]
        took.append(len(found))
        flagged += decision.verdict == "slower"
        undecided += not decision.decided
        if decision.verdict == "slower":
            rounds.append(len(found))
    return flagged / runs, undecided / runs, float(np.median(rounds)) if rounds else None, float(np.median(took))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sd", type=float, default=0.066)
    parser.add_argument("--max-rounds", type=int, nargs="+", default=[10, 20, 30])
    parser.add_argument("--ratios", type=float, nargs="+", default=[1.0, 1 / 1.1, 0.85, 0.5])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--fit", type=int, help="the rounds the budget lets run (budget_s over a round's seconds)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"sd of ln(ratio) a round {args.sd}; {args.runs} runs each\n")
    print("max rounds | ratio | flagged | undecided | median rounds to a flag | median rounds a run took")
    for k in args.max_rounds:
        for ratio in args.ratios:
            flagged, undecided, median, took = simulate(ratio, args.sd, k, args.runs, rng, args.fit)
            print(f"{k} | {ratio:.3f} | {flagged:.1%} | {undecided:.1%} | {median} | {took}")


if __name__ == "__main__":
    main()
