"""openai specs: bad ones named by field, runs through the daemon with paths under the roots, and the GenAI client
metrics and span attributes of a server measured from outside."""

import itertools
import os

import pytest

from benchd.daemon.inprocess import run_local as run
from benchd.spec import SpecError, parse_spec
from benchd.telemetry.run import Telemetry
from benchd.telemetry.tracing import build_tracer_provider
from tests.engines.openai.helpers import openai_spec, records
from tests.helpers import daemon
from tests.openai_server import OpenAIServer
from tests.otlp import HTTPReceiver

pytestmark = pytest.mark.timeout(300)


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
    from tests.telemetry.helpers import (
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
    # Four requests of chunks of 3, 3 and 1 tokens, 2 ms apart: each arrival holds one chunk, or two read at once (a
    # loaded machine's client found two in one read, stamped together as it saw them).
    assert len(records(chunked)) == 4
    for record in records(chunked):
        assert set(itertools.accumulate(record.arrival_tokens)) <= {3, 6, 7} and sum(record.arrival_tokens) == 7
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
