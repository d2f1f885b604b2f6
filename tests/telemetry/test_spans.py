"""OpenTelemetry spans of real runs of the tiny model, to an OTLP receiver: a run's span and its requests', errors,
a dead collector, the OTEL_* variables."""

import time

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from benchd.daemon.inprocess import run_local as run
from benchd.telemetry.tracing import build_tracer_provider
from tests.helpers import free_port, make_spec
from tests.otlp import GRPCReceiver, HTTPReceiver
from tests.telemetry.helpers import attributes, traced_run, value


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_spans_reach_an_otlp_receiver(tiny, registry, otlp_env, protocol):
    receiver_type = HTTPReceiver if protocol == "http/protobuf" else GRPCReceiver
    with receiver_type() as receiver:
        otlp_env(receiver.endpoint, protocol)
        outcome, _ = traced_run(tiny, make_spec(workload={"stop": {"requests": 6}}), registry)
        spans = receiver.wait_for_spans(7)
    assert len(spans) == 7  # one per request and the run's
    assert receiver.resource_attributes()["service.name"] == "benchd-test"
    (run_span,) = [s for s in spans if s.name == "benchd.run test"]
    requests = [s for s in spans if s is not run_span]
    assert run_span.parent_span_id == b""
    assert all(s.parent_span_id == run_span.span_id and s.trace_id == run_span.trace_id for s in requests)
    assert outcome.metadata.trace_id == run_span.trace_id.hex()
    records = {r.index: r for r in outcome.stages[0].records}
    for span in requests:
        attrs = attributes(span)
        record = records[attrs["benchd.request.index"]]
        assert span.name == "text_completion tiny"
        assert attrs["gen_ai.operation.name"] == "text_completion"
        assert attrs["gen_ai.provider.name"] == "transformers" and attrs["gen_ai.request.stream"] is True
        assert "server.address" not in attrs  # an engine in benchd's own worker: no server to name
        assert attrs["gen_ai.request.model"] == "tiny"
        assert attrs["gen_ai.response.time_to_first_chunk"] == record.ttft_s
        assert attrs["gen_ai.request.max_tokens"] == record.max_new_tokens
        assert attrs["gen_ai.usage.input_tokens"] == record.prompt_tokens
        assert attrs["gen_ai.usage.output_tokens"] == record.output_tokens
        assert attrs["benchd.ttft_s"] == record.ttft_s and attrs["benchd.e2e_s"] == record.e2e_s
        assert record.trace_id == span.trace_id.hex()
        (event,) = span.events
        assert event.name == "gen_ai.first_token"
        assert (event.time_unix_nano - span.start_time_unix_nano) / 1e9 == pytest.approx(record.ttft_s, abs=1e-6)
        assert (span.end_time_unix_nano - span.start_time_unix_nano) / 1e9 == pytest.approx(record.e2e_s, abs=1e-6)
        assert span.status.code == 0  # unset: no error
    om = {f.name: f for f in parse_openmetrics(generate_openmetrics(registry).decode())}
    traced = {s.exemplar.labels["trace_id"] for s in om["benchd_time_to_first_token_seconds"].samples if s.exemplar}
    assert traced == {run_span.trace_id.hex()}


def test_errors_set_the_span_status(tiny, registry, otlp_env):
    def fault(module, args):
        raise RuntimeError("injected fault")

    hook = tiny.model.model.layers[0].register_forward_pre_hook(fault)
    try:
        with HTTPReceiver() as receiver:
            otlp_env(receiver.endpoint)
            outcome, _ = traced_run(tiny, make_spec(workload={"stop": {"requests": 2}}), registry)
            spans = receiver.wait_for_spans(3)
    finally:
        hook.remove()
    assert outcome.status == "failed"
    by_name = {s.name: s for s in spans}
    assert by_name["benchd.run test"].status.code == 2  # ERROR
    requests = [s for s in spans if s.name.startswith("text_completion")]
    assert all(s.status.code == 2 and "injected fault" in s.status.message for s in requests)
    assert value(registry, "benchd_requests_total", outcome="error") == 2


@pytest.mark.quiet
def test_a_dead_or_slow_collector_never_slows_a_run(tiny, registry, otlp_env):
    spec = make_spec(workload={"stop": {"requests": 24}})
    baseline = time.monotonic()
    run(spec, loaded=tiny)
    untraced = time.monotonic() - baseline

    # Metrics leave every 50 ms: exports fail (or wait on the slow collector) all through the run.
    otlp_env(f"http://127.0.0.1:{free_port()}", OTEL_EXPORTER_OTLP_TIMEOUT="1", OTEL_BSP_SCHEDULE_DELAY="50",
             OTEL_METRIC_EXPORT_INTERVAL="50")
    dropped, shutdowns = [], []
    outcome, closed_port = traced_run(tiny, spec, registry, dropped, shutdowns)
    assert outcome.status == "succeeded"
    assert closed_port < 1.5 * untraced + 0.5, (closed_port, untraced)
    assert sum(n for reason, n in dropped if reason == "export_failed") == 25  # every span, counted

    with HTTPReceiver(delay_s=3) as slow:
        otlp_env(slow.endpoint, OTEL_EXPORTER_OTLP_TIMEOUT="1", OTEL_METRIC_EXPORT_INTERVAL="50")
        outcome, slow_collector = traced_run(tiny, spec, CollectorRegistry(), shutdown_s=shutdowns)
    assert outcome.status == "succeeded"
    assert slow_collector < 1.5 * untraced + 0.5, (slow_collector, untraced)
    assert max(shutdowns) < 5.5, shutdowns  # the last flush of spans and metrics is bounded (5 s)


def test_tracing_is_off_without_an_endpoint(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert build_tracer_provider(lambda reason, n: None) is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert build_tracer_provider(lambda reason, n: None) is None


def test_unknown_protocol_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_PROTOCOL"):
        build_tracer_provider(lambda reason, n: None)
