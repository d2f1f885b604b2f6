"""Verdicts (measure/verdicts.py through records.summarize) and the worker's stop rules: unit cases on hand-built
records and samples, then real runs against the controlled server (errors, over-saturation) and the tiny model."""

import bisect
import random

import pytest

from benchd.daemon.inprocess import run_local as run
from benchd.measure.records import RequestRecord, summarize
from benchd.measure.verdicts import Figures, judge, saturation, sent_rate_ratio
from benchd.measure.watch import MIN_FINISHED_FOR_RATE, Backlog, Watch
from benchd.spec import parse_spec
from benchd.spec.validity import ValidityRules
from tests.openai_server import OpenAIServer


def record(index, scheduled, submitted, arrivals=(0.1, 0.2), error=None, warmup=False):
    return RequestRecord(index=index, request_id=f"r{index}", warmup=warmup, prompt_tokens=4, max_new_tokens=2,
                         scheduled_s=scheduled, submitted_s=submitted,
                         arrival_s=[scheduled + a for a in arrivals] if error is None else [],
                         arrival_tokens=[1] * len(arrivals) if error is None else [],
                         finished_s=scheduled + arrivals[-1], error=error)


def checks(summary):
    return [i.check for i in summary.invalid]


NO_LAG = ValidityRules(max_dispatch_lag_ttft_share=None)  # lag is not judged


def test_an_on_time_open_loop_is_valid():
    records = [record(i, i * 0.1, i * 0.1 + 0.0002) for i in range(50)]
    s = summarize("constant@10/s", "succeeded", records, rules=ValidityRules(), open_loop=True)
    assert s.valid is True and s.invalid == []
    assert s.sent_rate_ratio == pytest.approx(1.0)


def test_dispatch_lag_is_judged_by_how_far_it_moves_ttft():
    """Issue 41's stage on an H100: Poisson 8/s, lag p99 1.23 ms against TTFT p50 19 ms, read INVALID under a fixed
    1 ms rule. A request sent late by its lag has that much more TTFT than the engine gave it: here TTFT p99 moves by
    1.23 ms, 6 % of it: valid. The same lag against a TTFT five times shorter moves its p99 by a quarter: invalid,
    saying by how much."""
    def stage(lag, ttft, itl=0.01):
        # every tenth request late by lag (p99 lands on them), the rest 0.2 ms; the engine takes ttft from the send
        return [record(i, i * 0.125, i * 0.125 + (late := lag if i % 10 == 0 else 0.0002),
                       arrivals=(late + ttft, late + ttft + itl)) for i in range(60)]

    healthy = summarize("poisson@8/s", "succeeded", stage(0.00123, 0.019), rules=ValidityRules(), open_loop=True)
    assert healthy.dispatch_lag_s.p99 == pytest.approx(0.00123, rel=1e-6) and healthy.dispatch_lag_s.p99 > 0.001
    assert healthy.valid is True and healthy.invalid == []
    material = summarize("poisson@8/s", "succeeded", stage(0.00123, 0.0038), rules=ValidityRules(), open_loop=True)
    assert material.valid is False and checks(material) == ["dispatch_lag"]
    assert material.invalid[0].message.startswith(
        "dispatch lag (p99 1.23 ms) moved TTFT p99 by 1.23 ms (24% of its 5.03 ms), over 10%: "
        "requests left later than scheduled, which adds to each one's TTFT and E2E")
    # Under the floor nothing is judged, however short the latencies.
    tiny = summarize("poisson@8/s", "succeeded", stage(0.0009, 0.001), rules=ValidityRules(), open_loop=True)
    assert tiny.valid is True
    # A closed loop's pace is the engine's: its lag is not judged.
    closed = summarize("concurrent=4", "succeeded", stage(0.004, 0.0038), rules=ValidityRules(), open_loop=False)
    assert closed.valid is True and closed.sent_rate_ratio is None
    # The share, the floor and a ceiling are rules: looser, the material stage is valid; a ceiling set, the
    # healthy one is not.
    loose = ValidityRules(max_dispatch_lag_ttft_share=0.5)
    assert summarize("p", "succeeded", stage(0.00123, 0.0038), rules=loose, open_loop=True).valid is True
    assert summarize("p", "succeeded", stage(0.00123, 0.0038), rules=ValidityRules(dispatch_lag_floor_s=0.002),
                     open_loop=True).valid is True
    capped = summarize("p", "succeeded", stage(0.00123, 0.019), rules=ValidityRules(max_dispatch_lag_p99_s=0.001),
                       open_loop=True)
    assert checks(capped) == ["dispatch_lag"]
    assert capped.invalid[0].message.startswith("dispatch lag p99 1.23 ms over the ceiling of 1 ms")
    # No request succeeded: nothing to set the lag against but the floor.
    failed = [record(i, i * 0.125, i * 0.125 + 0.004, error="http_500: x") for i in range(20)]
    none = summarize("p", "succeeded", failed, rules=ValidityRules(), open_loop=True)
    assert "over the floor of 1 ms, with no latency to set it against" in none.invalid[0].message


