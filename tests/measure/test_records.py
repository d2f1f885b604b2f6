import numpy as np
import pytest

from benchd.measure.records import RequestRecord
from benchd.measure.summary import LatencyStats, summarize
from benchd.spec import SLO


def record(index, scheduled, arrivals, counts=None, *, submitted=None, admitted=None, warmup=False, error=None,
           prompt=10):
    counts = counts or [1] * len(arrivals)
    return RequestRecord(
        index=index, request_id=f"r{index}", warmup=warmup, prompt_tokens=prompt, max_new_tokens=sum(counts),
        scheduled_s=scheduled,
        submitted_s=scheduled + 0.001 if submitted is None else submitted,
        admitted_s=admitted, arrival_s=list(arrivals), arrival_tokens=list(counts),
        finished_s=arrivals[-1] if arrivals else scheduled + 1, error=error,
    )


def test_latencies_start_at_the_scheduled_time():
    r = record(0, scheduled=10.0, arrivals=[10.5, 10.6, 10.8, 11.1], submitted=10.2, admitted=10.3)
    assert r.dispatch_lag_s == pytest.approx(0.2)
    assert r.queue_s == pytest.approx(0.3)
    assert r.ttft_s == pytest.approx(0.5)
    assert r.e2e_s == pytest.approx(1.1)
    assert r.tpot_s == pytest.approx((11.1 - 10.5) / 3)
    assert r.itl_s() == pytest.approx([0.1, 0.2, 0.3])
    assert len(r.itl_s()) == r.output_tokens - 1


def test_a_chunk_of_k_tokens_is_k_equal_gaps():
    # t_s = 0; first token at 1.0; a chunk of 3 tokens at 1.3; one token at 1.4.
    r = record(0, 0.0, [1.0, 1.3, 1.4], [1, 3, 1])
    assert r.output_tokens == 5
    assert r.itl_s() == pytest.approx([0.1, 0.1, 0.1, 0.1])
    assert sum(r.itl_s()) == pytest.approx(1.4 - 1.0)
    assert r.tpot_s == pytest.approx(0.4 / 4)


def test_the_array_form_is_the_same_observations():
    """What a comparison reads (latency.itl_array) is latency.itl, chunk for chunk, on stamps with empty arrivals."""
    from benchd.measure import latency

    rng = np.random.default_rng(0)
    stamps = np.cumsum(rng.exponential(0.01, 50)).tolist()
    counts = rng.integers(0, 4, 50).tolist()
    assert latency.itl_array(stamps, counts).tolist() == pytest.approx(latency.itl(stamps, counts))
    assert latency.itl_array([1.0], [1]).tolist() == latency.itl([1.0], [1]) == []


def test_tokens_that_come_with_the_first_have_no_gap():
    r = record(0, 0.0, [1.0, 1.5], [2, 1])
    assert r.itl_s() == pytest.approx([0.5])
    assert r.tpot_s == pytest.approx(0.5 / 2)


def test_single_token_has_no_tpot_or_itl():
    r = record(0, 0.0, [0.2])
    assert r.tpot_s is None and r.itl_s() == [] and r.ttft_s == pytest.approx(0.2)


def test_latency_stats_match_numpy():
    values = [0.003, 0.001, 0.002, 0.010, 0.004]
    stats = LatencyStats.of(values)
    assert stats.count == 5 and stats.min == 0.001 and stats.max == 0.010
    assert stats.mean == pytest.approx(np.mean(values))
    assert stats.std == pytest.approx(np.std(values))
    assert stats.p50 == pytest.approx(0.003)
    assert stats.p99 == pytest.approx(np.percentile(values, 99))
    assert LatencyStats.of([]).count == 0 and LatencyStats.of([]).p50 is None


