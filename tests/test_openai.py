"""The openai engine against a real `transformers serve` and against a small server whose behaviour the tests
choose: per-token counts, first tokens, failures, open-loop dispatch, prompts and validation."""

import itertools
import json
import os
import socket
import subprocess
import sys
import time

import pytest
from prometheus_client import CollectorRegistry

from benchd.daemon.inprocess import run_local as run
from benchd.engines.openai.counts import chunk_counts, text_counts
from benchd.engines.openai.engine import OpenAIEngine, apportion
from benchd.loadgen.contents import clean_ids, read_dataset, sized_text, text_contents
from benchd.models.tokenizer import load_tokenizer
from benchd.spec import SpecError, TextDataset, parse_spec
from benchd.stopping import StopSignal
from benchd.telemetry.metrics import Metrics
from benchd.telemetry.run import Telemetry
from benchd.telemetry.tracing import build_tracer_provider
from tests.helpers import daemon, free_port, wait_for
from tests.openai_server import OpenAIServer
from tests.otlp import HTTPReceiver

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def server():
    with OpenAIServer(delay_s=0.005) as s:
        yield s


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"prompt {i}"}) + "\n" for i in range(5)) + '"a bare string"\n')
    return str(path)


def openai_spec(base_url, model="ok", api="completions", requests=4, output=7, prompts=None, tokenizer=None,
                arrivals=None, stop=None, **openai):
    workload = {"arrivals": arrivals or {"profile": "concurrent", "concurrency": 2},
                "stop": stop or {"requests": requests},
                "output_tokens": {"dist": "fixed", "value": output}}
    if prompts is not None:
        workload["dataset"] = {"format": "jsonl", "path": prompts}
    else:
        workload["prompt_tokens"] = {"dist": "fixed", "value": 12}
    return parse_spec({"name": "oa", "engine": "openai", "model": model, "workload": workload,
                       "openai": {"base_url": base_url, "api": api, "tokenizer": tokenizer, **openai}})


def records(outcome):
    return sorted(outcome.stages[0].records, key=lambda r: r.index)


# ---- a real transformers serve -----------------------------------------------------------------


@pytest.fixture(scope="module")
def transformers_serve(served_dir):
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    process = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "transformers"), "serve", str(served_dir), "--host",
         "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype", "float32"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def listening():
        if process.poll() is not None:
            raise RuntimeError(f"transformers serve exited: {process.stderr.read()[-2000:]}")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_for(listening, 120, "transformers serve to listen")
    yield f"http://127.0.0.1:{port}/v1", str(served_dir)
    process.terminate()
    process.wait(30)


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_transformers_serve_exact_counts(transformers_serve, api):
    base_url, path = transformers_serve
    spec = openai_spec(base_url, model=path, api=api, requests=4, output=8, tokenizer=path)
    outcome = run(spec)
    assert outcome.status == "succeeded", outcome.error
    summary = outcome.summaries()[0]
    assert summary.requests == 4 and summary.errors == 0, [r.error for r in records(outcome)]
    for record in records(outcome):
        # The server's own usage: exactly the requested output, and (completions) exactly the sized prompt.
        assert record.output_tokens == 8, record.arrival_tokens
        assert all(n >= 1 for n in record.arrival_tokens)
        if api == "completions":
            assert record.prompt_tokens == 12
        else:
            assert record.prompt_tokens > 12  # the chat template's tokens, as the server counted them
        assert 0 < record.ttft_s <= record.e2e_s < 60
        # 0 when every chunk was already waiting in one socket read (a loaded machine): stamps are arrivals
        assert record.tpot_s >= 0 and record.dispatch_lag_s < 0.5
        assert len(record.itl_s()) == 8 - record.arrival_tokens[0]
    assert summary.output_tokens == 32 and summary.itl_s.count > 0
    assert outcome.metadata.device == "remote" and outcome.metadata.device_name == base_url


def test_transformers_serve_exposes_no_metrics_and_the_run_says_so(transformers_serve):
    """transformers serve (5.17) has no /metrics route: every read is a 404, counted; the run succeeds with a
    warning and no server series."""
    base_url, path = transformers_serve
    metrics_url = base_url.removesuffix("/v1") + "/metrics"
    outcome = run(openai_spec(base_url, model=path, requests=2, output=4, tokenizer=path, metrics_url=metrics_url,
                              metrics_interval_s=0.2))
    assert outcome.status == "succeeded", outcome.error
    assert outcome.summaries()[0].errors == 0
    server = outcome.timeline["server"]
    assert server["scrapes"] == 0 and server["failures"] >= 1 and server["t"] == []
    assert "HTTP 404 Not Found: the server exposes no Prometheus metrics there" in server["warning"]


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

    stop = StopSignal()
    timer = threading.Timer(1.0, stop.set, ["cancelled"])  # the requests are stalled by then, 60 s from timing out
    spec = openai_spec(server.base_url, model="stall", prompts=prompts, requests=50, stall_timeout_s=60)
    started = time.monotonic()
    timer.start()
    outcome = run(spec, stop=stop)
    assert time.monotonic() - started < 10
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