def test_falling_behind_the_schedule_is_a_low_sent_rate():
    # Each request leaves 10 % later than the last: the client fell behind (lag grows; the rate sent is lower).
    records = [record(i, i * 0.1, i * 0.11) for i in range(40)]
    s = summarize("constant@10/s", "succeeded", records, rules=NO_LAG,
                  open_loop=True)
    assert s.sent_rate_ratio == pytest.approx(1 / 1.1)
    assert checks(s) == ["sent_rate"] and "sent at 90.9% of the scheduled rate, under 95%" in s.invalid[0].message
    assert sent_rate_ratio([0.0], [0.0]) is None


def test_an_open_loop_that_sent_fewer_than_two_requests_has_no_rate_to_judge():
    """A sparse stage that ended after its first request was judged valid: the sent rate needs two."""
    (one,) = [record(0, 0.0, 0.0002)]
    s = summarize("poisson@0.1/s", "succeeded", [one], rules=ValidityRules(), open_loop=True)
    assert s.sent_rate_ratio is None and s.valid is False
    assert checks(s) == ["too_few_requests"] and "1 measured, 2 needed" in s.invalid[0].message
    none = judge(ValidityRules(), Figures("succeeded", None, True, 1.0, 0, 0, None, None))
    assert [i.check for i in none] == ["too_few_requests"]
    # a closed loop's pace is the engine's: one request is no rate to judge, and no fault
    assert summarize("concurrent=1", "succeeded", [one], rules=ValidityRules(), open_loop=False).valid is True
    two = [record(0, 0.0, 0.0002), record(1, 0.1, 0.1002)]
    assert summarize("constant@10/s", "succeeded", two, rules=ValidityRules(), open_loop=True).valid is True


def test_minimum_duration_and_requests_and_error_rules():
    records = [record(i, i * 0.1, i * 0.1) for i in range(8)] + [record(8, 0.8, 0.8, error="http_500: x")]
    rules = ValidityRules(min_duration_s=5, min_requests=10, max_errors=0, max_error_rate=0.05)
    s = summarize("s", "succeeded", records, rules=rules, open_loop=True)
    assert checks(s) == ["min_duration", "min_requests", "max_errors", "max_error_rate"]
    assert "9 measured requests finished, under the minimum of 10" in s.invalid[1].message
    assert "error rate 11.1% (1 of 9) over 5.0%" in s.invalid[3].message
    # Warm-up requests are in no rule.
    warm = [record(i, i * 0.1, i * 0.1 + 0.5, warmup=True) for i in range(5)] + records[:8]
    assert summarize("s", "succeeded", warm, rules=ValidityRules(), open_loop=True).valid is True


def test_a_stage_that_did_not_finish_or_was_stopped_is_invalid():
    assert [i.check for i in judge(ValidityRules(), Figures("cancelled", None, False, 1, 5, 0, None, None))] == \
        ["unfinished"]
    stopped = judge(ValidityRules(max_errors=0), Figures("stopped", "1 measured requests failed, over max_errors 0",
                                                          False, 1, 5, 9, None, None))
    assert [i.check for i in stopped] == ["stopped"]  # the cancelled requests it left are not counted again
    assert stopped[0].message == "stopped early: 1 measured requests failed, over max_errors 0"


