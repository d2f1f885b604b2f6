"""Capacity under SLO: the search's decisions on hand-made probe outcomes, its replay by the daemon, and a real
search against a server of known capacity (the controlled server with N slots)."""

import pytest

from benchd.daemon.inprocess import run_local as run
from benchd.measure import capacity
from benchd.measure.capacity import Search, conclude
from benchd.measure.records import RequestRecord
from benchd.measure.summary import summarize
from benchd.measure.verdicts import Invalidity
from benchd.spec import SpecError, parse_spec
from benchd.spec.profiles import Capacity, describe_profile
from benchd.spec.slo import SLO
from benchd.spec.validity import ValidityRules
from tests.openai_server import OpenAIServer


def profile(**kw):
    return Capacity(profile="capacity", **kw)


BASE = summarize("s", "succeeded", [RequestRecord(index=i, request_id=f"r{i}", warmup=False, prompt_tokens=4,
                                                  max_new_tokens=2, scheduled_s=i / 10, submitted_s=i / 10,
                                                  arrival_s=[i / 10 + 0.1, i / 10 + 0.2], arrival_tokens=[1, 1],
                                                  finished_s=i / 10 + 0.2) for i in range(2)],  # a rate needs two
                 SLO(e2e_p99_s=1.0), rules=ValidityRules(), open_loop=True)


def probe(result):
    """A summary whose outcome is pass, fail (SLO missed) or unusable (the client's fault)."""
    if result == "unusable":
        return BASE.model_copy(update={"valid": False, "invalid": [Invalidity(check="dispatch_lag", message="late")]})
    return BASE.model_copy(update={"slo_met": result == "pass", "slo_misses": [] if result == "pass" else ["E2E"]})


def search(p, true_capacity):
    s, rates = Search(p), []
    while (rate := s.next_rate()) is not None:
        rates.append(rate)
        s.record(probe("pass" if rate <= true_capacity else "fail"))
    return s, rates


def test_the_search_brackets_by_doubling_then_bisects_to_the_precision():
    s, rates = search(profile(start_rate=1.0, precision=0.1), 5.3)
    assert rates == [1, 2, 4, 8, 6, 5, 5.5]
    assert (s.low, s.high, s.complete) == (5, 5.5, True)
    assert s.reason == "bracketed within 10%: 5 passed, 5.5 failed"


def test_the_search_halves_from_a_failing_start_and_stops_at_min_and_max_rate():
    s, rates = search(profile(start_rate=8.0, min_rate=0.5, precision=0.3), 1.3)
    assert rates == [8, 4, 2, 1, 1.5, 1.25] and (s.low, s.high, s.complete) == (1.25, 1.5, True)
    none, rates = search(profile(start_rate=1.0, min_rate=0.5), 0.1)
    assert rates == [1, 0.5] and none.low is None and none.complete
    assert none.reason == "no rate down to 0.5 requests/s met the SLO (min_rate 0.5)"
    top, rates = search(profile(start_rate=1.0, max_rate=3.0), 100)
    assert rates == [1, 2, 3] and top.low == 3 and top.reason.endswith("the capacity is at least that")


def test_an_unusable_probe_is_run_again_then_ends_the_search_incomplete():
    s = Search(profile(start_rate=2.0, retries=1))
    assert s.record(probe("pass")) == "pass" and s.next_rate() == 4
    assert s.record(probe("unusable")) == "unusable" and s.next_rate() == 4  # again, at the same rate
    s.record(probe("unusable"))
    assert s.next_rate() is None and not s.complete and s.low == 2
    assert "unusable 2 times (late)" in s.reason


def test_an_oversaturated_probe_fails_even_where_its_slo_held_or_the_client_was_late_too():
    saturated = Invalidity(check="oversaturated", message="over-saturated: completed 7.89 requests/s against 16 …")
    late = Invalidity(check="dispatch_lag", message="late")
    for invalid in ([saturated], [late, saturated]):  # a max_concurrency cap is late exactly when the engine is full
        summary = BASE.model_copy(update={"valid": False, "invalid": invalid})
        assert summary.slo_met is True and capacity.outcome(summary) == "fail"
    s = Search(profile(start_rate=8.0, min_rate=1.0, precision=0.5))
    s.record(BASE.model_copy(update={"valid": False, "invalid": [late, saturated]}))
    assert s.high == 8 and s.next_rate() == 4  # decided on, not run again


