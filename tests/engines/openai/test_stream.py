"""The openai engine against a small server whose behaviour the tests choose: per-token counts, chunks, first tokens,
failures, stalls, open-loop dispatch, keys, cancelling, a stage cut at its drain, nothing listening."""

import itertools
import time

import pytest
from prometheus_client import CollectorRegistry

from benchd.daemon.inprocess import run_local as run
from benchd.stopping import StopSignal
from benchd.telemetry.metrics import Metrics
from benchd.telemetry.run import Telemetry
from benchd.telemetry.tracing import build_tracer_provider
from tests.engines.openai.helpers import openai_spec, records
from tests.helpers import free_port
from tests.openai_server import OpenAIServer
from tests.otlp import HTTPReceiver

pytestmark = pytest.mark.timeout(300)

# ---- the controlled server ---------------------------------------------------------------------


def test_running_usage_gives_live_per_token_counts(server, prompts):
    registry = CollectorRegistry()
    spec = openai_spec(server.base_url, prompts=prompts,
                       stream_options={"include_usage": True, "continuous_usage_stats": True})
    outcome = run(spec, telemetry=Telemetry(Metrics(registry)))
    assert outcome.status == "succeeded"
    for record in records(outcome):
        assert record.arrival_tokens == [1] * 7 and record.error is None
    labels = {"model": "ok", "engine": "openai", "workload": "oa", "gpu": ""}
    assert registry.get_sample_value("benchd_inter_token_latency_seconds_count", labels) == 4 * 6
    assert registry.get_sample_value("benchd_generation_tokens_total", labels) == 28
    body = server.bodies[-1]
    assert body["stream"] is True and body["max_tokens"] == 7 and body["model"] == "ok"
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


def test_chunks_of_several_tokens_count_as_several_gaps(server, prompts):
    outcome = run(openai_spec(server.base_url, model="chunks-3", prompts=prompts))
    for record in records(outcome):
        assert record.arrival_tokens == [3, 3, 1]  # the final usage (7) spread over the chunks by their text
        gaps = record.itl_s()
        stamps = record.arrival_s
        assert gaps == pytest.approx([(stamps[1] - stamps[0]) / 3] * 3 + [stamps[2] - stamps[1]])
        assert record.tpot_s == pytest.approx((stamps[-1] - stamps[0]) / 6)


@pytest.mark.parametrize("usage", ["running", "final"])
def test_chunks_read_together_are_one_arrival(server, prompts, usage):
    # Two chunks a write: stamped apart, the first would carry the whole gap and the second a gap of zero.
    options = {"include_usage": True, "continuous_usage_stats": usage == "running"}
    outcome = run(openai_spec(server.base_url, model="pairs", prompts=prompts, stream_options=options))
    for record in records(outcome):
        # [2, 2, 2, 1], or fewer arrivals where a busy client read two writes at once: never a chunk on its own
        counts, stamps = record.arrival_tokens, record.arrival_s
        assert record.error is None and sum(counts) == 7 and all(k % 2 == 0 for k in counts[:-1]) and counts[-1] % 2
        assert all(b > a for a, b in itertools.pairwise(stamps))
        expected = [(b - a) / k for a, b, k in zip(stamps, stamps[1:], counts[1:]) for _ in range(k)]
        assert record.itl_s() == pytest.approx(expected) and min(record.itl_s()) > 0


def test_token_ids_in_chat_chunks(server, prompts):
    outcome = run(openai_spec(server.base_url, model="ids-2", api="chat", prompts=prompts))
    assert [r.arrival_tokens for r in records(outcome)] == [[2, 2, 2, 1]] * 4
    assert "messages" in server.bodies[-1] and server.bodies[-1]["messages"][0]["role"] == "user"


def test_role_only_and_empty_chunks_are_not_the_first_token(prompts):
    with OpenAIServer(delay_s=0.05) as slow:  # the role and empty chunks come at once, content 50 ms later
        outcome = run(openai_spec(slow.base_url, model="role-first", api="chat", requests=2, output=3,
                                  prompts=prompts))
    for record in records(outcome):
        assert record.arrival_tokens == [1, 1, 1]
        assert record.ttft_s >= 0.05


def test_failures_are_recorded_by_type_and_the_run_goes_on(server, prompts, monkeypatch):
    registry = CollectorRegistry()
    with HTTPReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        telemetry = Telemetry(Metrics(registry), build_tracer_provider(lambda *_: None))
        spec = openai_spec(server.base_url, model="mixed", prompts=prompts, requests=8,
                           arrivals={"profile": "synchronous"})
        outcome = run(spec, telemetry=telemetry)
        telemetry.shutdown()
        spans = receiver.wait_for_spans(9)
    assert outcome.status == "succeeded"
    errors = [r.error for r in records(outcome)]
    assert errors[0::4] == [None, None]
    assert all(e.startswith("http_500: ") and "on fire" in e for e in errors[1::4])
    assert all(e.startswith("disconnected: ") for e in errors[2::4])
    assert all(e.startswith("malformed_chunk: ") for e in errors[3::4])
    disconnected = records(outcome)[2]
    assert disconnected.output_tokens == 2  # what arrived before the drop is kept
    summary = outcome.summaries()[0]
    assert (summary.requests, summary.errors) == (2, 6)
    labels = {"model": "mixed", "engine": "openai", "workload": "oa", "gpu": ""}
    for kind in ("http_500", "disconnected", "malformed_chunk"):
        assert registry.get_sample_value("benchd_request_errors_total", {**labels, "error_type": kind}) == 2
    types = sorted(a.value.string_value for s in spans for a in s.attributes if a.key == "error.type")
    assert types == ["disconnected"] * 2 + ["http_500"] * 2 + ["malformed_chunk"] * 2