def test_requests_cut_at_the_drain_are_counted_apart_and_a_material_share_is_invalid():
    from benchd.measure.records import CUT

    def cut(i):
        return RequestRecord(index=300 + i, request_id=f"c{i}", warmup=False, prompt_tokens=4, max_new_tokens=50,
                             scheduled_s=19.8, submitted_s=19.8, arrival_s=[20.0, 20.1], arrival_tokens=[1, 1],
                             finished_s=30.0, error=CUT)

    done = [record(i, i * 0.1, i * 0.1) for i in range(198)]
    s = summarize("concurrent=4", "succeeded", [*done, cut(0), cut(1)], rules=ValidityRules(), end_s=30.0,
                  drain=(20.0, 10.0))
    assert s.requests == 198 and s.errors == 0 and s.cut == 2 and s.cut_share == 0.01
    assert s.output_tokens == 2 * 200 and s.drain_bound_s == 10.0 and s.drain_s == 10.0
    assert s.valid is True  # 1 %: at the rule, not over it
    three = [*done[:197], cut(0), cut(1), cut(2)]
    s = summarize("concurrent=4", "succeeded", three, rules=ValidityRules(), end_s=30.0, drain=(20.0, 10.0))
    assert checks(s) == ["cut"] and s.invalid[0].message.startswith(
        "3 of 200 measured requests (1.5%) were still in flight when the stage's drain of 10 s ended and were cut, "
        "over 1%")
    assert summarize("c", "succeeded", three, rules=ValidityRules(max_cut_share=0.05), drain=(20.0, 10.0)).valid


def test_no_rules_no_verdict():
    s = summarize("s", "succeeded", [record(0, 0.0, 0.0)])
    assert s.valid is None and s.invalid == []


# ---- over-saturation in the verdict: completions against offers -------------------------------------------


def served_records(arrivals, latency_s, servers=None, service_s=None, warmup=0):
    """Records of requests scheduled (and sent) at `arrivals`: each takes latency_s(i) from its scheduled time, or,
    with `servers`, waits first come first served for one of them and holds it service_s(i)."""
    free = [0.0] * (servers or 0)
    out = []
    for i, t in enumerate(arrivals):
        if servers:
            slot = min(range(servers), key=free.__getitem__)
            free[slot] = max(t, free[slot]) + service_s(i)
            end = free[slot]
        else:
            end = t + latency_s(i)
        out.append(RequestRecord(index=i, request_id=f"r{i}", warmup=i < warmup, prompt_tokens=4, max_new_tokens=1,
                                 scheduled_s=t, submitted_s=t, arrival_s=[end], arrival_tokens=[1], finished_s=end))
    return out


def poisson(rate, seconds, seed):
    rng, t, out = random.Random(seed), 0.0, []
    while (t := t + rng.expovariate(rate)) < seconds:
        out.append(t)
    return out


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
    assert s.completed_requests_per_s > s.offered_requests_per_s  # the pace, backlog and all


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


# ---- the worker's watch ------------------------------------------------------------------------------


def test_watch_stops_on_the_error_count_and_on_the_rate_once_enough_finished():
    watch = Watch(ValidityRules(max_errors=2), open_loop=False)
    assert [watch.finished(ok) for ok in (True, False, False)] == [None, None, None]
    assert watch.finished(False) == "3 measured requests failed, over max_errors 2"
    rate = Watch(ValidityRules(max_error_rate=0.1), open_loop=False)
    assert rate.finished(False) is None  # one in one is no rate yet
    reasons = [rate.finished(True) for _ in range(MIN_FINISHED_FOR_RATE - 3)]
    assert not any(reasons) and rate.finished(False) is None  # 2 of 19
    assert rate.finished(True) is None  # 2 of 20: at the rate, not over it
    assert rate.finished(False) == "error rate 14.3% (3 of 21) over max_error_rate 10.0%"


def queue_counts(rate, servers, service_s, seconds, seed):
    """(t, sent, finished) every 100 ms of a simulated queue: Poisson arrivals, exponential service on `servers`
    servers, first come first served (an M/M/c queue)."""
    rng = random.Random(seed)
    t, arrivals = 0.0, []
    while t < seconds:
        t += rng.expovariate(rate)
        arrivals.append(t)
    free, ends = [0.0] * servers, []
    for a in arrivals:
        slot = min(range(servers), key=free.__getitem__)
        free[slot] = max(a, free[slot]) + rng.expovariate(1 / service_s)
        ends.append(free[slot])
    ends.sort()
    return [(i * 0.1, bisect.bisect_right(arrivals, i * 0.1), bisect.bisect_right(ends, i * 0.1))
            for i in range(int(seconds * 10))]