def test_summary_excludes_warmup_and_counts_failures():
    records = [
        record(0, 0.0, [5.0, 5.5], warmup=True),  # a slow warm-up request must not show anywhere
        record(1, 1.0, [1.1, 1.2, 1.3]),
        record(2, 2.0, [2.2, 2.3, 2.4]),
        record(3, 3.0, [3.3, 3.4, 3.5]),
        record(4, 3.5, [3.6], error="boom"),
    ]
    s = summarize("stage", "succeeded", records, kv_cache_occupancy_peak=0.5)
    assert (s.requests, s.errors, s.warmup_requests) == (3, 1, 1)
    assert s.ttft_s.count == 3 and s.ttft_s.max == pytest.approx(0.3)
    assert s.ttft_s.mean == pytest.approx(0.2)
    assert s.itl_s.count == 6 and s.itl_s.max == pytest.approx(0.1)
    assert s.e2e_s.max == pytest.approx(0.5)
    # Window: first measured scheduled time (1.0) → last measured token (3.6): 2.6 s.
    assert s.duration_s == pytest.approx(2.6)
    assert s.output_tokens == 10  # the failed request's token was produced in the window
    assert s.output_tokens_per_s == pytest.approx(10 / 2.6)
    assert s.requests_per_s == pytest.approx(3 / 2.6)
    assert s.prompt_tokens == 0  # nothing was admitted in these hand-built records
    assert s.kv_cache_occupancy_peak == 0.5
    assert s.goodput_requests_per_s is None


def test_goodput_counts_requests_meeting_every_slo():
    records = [
        record(0, 0.0, [0.1, 0.2, 0.3]),  # ttft 0.1, tpot 0.1
        record(1, 1.0, [1.5, 1.6, 1.7]),  # ttft 0.5: misses the TTFT SLO
        record(2, 2.0, [2.1, 2.5, 2.9]),  # tpot 0.4: misses the TPOT SLO
        record(3, 3.0, [3.1, 3.15, 3.2]),  # meets both
    ]
    s = summarize("stage", "succeeded", records, SLO(ttft_s=0.2, tpot_s=0.2))
    assert s.slo_attainment == pytest.approx(0.5)
    assert s.goodput_requests_per_s == pytest.approx(2 / s.duration_s)


def test_interrupted_window_ends_at_the_interruption():
    records = [record(0, 0.0, [0.5, 0.6]), record(1, 0.5, [0.9], error="interrupted")]
    s = summarize("stage", "interrupted", records, end_s=2.0)
    assert s.duration_s == pytest.approx(2.0)
    assert s.status == "interrupted" and s.errors == 0 and s.cut == 1  # ended by benchd in flight: cut, no failure


def test_a_books_running_figures_agree_with_the_stage_window():
    """What a live stage reports (its window's start, tokens, requests ended) is kept as events arrive, and is what
    the stage's records say at every point."""
    import random

    from benchd.measure.records import RecordBook
    from benchd.measure.result import StageResult

    rng = random.Random(3)
    book, stage = RecordBook(), StageResult(0, "s", 0.0)
    pending: list[str] = []
    for i in range(400):
        scheduled = 5.0 + i * 0.01 + rng.uniform(-0.05, 0.05)  # stamps out of order, as a lead makes them
        sent_now = rng.random() < 0.5
        r = book.request(i, f"r{i}", i < 20, 8, 4, scheduled, scheduled + 0.001 if sent_now else None)
        stage.records.append(r)
        if not sent_now:
            pending.append(r.request_id)
        if pending and rng.random() < 0.6:
            book.submitted(pending.pop(0), scheduled + 0.002)
        live = [x for x in stage.records if x.submitted_s is not None and x.finished_s is None]
        if live and rng.random() < 0.7:
            r = rng.choice(live)
            book.tokens(r.request_id, [scheduled + 0.01, scheduled + 0.02], [1, 2])
            book.finished(r.request_id, scheduled + 0.02, None)
            book.finished(r.request_id, scheduled + 0.03, "a second end changes nothing")
        window = stage.window()
        assert (window[0] if window else None) == (book.measured_from_s if window else None)
        assert book.ended == sum(x.finished_s is not None for x in stage.records)
        assert book.measured_tokens == sum(x.output_tokens for x in stage.records if not x.warmup)
    assert book.ended > 100 and book.measured_from_s is not None
