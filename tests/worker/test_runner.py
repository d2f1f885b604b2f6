"""Whole runs on the real engines with the tiny model: counts, warm-up, arrivals, queueing, faults."""

import itertools
import time

import numpy as np
import pytest

from benchd.daemon.inprocess import run_local as run
from benchd.measure.summary import LatencyStats
from benchd.stopping import StopSignal
from benchd.telemetry.run import Telemetry
from tests.helpers import make_spec

pytestmark = pytest.mark.engine


@pytest.mark.parametrize("engine", ["transformers", "static"])
def test_exact_token_counts_and_per_token_itl(tiny, engine):
    outcome = run(make_spec(engine=engine, workload={"warmup": {"requests": 2}}), loaded=tiny)
    assert outcome.status == "succeeded", outcome.error
    (stage,) = outcome.stages
    measured = [r for r in stage.records if not r.warmup]
    assert len(measured) == 12 and len(stage.records) == 14
    for r in stage.records:
        assert r.ok, r.error
        assert r.output_tokens == r.max_new_tokens == len(r.token_ids)
        assert r.ttft_s > 0
        itl = r.itl_s()
        assert len(itl) == r.output_tokens - 1
        assert all(gap > 0 for gap in itl)
        assert r.scheduled_s <= r.submitted_s <= r.admitted_s <= r.arrival_s[0]
    summary = stage.summary()
    assert summary.requests == 12 and summary.errors == 0 and summary.warmup_requests == 2
    assert summary.itl_s.count == sum(r.output_tokens - 1 for r in measured)
    assert summary.output_tokens == sum(r.max_new_tokens for r in measured)
    assert summary.output_tokens_per_s > 0


def test_each_run_says_its_place_among_its_engines_runs(tiny):
    """The first run after an engine starts ran cold (its metadata's engine_run is 1, measure/compare.py and the
    history leave it out beside warm runs); the next on the same engine is its second; a spec that needs another
    engine starts over. The loaded weights' type is recorded too (the spec's auto resolved)."""
    from benchd.daemon.inprocess import LocalPool

    pool = LocalPool(tiny)
    small = make_spec(workload={"stop": {"requests": 4}})
    other = make_spec(transformers={"block_size": 16, "num_blocks": 64, "max_batch_tokens": 64},
                      workload={"stop": {"requests": 4}})
    try:
        runs = [run(spec, pool=pool) for spec in (small, small, other)]
    finally:
        pool.stop()
    assert [r.metadata.engine_run for r in runs] == [1, 2, 1] and runs[0].metadata.dtype == "float32"


def test_warmup_requests_never_enter_a_figure(tiny):
    outcome = run(make_spec(workload={"warmup": {"requests": 4}, "stop": {"requests": 8}}), loaded=tiny)
    stage = outcome.stages[0]
    warm = [r for r in stage.records if r.warmup]
    measured = [r for r in stage.records if not r.warmup]
    assert [r.index for r in warm] == [0, 1, 2, 3]  # cut by scheduled order
    summary = stage.summary()
    assert summary.ttft_s == LatencyStats.of([r.ttft_s for r in measured])
    assert summary.e2e_s == LatencyStats.of([r.e2e_s for r in measured])
    assert summary.itl_s == LatencyStats.of([g for r in measured for g in r.itl_s()])
    assert summary.output_tokens == sum(r.output_tokens for r in measured)
    assert summary.duration_s == pytest.approx(
        max(r.arrival_s[-1] for r in measured) - min(r.scheduled_s for r in measured)
    )


def test_warmup_by_seconds_cuts_by_scheduled_time(tiny):
    spec = make_spec(workload={
        "arrivals": {"profile": "constant", "rate": 40},
        "warmup": {"seconds": 0.2},
        "stop": {"requests": 6},
    })
    stage = run(spec, loaded=tiny).stages[0]
    for r in stage.records:
        assert r.warmup == (r.scheduled_s < stage.start_s + 0.2)
        assert r.warmup == (r.index < 8)  # offsets 0, 25 … 175 ms
    assert stage.summary().requests == 6


