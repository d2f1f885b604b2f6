"""The shared statistics (measure/statistics.py) on simulated figures whose truth is known: intervals that cover it
as often as they say, never below −100 %, decisions against the threshold, and a sequential rule's error rate."""

import math

import numpy as np
import pytest

from benchd.measure.statistics import (
    Estimate,
    Interval,
    Sequential,
    Spread,
    decide,
    paired,
    runs,
    samples,
    samples_needed,
)


def coverage(make, truth: float, trials: int = 2000, confidence: float = 0.95) -> float:
    """The share of `trials` estimates whose interval holds the true ratio."""
    held = 0
    for trial in range(trials):
        interval = make(np.random.default_rng(trial)).interval(confidence)
        held += interval.low <= truth <= interval.high
    return held / trials


def test_runs_apart_cover_the_true_ratio_as_often_as_they_say():
    """3 runs against 3, each run's figure log-normal with a 10 % spread, B 20 % above A: Student's t on the pooled
    run-to-run variance (4 degrees of freedom) holds the truth in 95 % of the trials, give or take the trials' own
    error (±1 % at 2,000)."""
    found = coverage(lambda rng: runs(np.exp(rng.normal(0, 0.1, 3)), 1.2 * np.exp(rng.normal(0, 0.1, 3))), 1.2)
    assert found == pytest.approx(0.95, abs=0.015)


def test_one_run_a_side_needs_a_spread_and_borrows_its_degrees_of_freedom():
    assert runs([100.0], [90.0]) is None  # nothing says how much one run's figure moves
    spread = Spread.of([[100, 110, 95, 105], [50, 52, 49]])  # two groups, each about its own mean: 5 df
    assert spread.df == 5 and spread.runs == 7
    alone = np.log([100, 110, 95, 105])
    assert spread.variance == pytest.approx(
        (np.sum((alone - alone.mean()) ** 2) + np.sum((np.log([50, 52, 49]) - np.log([50, 52, 49]).mean()) ** 2)) / 5)
    estimate = runs([100.0], [90.0], spread)
    assert estimate.log_ratio == pytest.approx(math.log(0.9)) and estimate.df == 5
    assert estimate.se == pytest.approx(math.sqrt(spread.variance * 2))
    # A step between the groups is not spread: each group is taken about its own mean.
    assert Spread.of([[100, 101], [200, 202]]).relative < 0.01


def test_a_one_run_spread_from_history_covers_like_the_truth():
    """One run a side, the spread from 8 other runs of the same stack: still 95 %."""
    def make(rng):
        history = Spread.of([np.exp(rng.normal(0, 0.1, 8))])
        return runs(np.exp(rng.normal(0, 0.1, 1)), 0.8 * np.exp(rng.normal(0, 0.1, 1)), history)

    assert coverage(make, 0.8) == pytest.approx(0.95, abs=0.015)


def test_an_interval_never_reaches_below_minus_100_percent():
    """Throughput of 100 and 10 tok/s with a huge spread: the relative change's interval stays above −100 %."""
    interval = runs([100, 20, 300], [10, 2, 30]).interval()
    assert 0 < interval.low < interval.ratio < interval.high
    assert interval.change_low > -1 and interval.change == pytest.approx(14 / 140 - 1)


def test_a_side_value_other_than_the_mean_centres_the_interval():
    estimate = runs([1.0, 1.1, 0.9], [2.0, 2.2, 1.8], value_a=1.0, value_b=1.5)
    assert estimate.ratio == pytest.approx(1.5)


def test_paired_rounds_cancel_what_the_sides_share():
    """A drift that moves both sides of a round alike (the machine's state) is gone from the paired estimate, while
    the sides taken apart are swamped by it."""
    rng = np.random.default_rng(3)
    drift = np.exp(np.linspace(-0.5, 0.5, 8))
    a = 100 * drift * np.exp(rng.normal(0, 0.01, 8))
    b = 90 * drift * np.exp(rng.normal(0, 0.01, 8))
    together, apart = paired(a, b).interval(), runs(a, b).interval()
    assert together.high < 0.93 and together.low > 0.87
    assert apart.high - apart.low > 10 * (together.high - together.low)
    assert paired([1.0], [2.0]) is None


