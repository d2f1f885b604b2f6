"""Verdicts (measure/verdicts.py through records.summarize) on hand-built records: dispatch lag judged by how far it
moves TTFT, the sent rate, the minimums, unfinished and stopped stages, requests cut at the drain."""


import pytest

from benchd.measure.records import RequestRecord
from benchd.measure.summary import summarize
from benchd.measure.verdicts import Figures, judge, sent_rate_ratio
from benchd.spec.validity import ValidityRules
from tests.measure.helpers import NO_LAG, checks, record


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


@pytest.mark.parametrize("status, error", [("cancelled", "cancelled"), ("interrupted", "interrupted"),
                                           ("stopped", "stopped: over-saturated")])
def test_what_a_stage_that_ended_early_had_in_flight_was_cut_not_failed(status, error):
    """A cancelled run's requests in flight were counted as failed ("44 / 1 / 0"): benchd ended them, the engine
    did not fail them. Cut, as at a drain's end, and its verdict says why it ended, not that it cut."""
    from benchd.report.tables import summary_rows

    done = [record(i, i * 0.1, i * 0.1) for i in range(44)]
    cancelled = RequestRecord(index=44, request_id="c", warmup=False, prompt_tokens=4, max_new_tokens=50,
                              scheduled_s=4.4, submitted_s=4.4, arrival_s=[4.5], arrival_tokens=[1],
                              finished_s=4.6, error=error)
    failed = record(45, 4.5, 4.5, error="engine fault")
    s = summarize("concurrent=2", status, [*done, cancelled, failed], rules=ValidityRules(), end_s=4.6)
    assert s.requests == 44 and s.errors == 1 and s.cut == 1 and s.output_tokens == 44 * 2 + 1
    assert checks(s)[0] in ("unfinished", "stopped") and "cut" not in checks(s)
    assert dict(summary_rows([s]))["requests ok / failed / warm-up"] == ["44 / 1 / 0, 1 cut"]


def test_no_rules_no_verdict():
    s = summarize("s", "succeeded", [record(0, 0.0, 0.0)])
    assert s.valid is None and s.invalid == []