@pytest.mark.quiet
def test_open_loop_requests_leave_at_their_scheduled_time(tiny):
    spec = make_spec(seed=11, workload={"arrivals": {"profile": "poisson", "rate": 30}, "stop": {"requests": 20}})
    stage = run(spec, loaded=tiny).stages[0]
    import itertools

    from benchd.loadgen import arrivals

    expected = list(itertools.islice(arrivals.offsets(spec.workload.arrivals, 11), 20))
    got = [r.scheduled_s - stage.start_s for r in sorted(stage.records, key=lambda r: r.index)]
    assert got == pytest.approx(expected, abs=1e-9)
    assert max(r.dispatch_lag_s for r in stage.records) < 0.05


@pytest.mark.quiet
@pytest.mark.parametrize("arrivals", [{"profile": "concurrent", "concurrency": 6},
                                      {"profile": "constant", "rate": 10}])
def test_request_contents_are_made_before_they_are_due(tiny, monkeypatch, arrivals):
    """Making a prompt takes time (~90 µs for 256 tokens over a 128k vocabulary; 50 ms here): a burst's contents
    are made before the stage starts, an open loop's while it waits, so none delays a request past its time."""
    import benchd.worker.subjects

    real = benchd.worker.subjects.contents

    def slow(*args, **kwargs):
        for content in real(*args, **kwargs):
            time.sleep(0.05)
            yield content

    monkeypatch.setattr(benchd.worker.subjects, "contents", slow)
    spec = make_spec(workload={"arrivals": arrivals, "stop": {"requests": 6}, "output_tokens": {"dist": "fixed",
                                                                                             "value": 4}})
    records = run(spec, loaded=tiny).stages[0].records
    assert len(records) == 6 and all(r.ok for r in records)
    # Made at dispatch, the sixth of a burst would leave ≥ 250 ms late and every open-loop request ≥ 50 ms.
    lags = sorted(r.dispatch_lag_s for r in records)
    assert lags[len(lags) // 2] < 0.01 and lags[-1] < 0.045, lags


def test_closed_loop_keeps_n_in_flight_and_schedules_on_free_slots(tiny):
    spec = make_spec(workload={"arrivals": {"profile": "concurrent", "concurrency": 3}, "stop": {"requests": 12}})
    records = sorted(run(spec, loaded=tiny).stages[0].records, key=lambda r: r.index)
    assert len({r.scheduled_s for r in records[:3]}) == 1  # the first three start together
    ends = {r.finished_s for r in records}
    assert all(r.scheduled_s in ends for r in records[3:])  # each later one starts when one ends
    events = sorted([(r.submitted_s, 1) for r in records] + [(r.finished_s, -1) for r in records],
                    key=lambda e: (e[0], e[1]))
    in_flight = np.cumsum([delta for _, delta in events])
    assert in_flight.max() == 3


def test_saturated_open_loop_ttft_grows_with_queueing(tiny):
    # One request at a time (static, batch 1) against 1,000 req/s: each request waits behind all earlier ones (a
    # generate() of 8 tokens takes longer than 1 ms however fast the machine; at 200 req/s, on one intra-op thread,
    # the engine kept up with the first few and their waits did not grow).
    spec = make_spec(engine="static", static={"batch_size": 1}, workload={
        "arrivals": {"profile": "constant", "rate": 1000},
        "stop": {"requests": 24},
        "output_tokens": {"dist": "fixed", "value": 8},
    })
    records = sorted(run(spec, loaded=tiny).stages[0].records, key=lambda r: r.index)
    ttft = [r.ttft_s for r in records]
    queue = [r.queue_s for r in records]
    served = [r.arrival_s[0] - r.admitted_s for r in records]  # time to first token once the engine took it
    # The last requests wait behind about twenty others; compared with the engine's own time to a first token, not
    # with the first requests' TTFT, which a slow first generate() (a loaded CI machine) can inflate as much.
    assert np.mean(ttft[-6:]) > 3 * np.mean(served[-6:])
    assert ttft[-1] > ttft[1]
    assert queue[-1] > 0.5 * ttft[-1]  # the growth is queue time, counted from the scheduled time
    assert all(b >= a for a, b in itertools.pairwise(queue))  # FIFO: the wait only grows


def test_saturated_closed_loop_queue_exceeds_engine_slots(tiny):
    spec = make_spec(engine="static", static={"batch_size": 2}, workload={
        "arrivals": {"profile": "concurrent", "concurrency": 8},
        "stop": {"requests": 16},
        "output_tokens": {"dist": "fixed", "value": 6},
    })
    summary = run(spec, loaded=tiny).stages[0].summary()
    # 8 in flight for 2 engine slots: most requests wait for earlier batches.
    assert summary.queue_s.p50 > summary.ttft_s.p50 - summary.queue_s.p50


def test_duration_stops_dispatch(tiny):
    spec = make_spec(workload={"arrivals": {"profile": "constant", "rate": 20}, "stop": {"duration_s": 0.5}})
    stage = run(spec, loaded=tiny).stages[0]
    assert len(stage.records) == 10  # offsets 0, 50 … 450 ms
    assert all(r.scheduled_s - stage.start_s < 0.5 for r in stage.records)


def test_sweep_runs_each_level_with_the_same_requests(tiny):
    spec = make_spec(workload={"arrivals": {"profile": "sweep", "over": "concurrent", "values": [1, 4]},
                               "stop": {"requests": 6}})
    outcome = run(spec, loaded=tiny)
    assert [s.label for s in outcome.stages] == ["concurrent=1", "concurrent=4"]
    first, second = ([r.token_ids for r in sorted(s.records, key=lambda r: r.index)] for s in outcome.stages)
    assert first == second  # same prompts, greedy: same outputs whatever the load
    assert [s.stage for s in outcome.summaries()] == ["concurrent=1", "concurrent=4"]


class StopOnTokens(Telemetry):
    """Sets the stop once a measured request has some tokens: a stop at a fixed time could come before the first token
    on a busy machine."""

    def __init__(self, stop: StopSignal, tokens: int = 4) -> None:
        super().__init__()
        self.stop, self.tokens, self.stopped_at = stop, tokens, None

    def for_run(self, *args, **kwargs):
        run = super().for_run(*args, **kwargs)
        arrivals = run.arrivals

        def seen(record, start):
            arrivals(record, start)
            if not record.warmup and len(record.arrival_s) >= self.tokens and self.stopped_at is None:
                self.stopped_at = time.monotonic()
                self.stop.set()
        run.arrivals = seen
        return run


def test_stop_signal_cancels_and_keeps_what_was_measured(tiny):
    stop = StopSignal()
    telemetry = StopOnTokens(stop)
    spec = make_spec(transformers={"block_size": 16, "num_blocks": 128, "max_batch_tokens": 128},
                     workload={"arrivals": {"profile": "concurrent", "concurrency": 2},
                               "stop": {"duration_s": 60}, "output_tokens": {"dist": "fixed", "value": 2000}})
    outcome = run(spec, loaded=tiny, stop=stop, telemetry=telemetry)
    assert telemetry.stopped_at is not None and time.monotonic() - telemetry.stopped_at < 10  # not the 2,000 tokens
    assert outcome.status == "cancelled"
    records = outcome.stages[0].records
    assert all(r.done for r in records)
    assert any(r.error == "cancelled" and r.output_tokens > 0 for r in records)
    summary = outcome.summaries()[0]
    assert summary.status == "cancelled" and summary.output_tokens > 0


def test_engine_errors_fail_requests_and_the_run_goes_on(tiny):
    # A real fault in the model's forward pass, on every third batch of the static engine.
    calls = {"n": 0}

    def flaky(module, args):
        calls["n"] += 1
        if calls["n"] % 3 == 0:
            raise RuntimeError("injected fault")

    handle = tiny.model.model.layers[0].register_forward_pre_hook(flaky)
    try:
        spec = make_spec(engine="static", static={"batch_size": 1},
                         workload={"output_tokens": {"dist": "fixed", "value": 1}, "stop": {"requests": 9}})
        outcome = run(spec, loaded=tiny)
    finally:
        handle.remove()
    assert outcome.status == "succeeded"
    summary = outcome.summaries()[0]
    assert summary.errors == 3 and summary.requests == 6
    failed = [r for r in outcome.stages[0].records if r.error]
    assert all("injected fault" in r.error for r in failed)


def test_metadata_identifies_the_stack(tiny, monkeypatch):
    monkeypatch.setenv("BENCHD_LABEL", "abc123")
    outcome = run(make_spec(workload={"stop": {"requests": 1}}), loaded=tiny)
    meta = outcome.metadata
    assert meta.label == "abc123" and meta.model == "tiny" and meta.device == "cpu"
    assert meta.torch_version and meta.transformers_version and meta.benchd_version and meta.host
    assert meta.engine_settings["engine"] == "transformers"
    assert meta.engine_settings["continuous_batching"]["num_blocks"] == 64
    explicit = run(make_spec(label="release-1", workload={"stop": {"requests": 1}}), loaded=tiny)
    assert explicit.metadata.label == "release-1"


def test_a_run_whose_requests_all_fail_has_failed(tiny):
    def broken(module, args):
        raise RuntimeError("injected fault")

    handle = tiny.model.model.layers[0].register_forward_pre_hook(broken)
    try:
        outcome = run(make_spec(workload={"stop": {"requests": 3}}), loaded=tiny)
    finally:
        handle.remove()
    # The engine's loop dies with the fault: the stage ends at once (nothing more is sent to a dead engine) and
    # keeps what it recorded, every request failed.
    assert outcome.status == "failed"
    assert outcome.error == "EngineStopped: the engine stopped (RuntimeError: injected fault)"
    records = outcome.stages[0].records
    assert records and all(not r.ok for r in records)


def test_stop_reason_becomes_the_status(tiny):
    stop = StopSignal()
    stop.set("interrupted")
    outcome = run(make_spec(), loaded=tiny, stop=stop)
    assert outcome.status == "interrupted" and outcome.stages[0].status == "interrupted"


@pytest.mark.quiet
@pytest.mark.parametrize("engine", ["transformers", "static"])
def test_a_closed_loop_whose_requests_cannot_finish_ends_at_its_drain_with_its_cut_share(tiny, engine):
    """Issue 41's closed loop that ran for minutes past its 20 s: here two requests of 2,000 tokens, 0.5 s of sending
    and 0.5 s of drain. Each stage ends at its bound, its requests cut (not failed) with every token they had, and
    the engine serves the next stage."""
    spec = make_spec(engine=engine, transformers={"block_size": 16, "num_blocks": 128, "max_batch_tokens": 128},
                     workload={"arrivals": {"profile": "sweep", "over": "concurrent", "values": [2, 2]},
                               "stop": {"duration_s": 0.5, "drain_s": 0.5},
                               "output_tokens": {"dist": "fixed", "value": 2000}})
    started = time.monotonic()
    outcome = run(spec, loaded=tiny)
    assert time.monotonic() - started < 30  # 2,000 tokens a request take far longer
    assert outcome.status == "succeeded"
    for stage, summary in zip(outcome.stages, outcome.summaries()):
        assert stage.status == "succeeded" and stage.end_s is not None
        stopped, bound = stage.drain
        assert bound == 0.5 and stopped - stage.start_s == pytest.approx(0.5, abs=0.3)
        assert stage.end_s - stopped == pytest.approx(0.5, abs=0.3)
        cut = [r for r in stage.records if r.cut]
        assert len(cut) == 2 and all(r.output_tokens > 0 for r in cut)
        for r in cut:  # nothing produced before the cut is lost: tokens up to it, each with its id
            assert len(r.token_ids) == r.output_tokens == len(r.arrival_s)
            assert stage.end_s - r.arrival_s[-1] < 0.5
        assert summary.requests == 0 and summary.errors == 0 and summary.cut == 2 and summary.cut_share == 1.0
        assert summary.output_tokens == sum(r.output_tokens for r in cut)  # the window's tokens, the cut ones' too
        assert summary.duration_s == pytest.approx(stage.end_s - stage.start_s, abs=0.3)
        assert summary.drain_bound_s == 0.5 and summary.drain_s == pytest.approx(0.5, abs=0.3)
        assert summary.valid is False and [i.check for i in summary.invalid] == ["cut"]
        assert summary.invalid[0].message.startswith(
            "2 of 2 measured requests (100.0%) were still in flight when the stage's drain of 0.5 s ended and were "
            "cut, over 1%: the longest requests are those cut, so the completed ones lean short")