# ---- prompts -----------------------------------------------------------------------------------


def test_synthetic_prompts_have_exactly_the_sampled_length(served_dir):
    import random

    tokenizer = load_tokenizer(str(served_dir))
    allowed = clean_ids(tokenizer)
    rng = random.Random(0)
    for n in (1, 2, 5, 12, 37, 256, 1000) * 3:
        text, count = sized_text(tokenizer, rng, allowed, n)
        assert count == n and len(tokenizer.encode(text, add_special_tokens=False)) == n


def test_datasets_are_read_and_sampled_with_the_seed(tmp_path, prompts, served_dir):
    assert read_dataset(TextDataset(format="jsonl", path=prompts))[-1] == "a bare string"
    sharegpt = tmp_path / "sharegpt.json"
    sharegpt.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": "first question"}, {"from": "gpt", "value": "answer"}]},
        {"conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "second"}]},
        {"conversations": [{"from": "gpt", "value": "no human turn"}]},
    ]))
    assert read_dataset(TextDataset(format="sharegpt", path=str(sharegpt))) == ["first question", "second"]
    spec = openai_spec("http://127.0.0.1:1/v1", prompts=prompts)
    first = [c.prompt_text for c, _ in zip(text_contents(spec.workload, 7), range(12))]
    again = [c.prompt_text for c, _ in zip(text_contents(spec.workload, 7), range(12))]
    other = [c.prompt_text for c, _ in zip(text_contents(spec.workload, 8), range(12))]
    assert first == again and first != other
    assert sorted(first[:6]) == sorted(first[6:]) and len(set(first[:6])) == 6  # each once before repeats
    # With a tokenizer, the same order, each prompt's count the tokenizer's own (counted together, up front)
    tokenizer = load_tokenizer(str(served_dir))
    counted = [c for c, _ in zip(text_contents(spec.workload, 7, tokenizer), range(12))]
    assert [c.prompt_text for c in counted] == first
    assert [c.text_tokens for c in counted] == [len(tokenizer.encode(c.prompt_text, add_special_tokens=False))
                                                for c in counted]
    assert all(c.text_tokens > 1 for c in counted)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "no prompt key"}\n')
    with pytest.raises(SpecError, match="workload.dataset.field: .* line 1 has no string 'prompt'"):
        read_dataset(TextDataset(format="jsonl", path=str(bad)))


@pytest.mark.parametrize("shape", ["split", "length", "until-close"])
def test_response_framings_and_reads_cut_anywhere(server, prompts, shape):
    outcome = run(openai_spec(server.base_url, model=shape, prompts=prompts, requests=4, output=5))
    assert outcome.status == "succeeded", outcome.error
    for record in records(outcome):
        assert record.error is None and record.output_tokens == 5
        if shape == "split":  # chunks are stamped by the read that completed them (two in one read: one arrival)
            assert sum(record.arrival_tokens) == 5 and len(record.arrival_tokens) > 1
            assert all(b > a for a, b in zip(record.arrival_s, record.arrival_s[1:]))


def test_traceparent_names_the_request_span_the_otlp_receiver_gets(server, prompts, monkeypatch):
    with HTTPReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        telemetry = Telemetry(None, build_tracer_provider(lambda *_: None))
        before = len(server.headers)
        outcome = run(openai_spec(server.base_url, prompts=prompts, requests=3), telemetry=telemetry)
        telemetry.shutdown()
        spans = receiver.wait_for_spans(4)
    sent = [h["traceparent"] for h in server.headers[before:]]
    assert len(sent) == 3
    run_span = next(s for s in spans if s.name.startswith("benchd.run"))
    by_id = {s.span_id.hex(): s for s in spans}
    for header, record in zip(sorted(sent), sorted(records(outcome), key=lambda r: r.span_id)):
        version, trace_id, span_id, flags = header.split("-")
        assert (version, flags) == ("00", "01") and len(span_id) == 16
        assert span_id == record.span_id and trace_id == record.trace_id == outcome.metadata.trace_id
        span = by_id[span_id]  # the exported request span has the id the server was told
        assert span.trace_id.hex() == trace_id and span.parent_span_id == run_span.span_id
        assert span.name == "text_completion ok"