def test_samples_cover_a_quantile_and_a_mean():
    """Within-run samples, 400 a side, log-normal: p90's interval from the order statistics and the mean's hold
    the truth about 95 % of the time."""
    truth = 1.3

    def quantile(rng):
        return samples(rng.lognormal(0, 0.5, 400), truth * rng.lognormal(0, 0.5, 400), 0.9)

    def mean(rng):
        return samples(rng.lognormal(0, 0.5, 400), truth * rng.lognormal(0, 0.5, 400))

    assert coverage(quantile, truth, 1000) == pytest.approx(0.95, abs=0.025)
    assert coverage(mean, truth, 1000) == pytest.approx(0.95, abs=0.025)
    assert samples([1.0] * 500, [2.0] * 500, 0.99) is None  # 5 beyond p99 a side: too few for it
    assert (samples_needed(0.5), samples_needed(0.9), samples_needed(0.99), samples_needed(None)) == (20, 100, 1000,
                                                                                                      20)


def interval(low, high):
    return Interval(math.sqrt(low * high), low, high, 0.95)


def test_decide_reads_the_interval_against_the_threshold():
    assert decide(interval(1.06, 1.2)).verdict == "slower"
    assert decide(interval(1.06, 1.2), higher_is_worse=False).verdict == "faster"
    assert decide(interval(0.8, 0.94)).verdict == "faster"
    assert decide(interval(0.96, 1.04)).verdict == "equivalent"  # within 1 / 1.05 to 1.05
    assert decide(interval(1.01, 1.04)).verdict == "equivalent"  # a real change, smaller than the threshold
    wide = decide(interval(0.5, 2.0))
    assert wide.verdict == "inconclusive" and wide.reason.startswith("interval too wide: ")
    assert "reaches past the threshold (-4.8 % / +5.0 %) on both sides" in wide.reason
    # Beyond the threshold on one side only, zero excluded: it may be slower, not "no change".
    leaning = decide(interval(1.007, 2.56))
    assert leaning.verdict == "inconclusive" and leaning.reason.endswith("it may be slower")
    assert decide(interval(0.5, 0.99), higher_is_worse=False).reason.endswith("it may be slower")


def test_swapping_the_sides_mirrors_the_verdict():
    """The threshold is symmetric on the log scale: B 6 % above A is A 5.7 % below B, and both are decided alike."""
    up = Estimate(math.log(1.06), 0.0001, math.inf)
    down = Estimate(-up.log_ratio, up.se, up.df)
    assert decide(up.interval()).verdict == "slower" and decide(down.interval()).verdict == "faster"


def test_a_sequential_rule_keeps_its_error_rate_over_every_look():
    """Ten looks at a growing sample of rounds (each side ±3 % a round), stopping at the first decision. With no
    change at all, a rule that looked at 95 % each time would decide wrongly far more often than a fixed sample;
    the spent rule decides "slower" or "faster" in under 2.5 % of 1,000 sequences. With B at 0.85 × A and a 10 %
    effect, it finds the slowdown in most of them within the ten looks."""
    def run(ratio: float, seed: int, rule: Sequential) -> str:
        rng = np.random.default_rng(seed)
        a, b = [], []
        for _ in range(rule.looks):
            a.append(100 * math.exp(rng.normal(0, 0.03)))
            b.append(100 * ratio * math.exp(rng.normal(0, 0.03)))
            found = rule.look(paired(a, b))
            if found.decided:
                return found.verdict
        return found.verdict

    null = [run(1.0, seed, Sequential(threshold=0.02, higher_is_worse=False)) for seed in range(1000)]
    assert (null.count("slower") + null.count("faster")) / len(null) < 0.025
    slow = [run(0.85, seed, Sequential(threshold=0.10, higher_is_worse=False)) for seed in range(200)]
    assert slow.count("slower") / len(slow) > 0.8 and "faster" not in slow
    rule = Sequential(looks=2)
    assert rule.look(None).reason == "no estimate yet (look 1 of 2)"
    assert rule.look(Estimate(0.0, 1.0, 5)).reason.startswith("undecided after 2 looks: interval too wide")
    with pytest.raises(ValueError, match="all 2 looks are taken"):
        rule.look(None)
    assert Sequential(confidence=0.95, looks=10).look_confidence == pytest.approx(0.995)