def test_a_stall_past_the_timeout_and_an_error_event(server, prompts):
    started = time.monotonic()
    stalled = run(openai_spec(server.base_url, model="stall", prompts=prompts, requests=2, stall_timeout_s=0.3))
    assert time.monotonic() - started < 20
    assert stalled.status == "failed"  # every measured request failed
    for record in records(stalled):
        assert record.error == "timeout: no data for 0.3 s" and record.output_tokens == 1
    event = run(openai_spec(server.base_url, model="error-event", prompts=prompts, requests=2))
    assert [r.error for r in records(event)] == ["server_error: out of KV cache"] * 2


@pytest.mark.quiet
def test_open_loop_requests_leave_at_their_scheduled_time(server, prompts):
    spec = openai_spec(server.base_url, prompts=prompts, requests=40, output=3,
                       arrivals={"profile": "constant", "rate": 50})
    outcome = run(spec)
    lags = [r.dispatch_lag_s for r in records(outcome)]
    assert min(lags) >= -1e-6  # never early: the engine sends at the scheduled time, not when handed over
    assert sorted(lags)[int(0.9 * len(lags))] < 0.02
    sent = server.received[-40:]
    scheduled = [r.scheduled_s for r in records(outcome)]
    gaps = sorted(b - a for a, b in itertools.pairwise(sent))
    assert gaps[len(gaps) // 2] == pytest.approx(0.02, abs=0.003)  # the server saw them 1/rate apart
    assert all(s >= t - 1e-6 for s, t in zip(sent, scheduled))


def test_api_key_and_extra_body(server, prompts, monkeypatch):
    monkeypatch.setenv("OPENAI_TEST_KEY", "sk-test-123")
    run(openai_spec(server.base_url, prompts=prompts, requests=1, api_key_env="OPENAI_TEST_KEY",
                    extra_body={"ignore_eos": True, "temperature": 0}))
    assert server.headers[-1]["authorization"] == "Bearer sk-test-123"
    assert server.bodies[-1]["ignore_eos"] is True and server.bodies[-1]["temperature"] == 0


def test_cancelling_ends_requests_in_flight(server, prompts):
    import threading

    stop, before, stopped = StopSignal(), len(server.received), []

    def cancel_once_stalled() -> None:
        # Once the server has both requests, a second more: their first chunks have reached the client, which then
        # waits on the stall, 60 s from timing out (a fixed second from the start fell before the first chunk on a
        # loaded machine).
        deadline = time.monotonic() + 60
        while len(server.received) < before + 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(1.0)
        stopped.append(time.monotonic())
        stop.set("cancelled")

    spec = openai_spec(server.base_url, model="stall", prompts=prompts, requests=50, stall_timeout_s=60)
    canceller = threading.Thread(target=cancel_once_stalled)
    canceller.start()
    outcome = run(spec, stop=stop)
    canceller.join()
    assert time.monotonic() - stopped[0] < 10
    assert outcome.status == "cancelled"
    stalled = records(outcome)
    assert len(stalled) == 2 and all(r.error == "cancelled" and r.output_tokens == 1 for r in stalled)


@pytest.mark.quiet
@pytest.mark.parametrize("model", ["ok", "chunks-3"])
def test_a_stage_cut_at_its_drain_keeps_every_chunk_its_requests_had(server, prompts, model):
    """Requests of 2,000 tokens at 5 ms a token cannot finish in a stage of 0.5 s with 0.5 s of drain: each is cut
    there, its client's chunks up to the cut kept (those counted only by a final usage that never comes, by their
    text), and the stage ends at its bound."""
    spec = openai_spec(server.base_url, model=model, prompts=prompts, output=2000,
                       stop={"duration_s": 0.5, "drain_s": 0.5})
    started = time.monotonic()
    outcome = run(spec)
    assert time.monotonic() - started < 20
    assert outcome.status == "succeeded", outcome.error
    stage, summary = outcome.stages[0], outcome.summaries()[0]
    cut = [r for r in stage.records if r.cut]
    assert len(cut) == 2 and summary.cut == 2 and summary.errors == 0
    assert all(r.output_tokens > 10 and stage.end_s - r.arrival_s[-1] < 0.5 for r in cut)
    assert summary.output_tokens == sum(r.output_tokens for r in stage.records if not r.warmup)
    assert stage.end_s - stage.drain[0] == pytest.approx(0.5, abs=0.3)
    assert [i.check for i in summary.invalid] == ["cut"]


def test_nothing_listening_fails_the_run_clearly(prompts):
    outcome = run(openai_spec(f"http://127.0.0.1:{free_port()}/v1", prompts=prompts, connect_timeout_s=2))
    assert outcome.status == "failed" and "openai.base_url: nothing answers at" in outcome.error
