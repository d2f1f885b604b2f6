"""Verdicts (validity.py through records.summarize) and the worker's stop rules: unit cases on hand-built records
and samples, then real runs against the controlled server (errors, over-saturation) and the tiny model."""

import bisect
import random

import pytest

from benchd.records import RequestRecord, summarize
from benchd.spec import parse_spec
from benchd.validity import MIN_FINISHED_FOR_RATE, Backlog, Figures, ValidityRules, Watch, judge, sent_rate_ratio
from benchd.workers.local import run_local as run
from tests.openai_server import OpenAIServer


def record(index, scheduled, submitted, arrivals=(0.1, 0.2), error=None, warmup=False):
    return RequestRecord(index=index, request_id=f"r{index}", warmup=warmup, prompt_tokens=4, max_new_tokens=2,
                         scheduled_s=scheduled, submitted_s=submitted,
                         arrival_s=[scheduled + a for a in arrivals] if error is None else [],
                         arrival_tokens=[1] * len(arrivals) if error is None else [],
                         finished_s=scheduled + arrivals[-1], error=error)


def checks(summary):
    return [i.check for i in summary.invalid]


def test_an_on_time_open_loop_is_valid():
    records = [record(i, i * 0.1, i * 0.1 + 0.0002) for i in range(50)]
    s = summarize("constant@10/s", "succeeded", records, rules=ValidityRules(), open_loop=True)
    assert s.valid is True and s.invalid == []
    assert s.sent_rate_ratio == pytest.approx(1.0)


def test_late_dispatch_makes_an_open_loop_invalid_and_says_by_how_much():
    records = [record(i, i * 0.1, i * 0.1 + (0.004 if i % 10 == 0 else 0.0002)) for i in range(50)]
    s = summarize("constant@10/s", "succeeded", records, rules=ValidityRules(), open_loop=True)
    assert s.valid is False and checks(s) == ["dispatch_lag"]
    assert "dispatch lag p99 4.00 ms over 1 ms" in s.invalid[0].message
    # A closed loop's pace is the engine's: its lag is not judged.
    closed = summarize("concurrent=4", "succeeded", records, rules=ValidityRules(), open_loop=False)
    assert closed.valid is True and closed.sent_rate_ratio is None
    # The threshold is a rule: looser, the same stage is valid.
    loose = summarize("constant@10/s", "succeeded", records, rules=ValidityRules(max_dispatch_lag_p99_s=0.01),
                      open_loop=True)
    assert loose.valid is True


def test_falling_behind_the_schedule_is_a_low_sent_rate():
    # Each request leaves 10 % later than the last: the client fell behind (lag grows; the rate sent is lower).
    records = [record(i, i * 0.1, i * 0.11) for i in range(40)]
    s = summarize("constant@10/s", "succeeded", records, rules=ValidityRules(max_dispatch_lag_p99_s=None),
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


def test_no_rules_no_verdict():
    s = summarize("s", "succeeded", [record(0, 0.0, 0.0)])
    assert s.valid is None and s.invalid == []


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
        assert reason.startswith("over-saturated: requests in flight grew from") and "in 10 s without draining" in reason


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
                      {"duration_s": 20}, validity={"oversaturation_s": 1.5, "max_dispatch_lag_p99_s": 0.05})
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


# ---- the verdict through the daemon: stored, exported, shown, and never a baseline ------------------------


def gauge(server, name, labels):
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(server.http.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


def test_the_verdict_is_stored_exported_shown_and_keeps_an_invalid_run_from_being_a_baseline(tmp_path):
    from benchd.records import StageSummary
    from benchd.tables import summary_rows
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
