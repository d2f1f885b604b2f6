"""Over-saturation in the verdict: an open loop's completions against its offers, on simulated queues (stable ones
never judged, those beyond their capacity always), bursts, stalls and short stages."""

import random

import pytest

from benchd.measure.summary import summarize
from benchd.measure.verdicts import saturation
from benchd.spec.validity import ValidityRules
from tests.measure.helpers import NO_LAG, checks, poisson, served_records


def test_completions_falling_behind_offers_are_oversaturated_with_both_rates_named():
    # The stage: 16 requests/s offered for 20 s to a server that completes one every 1/7.89 s.
    records = served_records([i / 16 for i in range(320)], None, servers=1, service_s=lambda i: 1 / 7.89)
    s = summarize("poisson@16/s", "succeeded", records, rules=ValidityRules(), open_loop=True)
    assert s.valid is False and checks(s) == ["oversaturated"]
    assert s.offered_requests_per_s == pytest.approx(16, rel=0.01)
    assert s.completed_requests_per_s == pytest.approx(7.89, rel=0.02)
    message = s.invalid[0].message
    assert message.startswith("over-saturated: completed 7.91 requests/s against 16.1 offered (49%) from the last "
                              "9.97 s of sending on, the requests in flight growing by 41 then 40 over them")
    assert message.endswith("the engine kept up with about 7.91 requests/s")
    # The rule is the workload's: a lower ratio lets it through (the backlog is beyond it anyway), 0 turns it off.
    assert summarize("s", "succeeded", records, rules=ValidityRules(min_completion_ratio=0.4), open_loop=True).valid
    assert summarize("s", "succeeded", records, rules=ValidityRules(min_completion_ratio=0), open_loop=True).valid
    assert summarize("s", "succeeded", records, rules=ValidityRules(min_completion_ratio=None), open_loop=True).valid
    # A closed loop's pace is the engine's: never judged.
    closed = summarize("concurrent=8", "succeeded", records, rules=ValidityRules(), open_loop=False)
    assert closed.valid is True and closed.offered_requests_per_s is None


@pytest.mark.parametrize("load", [0.5, 0.8, 0.9])
def test_a_stable_queue_is_never_oversaturated(load):
    # 8 servers, 160 ms a request (50 requests/s at load 1), Poisson offers for 60 s; five seeds.
    for seed in range(5):
        rng = random.Random(seed + 100)
        records = served_records(poisson(50 * load, 60, seed), None, servers=8,
                                 service_s=lambda i, rng=rng: rng.expovariate(1 / 0.16))
        s = summarize("s", "succeeded", records, rules=NO_LAG, open_loop=True)
        assert s.valid is True, (load, seed, s.invalid)
        assert s.completed_requests_per_s == pytest.approx(s.offered_requests_per_s, rel=0.15)


@pytest.mark.parametrize("over", [1.25, 1.5, 2.0, 8.0])
def test_a_queue_beyond_its_capacity_is_oversaturated(over):
    for seed in range(5):
        rng = random.Random(seed + 100)
        records = served_records(poisson(50 * over, 60, seed), None, servers=8,
                                 service_s=lambda i, rng=rng: rng.expovariate(1 / 0.16))
        s = summarize("s", "succeeded", records, rules=NO_LAG, open_loop=True)
        assert checks(s) == ["oversaturated"], (over, seed)
        assert s.completed_requests_per_s == pytest.approx(50, rel=0.1)  # the servers' pace


def test_long_requests_fill_the_queue_in_the_first_half_without_being_oversaturated():
    # 32 requests/s of 1 to 14 s each (mixed output lengths) for 30 s: the queue fills to ~240 over the first 14 s;
    # only the latter 15 s of sending are judged.
    rng = random.Random(7)
    lengths = [rng.uniform(1, 14) for _ in range(2000)]
    records = served_records(poisson(32, 30, 1), lambda i: lengths[i])
    s = summarize("s", "succeeded", records, rules=ValidityRules(), open_loop=True)
    assert s.valid is True, s.invalid
    # Over the whole stage (an offer at −30 s opens the window at 0), completions were 22 % behind the offers, but
    # the queue grew in its first half only: filling, not growing steadily.
    whole = saturation([-30.0] + [r.scheduled_s for r in records], [r.finished_s for r in records])
    assert whole.completed_per_s < 0.8 * whole.offered_per_s and whole.growth[1] <= 0
    assert whole.oversaturated(0.9) is None


