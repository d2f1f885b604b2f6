"""Verdicts that decide (measure/sequential.py on measure/statistics.py): simulated rounds of GPUs whose true ratio
is known, looked at after every round as the daemon does, stopping at the first decision."""

import math

import numpy as np
import pytest

from benchd.measure.sequential import against_reference, look, rounds_needed, siblings
from benchd.measure.statistics import paired
from benchd.spec import parse_spec
from benchd.spec.decide import MAX_ROUNDS
from tests.helpers import spec


def rounds_until_decided(rng, true: float, sigma: float, max_rounds: int = 10):
    """GPU 1 at `true` × GPU 0, each round's ln(ratio) with spread sigma: (GPU 1's decision, rounds run)."""
    rounds = []
    for _ in range(max_rounds):
        rounds.append({"0": math.exp(rng.normal(0, sigma / 2**0.5)),
                       "1": true * math.exp(rng.normal(0, sigma / 2**0.5))})
        found = siblings(rounds, max_rounds=max_rounds)
        if all(decision.decided for decision, _ in found.values()):
            break
    return found["1"][0], len(rounds)


def test_a_gpu_at_the_effects_edge_is_flagged_within_the_error_rate():
    """A GPU exactly 1 / 1.1 of its sibling is not slower by more than the effect: looking after every round of up
    to 10 and stopping at the first decision, it is called slower in at most 5 % of 400 runs (the rule's error,
    spent over its looks: here about 2 %), and a healthy pair never."""
    rng = np.random.default_rng(0)
    edge = [rounds_until_decided(rng, 1 / 1.1, 0.04)[0].verdict for _ in range(400)]
    assert edge.count("slower") / len(edge) <= 0.05
    healthy = [rounds_until_decided(rng, 1.0, 0.04)[0].verdict for _ in range(200)]
    assert "slower" not in healthy and healthy.count("equivalent") / len(healthy) > 0.95


def test_a_gpu_at_085_is_flagged_in_a_few_rounds():
    """At 0.85× with a 2 % spread a round (what a run of the reference workload on two H200s gives: docs/benchmarks/
    every-gpu.md), it is slower by more than 10 % in every one of 200 runs, by the fifth round in most."""
    rng = np.random.default_rng(1)
    found = [rounds_until_decided(rng, 0.85, 0.02) for _ in range(200)]
    assert all(decision.verdict == "slower" for decision, _ in found)
    assert np.median([rounds for _, rounds in found]) <= 5


def test_a_look_says_what_it_decided_and_why_not():
    few = look(paired([1.0], [0.5]), 1)
    assert few.verdict == "inconclusive" and few.ci_low is None and "too few" in few.says()
    wide = look(paired([1.0, 1.0], [0.001, 1000.0]), 2)  # t with one degree of freedom: past a float's range
    assert wide.verdict == "inconclusive" and wide.reason == "interval too wide after 2 rounds"
    slow = look(paired([1.0, 1.0, 1.0], [0.5, 0.52, 0.49]), 3, max_rounds=30)
    assert slow.verdict == "slower" and slow.ci_high < 1 / 1.1 and slow.confidence == pytest.approx(1 - 0.05 / 30)
    assert slow.says().startswith("output tok/s 0.503× [") and slow.says().endswith("slower by more than 10%")
    last = look(paired([1.0] * 10, [0.91, 0.95, 0.88, 0.93, 0.9, 0.94, 0.89, 0.92, 0.91, 0.93]), 10, max_rounds=10)
    assert last.verdict == "inconclusive" and "undecided after 10 looks" in last.reason
    assert rounds_needed(paired([1.0] * 3, [0.8, 0.82, 0.79]), 3, max_rounds=10) == 4  # t with 2 df: too wide yet
    assert rounds_needed(paired([1.0] * 3, [0.9, 0.93, 0.88]), 3, max_rounds=10) is None  # at the edge: never


def test_a_node_against_a_reference_known_only_so_well():
    """The fleet's median from few nodes is itself uncertain: its variance widens the node's interval."""
    sure = against_reference([50, 52, 49, 51], 100.0)
    unsure = against_reference([50, 52, 49, 51], 100.0, reference_variance=0.01)
    assert sure.ratio == pytest.approx(0.505, abs=0.005) and unsure.se > 5 * sure.se
    assert against_reference([2.0, 2.1], 1.0, higher_is_worse=True).ratio < 0.5  # a latency twice the fleet's
    assert against_reference([50], 100.0) is None


def test_decide_is_a_run_on_every_gpus():
    every = parse_spec({**spec(), "placement": "every_gpu", "decide": {"effect": 0.2, "max_rounds": 4}})
    assert every.rounds().effect == 0.2 and every.rounds().max_rounds == 4
    assert parse_spec({**spec(), "placement": "every_gpu"}).rounds().max_rounds == MAX_ROUNDS == 200
    rule = parse_spec({**spec(), "placement": "every_gpu"}).rounds()  # 600 s: its looks are the rounds it holds
    assert rule.planned(3.0) is rule and rule.planned(7.0).max_rounds == 85 and rule.planned(400.0).max_rounds == 2
    assert rule.planned(7.0).budget_s == 600 and rule.planned(0.0) is rule
    assert parse_spec({**spec(), "placement": "every_gpu", "decide": {"max_rounds": 1}}).rounds() is None
    assert parse_spec(spec()).rounds() is None
    with pytest.raises(ValueError, match="decide: decides a run on every GPU"):
        parse_spec({**spec(), "decide": {}})