def test_max_probes_ends_the_search_incomplete():
    s, rates = search(profile(start_rate=1.0, max_probes=3), 1000)
    assert rates == [1, 2, 4] and not s.complete and s.reason == "max_probes (3) reached"


def test_the_daemon_replays_the_search_over_the_stored_summaries():
    p = profile(start_rate=1.0, precision=0.1)
    _, rates = search(p, 5.3)
    stages = [(describe_profile(p.probe(r)), probe("pass" if r <= 5.3 else "fail")) for r in rates]
    found = conclude(p, stages)
    assert found.requests_per_s == 5 and found.complete and [q.rate for q in found.probes] == rates
    assert [q.outcome for q in found.probes] == ["pass", "pass", "pass", "fail", "fail", "pass", "fail"]
    assert found.probes[3].reasons == ["E2E"]
    # A stage that is not the probe the search chose ends the replay: the figure rests on nothing else.
    wrong = conclude(p, [stages[0], ("poisson@3/s", stages[1][1])])
    assert not wrong.complete and "is not the probe the search chose at 2 requests/s" in wrong.reason


def test_a_capacity_spec_needs_stage_objectives_and_a_duration():
    workload = {"arrivals": {"profile": "capacity"}, "stop": {"duration_s": 1}}
    with pytest.raises(SpecError, match="workload: .*slo: a capacity search needs stage objectives"):
        parse_spec({"workload": {**workload, "slo": {"ttft_s": 0.1}}})
    with pytest.raises(SpecError, match="stop.duration_s: a capacity search's probes"):
        parse_spec({"workload": {**workload, "stop": {"requests": 5}, "slo": {"e2e_p99_s": 0.1}}})
    with pytest.raises(SpecError, match="max_rate .* must be >= start_rate"):
        parse_spec({"workload": {**workload, "slo": {"e2e_p99_s": 0.1},
                                 "arrivals": {"profile": "capacity", "start_rate": 4, "max_rate": 2}}})


@pytest.mark.quiet  # its probes' verdicts read the dispatch lag: with load 9 on 2 cores, a 10/s probe was unusable
@pytest.mark.timeout(180)
def test_a_capacity_search_against_a_server_of_known_capacity(served_dir):
    # Two slots, 4 tokens × 10 ms a request: the server completes at most 50 requests/s; E2E p99 under 250 ms
    # holds well below that and not above it (the queue grows without bound).
    with OpenAIServer(delay_s=0.01) as server:
        spec = parse_spec({"name": "capacity", "engine": "openai", "model": "slots-2",
                           "openai": {"base_url": server.base_url, "tokenizer": str(served_dir)},
                           "workload": {"arrivals": {"profile": "capacity", "over": "constant", "start_rate": 10,
                                                     "precision": 0.25, "max_probes": 6},
                                        "stop": {"duration_s": 1.5},
                                        "prompt_tokens": {"dist": "fixed", "value": 8},
                                        "output_tokens": {"dist": "fixed", "value": 4},
                                        "slo": {"e2e_p99_s": 0.25},
                                        # the test server's usage counts words and chunks (test_validity.py)
                                        "validity": {"dispatch_lag_floor_s": 0.05,
                                                     "max_count_disagreement_share": None}}})
        outcome = run(spec)
    assert outcome.status == "succeeded", outcome.error
    found = outcome.capacity()
    assert found is not None and found.requests_per_s is not None, found
    assert 10 <= found.requests_per_s <= 50, found
    assert found.high is not None and found.high <= 100, found
    for p in found.probes:  # what passed lies below what failed
        assert (p.outcome == "pass") == (p.rate <= found.low), found
    labels = [s.label for s in outcome.stages]
    assert labels == [f"constant@{p.rate:g}/s" for p in found.probes]
    assert outcome.to_json()["capacity"]["requests_per_s"] == found.requests_per_s
    assert outcome.valid() is found.complete
    assert capacity.outcome(outcome.summaries()[0]) == "pass"