def test_a_burst_that_drains_is_not_oversaturated():
    # 20 requests/s to an engine that holds 40/s, and a burst of 150 in the last half second of sending (a trace's):
    # the backlog at the end is a burst's, not a growing queue's.
    offers = [i / 20 for i in range(400)] + [19.5 + i / 300 for i in range(150)]
    records = served_records(sorted(offers), None, servers=4, service_s=lambda i: 0.1)
    s = summarize("trace", "succeeded", records, rules=NO_LAG, open_loop=True)
    assert s.completed_requests_per_s < 0.9 * s.offered_requests_per_s  # behind, by the burst
    assert s.valid is True, s.invalid


def test_a_stall_the_engine_catches_up_on_is_not_oversaturated():
    # 16 requests/s for 2.5 s, and nothing answered before 3 s (a first step's compilation, graph captures): over
    # the judged window nothing completed, but the engine then answered all 40 in 0.4 s, faster than they came.
    records = served_records([i / 16 for i in range(40)], lambda i: 3.0 + i * 0.01 - i / 16)
    s = summarize("s", "succeeded", records, rules=ValidityRules(), open_loop=True)
    assert s.valid is True, s.invalid
    # the stage's rates: 16 offered (a schedule at 16/s), 40 answered by 3.45 s from a gap before the first
    assert s.offered_requests_per_s == pytest.approx(16) and s.completed_requests_per_s == pytest.approx(40 / 3.4525)


def test_a_stage_never_completes_more_than_it_was_offered():
    """`--rate 5` printed "completed / offered req/s 8.52 / 7.89 (108%)": the window's rates (a short window's
    Poisson draw, and a backlog from before it answered in it). The stage's rates: a schedule at r offers r, and
    completed ≤ offered whatever the arrivals, service and backlog."""
    assert summarize("s", "succeeded", served_records([i / 5 for i in range(16)], lambda i: 0.05), open_loop=True) \
        .offered_requests_per_s == pytest.approx(5)
    for seed in range(200):
        rng = random.Random(seed)
        arrivals = poisson(5, rng.uniform(1, 10), seed) or [0.0]
        records = served_records(arrivals, None, servers=rng.choice([1, 2, 8]),
                                 service_s=lambda i, rng=rng: rng.expovariate(1 / rng.choice([0.01, 0.2, 1.0])))
        s = summarize("poisson@5/s", "succeeded", records, open_loop=True)
        if len(arrivals) > 1:
            assert 0 < s.completed_requests_per_s <= s.offered_requests_per_s, (seed, s.completed_requests_per_s,
                                                                                s.offered_requests_per_s)


def test_short_stages_noise_and_warmup_are_not_judged():
    behind = lambda n, rate, seconds: served_records([i / rate for i in range(n)], None, servers=1,  # noqa: E731
                                                     service_s=lambda i: seconds)
    # Sending for 1.9 s: the latter half is under a second, too short to tell a filling queue from a growing one.
    assert saturation([r.scheduled_s for r in behind(39, 20, 0.2)], [0.0]) is None
    assert summarize("s", "succeeded", behind(39, 20, 0.2), rules=ValidityRules(), open_loop=True).valid is True
    # 4 requests/s to an engine of 2/s for 9 s: completions are half the offers, but 18 offers are no rate yet.
    few = summarize("s", "succeeded", behind(36, 4, 0.5), rules=ValidityRules(), open_loop=True)
    assert few.completed_requests_per_s < 0.6 * few.offered_requests_per_s and few.valid is True
    # Warm-up requests are no offers: 200 sent at once before the measured ones, done by the time the window opens.
    warm = served_records([0.0] * 200 + [1 + i / 10 for i in range(100)], lambda i: 0.5 if i < 200 else 0.05,
                          warmup=200)
    s = summarize("s", "succeeded", warm, rules=NO_LAG, open_loop=True)
    assert s.valid is True and s.offered_requests_per_s == pytest.approx(10, rel=0.05)


def test_a_stopped_stage_can_be_oversaturated_too():
    # Stopped by the watch (oversaturation_s) at 12 s: its requests cancelled then end at the stop, not before.
    records = served_records([i / 16 for i in range(192)], None, servers=1, service_s=lambda i: 1 / 4)
    stop = 12.0
    for r in records:
        if r.finished_s > stop:
            r.arrival_s, r.arrival_tokens, r.finished_s, r.error = [], [], stop, "stopped: over-saturated"
    s = summarize("s", "stopped", records, end_s=stop, rules=ValidityRules(oversaturation_s=2), open_loop=True,
                  stop_reason="over-saturated: requests in flight grew")
    assert checks(s) == ["stopped", "oversaturated"]
    assert s.completed_requests_per_s == pytest.approx(4, rel=0.05)
