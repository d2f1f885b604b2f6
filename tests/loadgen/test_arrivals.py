import itertools
import math
import statistics

import pytest

from benchd.loadgen import arrivals
from benchd.loadgen.contents import contents
from benchd.spec import Concurrent, Constant, Gamma, Poisson, Synchronous, parse_spec


def take(profile, seed, n):
    return list(itertools.islice(arrivals.offsets(profile, seed), n))


def gaps(times):
    return [b - a for a, b in itertools.pairwise(times)]


def test_poisson_has_the_right_mean_rate_and_exponential_spread():
    rate, n = 50.0, 20_000
    g = gaps(take(Poisson(profile="poisson", rate=rate), seed=7, n=n + 1))
    mean = statistics.fmean(g)
    # The mean of n exponential gaps has standard error (1/rate)/√n: allow five of them.
    assert abs(mean - 1 / rate) < 5 * (1 / rate) / math.sqrt(n)
    cv = statistics.pstdev(g) / mean
    assert 0.95 < cv < 1.05  # exponential: coefficient of variation 1


def test_poisson_is_identical_for_one_seed_and_differs_across_seeds():
    profile = Poisson(profile="poisson", rate=10)
    assert take(profile, 3, 500) == take(profile, 3, 500)
    assert take(profile, 3, 500) != take(profile, 4, 500)


def test_first_request_leaves_at_zero():
    for profile in (Poisson(profile="poisson", rate=3), Constant(profile="constant", rate=3),
                    Gamma(profile="gamma", rate=3, burstiness=0.3)):
        assert take(profile, 0, 1) == [0.0]


def test_constant_rate_is_exact():
    assert take(Constant(profile="constant", rate=4), 0, 5) == [0.0, 0.25, 0.5, 0.75, 1.0]


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_keeps_the_rate_and_sets_the_spread(burstiness):
    rate, n = 20.0, 20_000
    g = gaps(take(Gamma(profile="gamma", rate=rate, burstiness=burstiness), seed=1, n=n + 1))
    mean = statistics.fmean(g)
    expected_cv = 1 / math.sqrt(burstiness)
    assert abs(mean - 1 / rate) < 5 * expected_cv * (1 / rate) / math.sqrt(n)
    assert abs(statistics.pstdev(g) / mean - expected_cv) < 0.1 * expected_cv


def test_closed_loop_profiles_have_slots_not_offsets():
    assert arrivals.concurrency(Synchronous(profile="synchronous")) == 1
    assert arrivals.concurrency(Concurrent(profile="concurrent", concurrency=6)) == 6
    assert arrivals.concurrency(Poisson(profile="poisson", rate=1)) is None
    with pytest.raises(ValueError, match="closed-loop"):
        arrivals.offsets(Concurrent(profile="concurrent", concurrency=2), 0)


def test_request_contents_are_reproducible_and_within_their_distributions():
    workload = parse_spec({"workload": {
        "prompt_tokens": {"dist": "normal", "mean": 20, "std": 30, "min": 5, "max": 40},
        "output_tokens": {"dist": "list", "values": [3, 7, 11]},
    }}).workload
    avoid = frozenset({0, 1, 2})
    first = list(itertools.islice(contents(workload, 5, 50, avoid), 300))
    again = list(itertools.islice(contents(workload, 5, 50, avoid), 300))
    other = list(itertools.islice(contents(workload, 6, 50, avoid), 300))
    assert first == again and first != other
    prompt_lengths = [len(c.prompt_ids) for c in first]
    assert min(prompt_lengths) == 5 and max(prompt_lengths) == 40  # std 30 around 20: both clips are hit
    assert {c.max_new_tokens for c in first} == {3, 7, 11}
    ids = {i for c in first for i in c.prompt_ids}
    assert ids.isdisjoint(avoid) and ids <= set(range(50))


def test_uniform_lengths_cover_the_range():
    workload = parse_spec({"workload": {"prompt_tokens": {"dist": "uniform", "min": 2, "max": 4}}}).workload
    lengths = {len(c.prompt_ids) for c in itertools.islice(contents(workload, 0, 10), 200)}
    assert lengths == {2, 3, 4}