@pytest.mark.parametrize("load", [0.5, 0.8, 0.9])
def test_a_stable_queue_is_not_over_saturated(load):
    # 8 servers, 160 ms a request: 50 requests/s at load 1; ten minutes, two seeds.
    for seed in (0, 1):
        backlog = Backlog(10.0)
        for t, sent, finished in queue_counts(50 * load, 8, 0.16, 600, seed):
            assert backlog.add(t, sent, finished) is None, (load, seed, t, sent - finished)


@pytest.mark.parametrize(("over", "within_s"), [(1.2, 40), (1.5, 20), (2.0, 12)])
def test_a_growing_backlog_is_over_saturated(over, within_s):
    for seed in (0, 1):
        backlog, reason = Backlog(10.0), None
        for t, sent, finished in queue_counts(50 * over, 8, 0.16, 120, seed):
            if reason := backlog.add(t, sent, finished):
                break
        assert reason is not None and t <= within_s, (over, seed, t)
        assert reason.startswith("over-saturated: requests in flight grew from")
        assert "in 10 s without draining" in reason


def test_a_backlog_that_drains_is_not_over_saturated():
    backlog = Backlog(2.0)
    # Sent 10 a tick; nothing finishes for 1.5 s, then everything at once: it grows fast, but empties every 1.5 s.
    assert all(backlog.add(i * 0.1, 10 * i, 150 * (i // 15)) is None for i in range(100))


def test_the_watch_samples_only_open_loops():
    assert Watch(ValidityRules(oversaturation_s=1), open_loop=False).backlog is None
    assert Watch(ValidityRules(oversaturation_s=1), open_loop=True).backlog is not None
    assert Watch(ValidityRules(), open_loop=True).backlog is None


# ---- real runs -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer(served_dir):
    return str(served_dir)


def served(base_url, tokenizer, model, arrivals, stop, output=8, validity=None, warmup=None):
    workload = {"arrivals": arrivals, "stop": stop, "prompt_tokens": {"dist": "fixed", "value": 8},
                "output_tokens": {"dist": "fixed", "value": output}, "validity": validity or {}}
    if warmup:
        workload["warmup"] = warmup
    return parse_spec({"name": "validity", "engine": "openai", "model": model, "workload": workload,
                       "openai": {"base_url": base_url, "tokenizer": tokenizer}})


@pytest.mark.timeout(120)
def test_max_errors_stops_the_stage_keeps_what_it_measured_and_the_next_stage_runs(tokenizer):
    with OpenAIServer(delay_s=0.002) as server:
        spec = served(server.base_url, tokenizer, "mixed", {"profile": "sweep", "over": "concurrent",
                                                            "values": [1, 2]},
                      {"requests": 40}, validity={"max_errors": 3})
        outcome = run(spec)
    assert outcome.status == "succeeded", outcome.error
    first, second = outcome.summaries()
    for s in (first, second):
        assert s.status == "stopped" and s.valid is False
        assert s.stop_reason == "4 measured requests failed, over max_errors 3"
        assert s.invalid[0].message == "stopped early: 4 measured requests failed, over max_errors 3"
        assert s.requests <= 2 and s.errors >= 4  # one request in four of "mixed" succeeds
    assert len(outcome.stages) == 2
    # Every request it sent is kept, each finished.
    assert all(r.finished_s is not None for stage in outcome.stages for r in stage.records)
    assert outcome.valid() is False
    assert outcome.to_json()["valid"] is False


@pytest.mark.timeout(120)
def test_an_over_saturated_open_loop_stops_early_and_says_so(tokenizer):
    # One slot, 8 tokens × 10 ms a request: the server holds 12 requests/s; 60/s are sent for up to 20 s.
    with OpenAIServer(delay_s=0.01) as server:
        spec = served(server.base_url, tokenizer, "slots-1", {"profile": "constant", "rate": 60},
                      {"duration_s": 20}, validity={"oversaturation_s": 1.5, "dispatch_lag_floor_s": 0.05})
        outcome = run(spec)
    assert outcome.status == "succeeded", outcome.error
    (s,) = outcome.summaries()
    assert s.status == "stopped" and s.valid is False
    assert s.stop_reason.startswith("over-saturated: requests in flight grew from")
    assert s.duration_s < 8  # stopped within a few windows, not at 20 s
    assert s.requests >= 10  # what was measured is kept
    assert outcome.valid() is False


@pytest.mark.engine
def test_a_closed_loop_on_the_tiny_model_gets_a_verdict(tiny):
    from tests.helpers import make_spec

    outcome = run(make_spec(workload={"validity": {"min_requests": 100}}), loaded=tiny)
    (s,) = outcome.summaries()
    assert s.valid is False and [i.check for i in s.invalid] == ["min_requests"]
    assert s.invalid[0].message == "12 measured requests finished, under the minimum of 100"


@pytest.mark.engine
def test_a_run_on_a_thermally_slowed_gpu_is_throttled_and_one_at_its_power_cap_is_valid(tiny):
    """The lifecycle judges each stage with its GPU's clock events over its span: the sampler's reads of the GPU
    its worker runs on (an NVML stand-in here, the worker labelled as its GPU 0)."""
    from benchd.daemon.inprocess import LocalPool
    from benchd.hardware.devices import Slot
    from benchd.hardware.host import HostReader
    from benchd.hardware.nvml import NVMLReader
    from benchd.hardware.reader import HardwareReader
    from benchd.hardware.sampler import HardwareSampler
    from tests.fake_nvml import FakeGPU, FakeNVML

    gpus = [FakeGPU("GPU-0", throttle_mask=0x4 | 0x40), FakeGPU("GPU-1", throttle_mask=0x4 | 0x8)]
    nvml = NVMLReader(FakeNVML(gpus))
    nvml.start()
    sampler = HardwareSampler(HardwareReader(nvml, HostReader()), interval_s=0.05)
    sampler.start()
    pool = LocalPool(tiny)
    pool.slots = [Slot("cpu", "cpu", "0")]
    spec = parse_spec({"name": "hot", "model": "tiny", "device": "cpu", "dtype": "float32",
                       "transformers": {"block_size": 16, "num_blocks": 64, "max_batch_tokens": 128},
                       "workload": {"arrivals": {"profile": "concurrent", "concurrency": 2}, "stop": {"requests": 8},
                                    "prompt_tokens": {"dist": "fixed", "value": 8},
                                    "output_tokens": {"dist": "fixed", "value": 32}}})
    try:
        hot = run(spec, loaded=tiny, hardware=sampler, pool=pool)
        gpus[0].throttle_mask = 0x4  # at its power cap only: a heavy workload's own state
        capped = run(spec, loaded=tiny, hardware=sampler, pool=pool)
    finally:
        pool.stop()
        sampler.stop()
    (summary,) = hot.summaries()
    (clocks,) = summary.clocks  # GPU 0's, not GPU 1's
    assert clocks.gpu == "0" and clocks.samples >= 1
    assert clocks.events["hw_thermal"] == 1.0 and clocks.events["power_cap"] == 1.0
    assert hot.status == "succeeded" and hot.valid() is False and [i.check for i in summary.invalid] == ["throttled"]
    assert "GPU 0: thermal slowdown (HW) (hw_thermal) in 100% of" in summary.invalid[0].message
    (summary,) = capped.summaries()
    assert capped.valid() is True and summary.clocks[0].events == {**dict.fromkeys(summary.clocks[0].events, 0.0),
                                                                    "power_cap": 1.0}


@pytest.mark.timeout(120)
def test_a_server_that_completes_half_what_it_is_offered_is_oversaturated_by_default(tokenizer):
    # The finding through the openai engine: one slot, 8 tokens × 10 ms a request (12.5 requests/s at
    # most), offered 30/s for 4 s with the default rules: the verdict was "valid".
    with OpenAIServer(delay_s=0.01) as server:
        spec = served(server.base_url, tokenizer, "slots-1", {"profile": "poisson", "rate": 30}, {"duration_s": 4},
                      validity={"dispatch_lag_floor_s": 0.05})
        outcome = run(spec)
    assert outcome.status == "succeeded", outcome.error
    (s,) = outcome.summaries()
    assert s.status == "succeeded" and checks(s) == ["oversaturated"]  # it ran to its end: a verdict, not a stop
    assert s.completed_requests_per_s == pytest.approx(12.5, rel=0.25)
    assert s.invalid[0].message.startswith(f"over-saturated: completed {s.completed_requests_per_s:.3g} requests/s "
                                           f"against {s.offered_requests_per_s:.3g} offered")


@pytest.mark.engine
@pytest.mark.timeout(300)
def test_the_tiny_model_offered_far_beyond_its_capacity_is_oversaturated_and_under_it_valid(tiny):
    # Prompts of 16 tokens and outputs of 128: the tiny model completes about 30 requests/s on this CPU (of 16
    # tokens, about 200). The rules are the defaults (the client's aside: a loaded 2-core machine is late by more
    # than 1 ms).
    from tests.helpers import make_spec

    def stage(rate, output_tokens):
        spec = make_spec(workload={"arrivals": {"profile": "poisson", "rate": rate}, "stop": {"duration_s": 3},
                                   "prompt_tokens": {"dist": "fixed", "value": 16},
                                   "output_tokens": {"dist": "fixed", "value": output_tokens},
                                   "validity": {"dispatch_lag_floor_s": 0.05, "min_sent_rate_ratio": 0.5}})
        outcome = run(spec, loaded=tiny)
        assert outcome.status == "succeeded", outcome.error
        return outcome

    # 150/s of 128 tokens, five times what it completes; 15/s of 16 tokens, a tenth.
    outcome = stage(150, 128)
    (over,) = outcome.summaries()
    assert over.valid is False and "oversaturated" in checks(over)
    assert over.completed_requests_per_s < 0.5 * over.offered_requests_per_s
    message = next(i.message for i in over.invalid if i.check == "oversaturated")
    assert f"completed {over.completed_requests_per_s:.3g} requests/s against {over.offered_requests_per_s:.3g} " \
           "offered" in message
    assert outcome.valid() is False
    (under,) = stage(15, 16).summaries()
    assert under.valid is True, under.invalid
    assert under.completed_requests_per_s == pytest.approx(under.offered_requests_per_s, rel=0.3)


# ---- the verdict through the daemon: stored, exported, shown, and never a baseline ------------------------


def gauge(server, name, labels):
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(server.http.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


def test_the_verdict_is_stored_exported_shown_and_keeps_an_invalid_run_from_being_a_baseline(tmp_path):
    from benchd.measure.records import StageSummary
    from benchd.report.tables import summary_rows
    from tests.helpers import NODE, daemon, spec, submit

    labels = {"model": "tiny", "engine": "transformers", "workload": "short", "gpu": "", "hostname": NODE}
    with daemon(tmp_path) as server:
        server.wait_ready()
        invalid = spec()
        invalid["workload"]["validity"] = {"min_requests": 100}
        bad = server.wait_status(submit(server, invalid), "succeeded")
        assert bad["valid"] is False
        assert bad["summary"][0]["invalid"][0]["message"] == \
            "6 measured requests finished, under the minimum of 100"
        assert gauge(server, "benchd_run_valid", labels) == 0.0
        refused = server.http.put("/baselines/short", json={"run_id": bad["id"]})
        assert refused.status_code == 422
        assert "an invalid run is never a baseline" in refused.text

        good = server.wait_status(submit(server, spec()), "succeeded")
        assert good["valid"] is True
        assert server.http.put("/baselines/short", json={"run_id": good["id"]}).status_code == 200
        assert gauge(server, "benchd_run_valid", labels) == 1.0
        compared = server.http.get("/compare", params={"a": good["id"], "b": bad["id"]}).json()
        assert compared["invalid"] == [bad["id"]]
    rows = dict(summary_rows([StageSummary.model_validate(bad["summary"][0]),
                              StageSummary.model_validate(good["summary"][0])]))
    assert rows["verdict"] == ["INVALID: min_requests", "valid"]


def test_the_daemons_settings_give_the_rules_a_workload_leaves_unset(tmp_path, monkeypatch):
    from benchd.daemon.settings import Settings
    from tests.helpers import daemon, spec, submit

    monkeypatch.setenv("BENCHD_VALIDITY__MIN_COMPLETION_RATIO", "0.8")  # as the environment gives it: text
    assert Settings().validity.min_completion_ratio == 0.8
    with daemon(tmp_path, validity={"min_completion_ratio": 0.5, "max_errors": 3}) as server:
        server.wait_ready()
        own = spec()
        own["workload"]["validity"] = {"min_completion_ratio": 0.95}
        for body, ratio in ((spec(), 0.5), (own, 0.95)):
            run = server.wait_status(submit(server, body), "succeeded")
            rules = run["spec"]["workload"]["validity"]
            assert (rules["min_completion_ratio"], rules["max_errors"]) == (ratio, 3)
            assert rules["max_dispatch_lag_ttft_share"] == 0.1  # the default, where neither sets it