def test_no_traceparent_when_the_run_is_not_traced(server, prompts):
    before = len(server.headers)
    run(openai_spec(server.base_url, prompts=prompts, requests=2))
    assert all("traceparent" not in h for h in server.headers[before:])


@pytest.mark.quiet
def test_several_client_processes_share_the_schedule(server, prompts):
    spec = openai_spec(server.base_url, prompts=prompts, requests=30, output=3, client_processes=3,
                       arrivals={"profile": "constant", "rate": 100})
    outcome = run(spec)
    assert outcome.status == "succeeded" and outcome.metadata.engine_settings["client_processes"] == 3
    got = records(outcome)
    assert len(got) == 30 and all(r.error is None and r.output_tokens == 3 for r in got)
    lags = sorted(r.dispatch_lag_s for r in got)
    assert lags[0] >= -1e-6 and lags[len(lags) // 2] < 0.005  # stamps of other processes, on the same clock
    assert all(r.submitted_s <= r.admitted_s <= r.arrival_s[0] <= r.finished_s for r in got)


def test_a_client_process_that_dies_ends_its_requests(server, prompts):
    spec = openai_spec(server.base_url, model="stall", prompts=prompts, requests=2, stall_timeout_s=60)
    engine = OpenAIEngine(spec.openai, spec.workload, spec.model)
    engine.start()
    done = []

    class Sink:
        def __getattr__(self, name):
            return lambda *args: done.append((name, args))

    from benchd.engines import GenerationRequest

    engine.submit(GenerationRequest("r0", [], 4, "hello"), Sink(), at=time.perf_counter())
    wait_for(lambda: any(name == "admitted" for name, _ in done), 10, "the server to answer")
    engine._clients[0].process.kill()
    wait_for(lambda: any(name == "finished" for name, _ in done), 10, "the request to end")
    finished = [args for name, args in done if name == "finished"]
    assert finished[0][0] == "r0" and finished[0][2] == "client_error: the client process exited"
    assert not engine.alive()
    engine.stop()


def test_chunk_counts_from_the_whole_text(served_dir):
    tokenizer = load_tokenizer(str(served_dir))
    texts = ["hello wor", "ld this is", " a te", "st"]
    counts = text_counts(tokenizer, texts)
    assert sum(counts) == len(tokenizer.encode("".join(texts), add_special_tokens=False))
    # each token is counted where its last character arrived: the prefix up to a boundary holds that many
    for i in range(1, len(texts) + 1):
        prefix = tokenizer("".join(texts), add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        boundary = sum(len(t) for t in texts[:i])
        assert sum(counts[:i]) == sum(1 for _, end in prefix if end <= boundary)
    assert chunk_counts(["x"] * 5, [None] * 5, 5, tokenizer) == [1] * 5  # a token a chunk needs no tokenizer
    assert chunk_counts(texts, [None, 2, None, None], 40, tokenizer)[1] > 2  # scaled up to the final count
    assert sum(chunk_counts(texts, [None] * 4, 40, tokenizer)) == 40
    assert chunk_counts(texts, [None] * 4, None, None) == [1, 1, 1, 1]


def test_apportion_keeps_the_total_and_a_token_per_chunk():
    assert apportion([3, 3, 1], 7) == [3, 3, 1]
    assert apportion([1, 1, 1], 5) in ([2, 2, 1], [2, 1, 2], [1, 2, 2])
    assert sum(apportion([10, 1, 4, 2], 40)) == 40 and min(apportion([10, 1, 4, 2], 40)) >= 1


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"engine": "openai"}, "openai.tokenizer: synthetic prompts are sized in tokens"),
        ({"workload": {"dataset": {"format": "jsonl", "path": "/x"}}},
         "workload.dataset: text datasets are read by the openai engine only"),
        ({"engine": "openai", "openai": {"tokenizer": "/x", "extra_body": {"stream": False}}},
         "openai: extra_body: stream set by benchd itself"),
        ({"engine": "openai", "openai": {"tokenizer": "/x", "base_url": "localhost:8000"}},
         "openai.base_url: String should match pattern"),
        ({"engine": "openai", "openai": {"tokenizer": "/x", "api": "responses"}},
         "openai.api: Input should be 'completions' or 'chat'"),
    ],
)
def test_bad_openai_specs_name_the_field(data, message):
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    assert message in str(info.value)


def test_daemon_runs_openai_specs_and_guards_paths(tmp_path, server, prompts):
    root = os.path.dirname(prompts)
    with daemon(tmp_path, model_roots=[root]) as live:
        live.wait_ready()
        body = {"name": "remote", "engine": "openai", "model": "ok",
                "openai": {"base_url": server.base_url},
                "workload": {"stop": {"requests": 3}, "dataset": {"format": "jsonl", "path": prompts},
                             "output_tokens": {"dist": "fixed", "value": 4}}}
        created = live.http.post("/runs", json=body)
        assert created.status_code == 202, created.text
        run_row = live.wait_status(created.json()["id"], "succeeded", "failed")
        assert run_row["status"] == "succeeded" and run_row["engine"] == "openai"
        assert run_row["summary"][0]["output_tokens"] == 12
        outside = {**body, "workload": {**body["workload"], "dataset": {"format": "jsonl", "path": "/etc/passwd"}}}
        refused = live.http.post("/runs", json=outside)
        assert refused.status_code == 422
        assert refused.json()["detail"][0]["loc"] == ["body", "workload", "dataset", "path"]


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_genai_client_metrics_and_span_attributes(prompts, monkeypatch, api):
    """A server measured from outside: the conventions' client histograms (names, units, buckets, attributes with
    the server's address) over OTLP, holding exactly the runs' records, and request spans that name the operation,
    the provider and the server."""
    from benchd.telemetry.genai import build_genai_metrics
    from tests.test_telemetry import (
        SEMCONV_DURATION,
        SEMCONV_TOKENS,
        check_histogram,
        latest_metrics,
        point_attributes,
    )

    operation = "chat" if api == "chat" else "text_completion"
    with OpenAIServer(delay_s=0.002) as server, HTTPReceiver() as receiver:  # its own: "mixed" cycles per server
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        telemetry = Telemetry(None, build_tracer_provider(lambda *_: None), build_genai_metrics())
        chunked = run(openai_spec(server.base_url, model="chunks-3", api=api, prompts=prompts), telemetry=telemetry)
        mixed = run(openai_spec(server.base_url, model="mixed", api=api, prompts=prompts, requests=8,
                                arrivals={"profile": "synchronous"}), telemetry=telemetry)
        telemetry.shutdown()
        metrics = latest_metrics(receiver)
        spans = receiver.wait_for_spans(14)
        port = server.port
    assert set(metrics) == {"gen_ai.client.operation.duration", "gen_ai.client.token.usage",
                            "gen_ai.client.operation.time_to_first_chunk",
                            "gen_ai.client.operation.time_per_output_chunk"}  # no server metrics from outside
    for outcome, model in ((chunked, "chunks-3"), (mixed, "mixed")):
        attributes = {"gen_ai.operation.name": operation, "gen_ai.provider.name": "openai",
                      "gen_ai.request.model": model, "server.address": "127.0.0.1", "server.port": port}
        measured = records(outcome)
        good = [r for r in measured if r.ok]
        answered = [r for r in measured if r.arrival_s]  # observed live, as Prometheus' TTFT is
        chunks = [r.arrival_s[i] - r.arrival_s[i - 1] for r in answered for i in range(1, len(r.arrival_s))]
        check_histogram(metrics["gen_ai.client.operation.time_to_first_chunk"], "s", SEMCONV_DURATION,
                        [r.ttft_s for r in answered], attributes)
        check_histogram(metrics["gen_ai.client.operation.time_per_output_chunk"], "s", SEMCONV_DURATION, chunks,
                        attributes)
        check_histogram(metrics["gen_ai.client.operation.duration"], "s", SEMCONV_DURATION,
                        [r.e2e_s for r in good], attributes)
        for kind, tokens in (("input", [r.prompt_tokens for r in good]), ("output", [r.output_tokens for r in good])):
            check_histogram(metrics["gen_ai.client.token.usage"], "{token}", SEMCONV_TOKENS, tokens,
                            {**attributes, "gen_ai.token.type": kind})
    assert len([c for r in records(chunked) for c in r.arrival_tokens]) == 4 * 3  # chunks of 3, 3 and 1 tokens
    failed = {}
    for point in metrics["gen_ai.client.operation.duration"].histogram.data_points:
        if "error.type" in (attributes := point_attributes(point)):
            failed[attributes["error.type"]] = point.count
    assert failed == {"http_500": 2, "disconnected": 2, "malformed_chunk": 2}
    requests = [s for s in spans if not s.name.startswith("benchd.run")]
    assert {s.name for s in requests} == {f"{operation} chunks-3", f"{operation} mixed"}
    for span in requests:
        attributes = {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in span.attributes}
        assert attributes["gen_ai.operation.name"] == operation and attributes["gen_ai.provider.name"] == "openai"
        assert (attributes["server.address"], attributes["server.port"]) == ("127.0.0.1", port)
        assert attributes["gen_ai.request.stream"] is True
