"""Prometheus instruments and OpenTelemetry spans on real runs of the tiny model."""

import itertools
import platform
import subprocess
import threading
import time

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from benchd.daemon.inprocess import run_local as run
from benchd.daemon.settings import Settings
from benchd.telemetry.genai import build_genai_metrics
from benchd.telemetry.metrics import LAG_BUCKETS, REQUEST_BUCKETS, TOKEN_BUCKETS, Metrics
from benchd.telemetry.run import Telemetry
from benchd.telemetry.tracing import build_tracer_provider
from tests.helpers import NODE, daemon, free_port, make_spec, serve, spec, submit, wait_for
from tests.otlp import GRPCReceiver, HTTPReceiver

# The GenAI semantic conventions' recommended buckets (docs/gen-ai/gen-ai-metrics.md of
# open-telemetry/semantic-conventions v1.56.0, the same in open-telemetry/semantic-conventions-genai now), written
# out here, not imported: the test checks the module.
SEMCONV_DURATION = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
SEMCONV_TOKENS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]
SEMCONV_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
SEMCONV_TPOT = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]

LABELS = {"model": "tiny", "engine": "transformers", "workload": "test", "gpu": ""}


def value(registry, name, **labels):
    return registry.get_sample_value(name, {**LABELS, **labels})


@pytest.fixture
def registry():
    return CollectorRegistry()


def test_histograms_match_the_run_exactly(tiny, registry):
    spec = make_spec(workload={"warmup": {"requests": 3}, "stop": {"requests": 10}})
    outcome = run(spec, loaded=tiny, telemetry=Telemetry(Metrics(registry)))
    s = outcome.summaries()[0]
    measured = [r for r in outcome.stages[0].records if not r.warmup]
    gaps = sum(r.output_tokens - 1 for r in measured)
    for name, stats, count in (
        ("benchd_time_to_first_token_seconds", s.ttft_s, 10),
        ("benchd_inter_token_latency_seconds", s.itl_s, gaps),
        ("benchd_time_per_output_token_seconds", s.tpot_s, s.tpot_s.count),
        ("benchd_request_duration_seconds", s.e2e_s, 10),
        ("benchd_request_queue_seconds", s.queue_s, 10),
        ("benchd_dispatch_lag_seconds", s.dispatch_lag_s, 10),
    ):
        assert value(registry, f"{name}_count") == count == stats.count, name
        assert value(registry, f"{name}_sum") / count == pytest.approx(stats.mean, rel=1e-9), name
        assert value(registry, f"{name}_bucket", le="+Inf") == count
    assert value(registry, "benchd_generation_tokens_total") == s.output_tokens
    assert value(registry, "benchd_prompt_tokens_total") == s.prompt_tokens
    assert value(registry, "benchd_requests_total", outcome="success") == 10
    assert value(registry, "benchd_runs_total", status="succeeded") == 1
    assert value(registry, "benchd_run_in_progress") == 0


def test_buckets_are_fine_and_reach_ten_minutes(tiny, registry):
    for bounds in (REQUEST_BUCKETS, TOKEN_BUCKETS):
        assert any(0.0005 <= b < 0.001 for b in bounds)  # 0.5 ms and 1 ms land in different buckets
    assert REQUEST_BUCKETS[-1] == 600 and LAG_BUCKETS[0] <= 0.00001
    settings = Settings(buckets={"ttft_s": [0.001, 0.01, 1.0]})
    run(make_spec(workload={"stop": {"requests": 2}}), loaded=tiny,
        telemetry=Telemetry(Metrics(registry, settings.buckets)))
    les = {s.labels["le"] for f in registry.collect() if f.name == "benchd_time_to_first_token_seconds"
           for s in f.samples if s.name.endswith("_bucket")}
    assert les == {"0.001", "0.01", "1.0", "+Inf"}
    with pytest.raises(ValueError, match="strictly increasing"):
        Settings(buckets={"itl_s": [0.01, 0.001]})


def test_bucket_boundaries_are_le(registry):
    metrics = Metrics(registry)
    series = metrics.ttft.labels("m", "e", "w")
    for v in (0.0005, 0.0005001, 0.001, 700.0):
        series.observe(v)
    get = lambda le: registry.get_sample_value("benchd_time_to_first_token_seconds_bucket",  # noqa: E731
                                               {"model": "m", "engine": "e", "workload": "w", "le": le})
    assert (get("0.0005"), get("0.00075"), get("0.001"), get("600.0"), get("+Inf")) == (1, 2, 3, 3, 4)


def test_series_stay_bounded_over_many_runs(tiny, registry):
    telemetry = Telemetry(Metrics(registry))
    spec = make_spec(workload={"stop": {"requests": 2}})

    def series():
        return {(s.name, tuple(sorted(s.labels.items()))) for f in registry.collect() for s in f.samples}

    for _ in range(2):
        run(spec, loaded=tiny, telemetry=telemetry)
    before = series()
    for _ in range(10):
        run(spec, loaded=tiny, telemetry=telemetry)
    assert series() == before
    assert not any("run_id" in dict(labels) or "request_id" in dict(labels) for _, labels in before)


def test_series_stay_bounded_whatever_workload_names_clients_send(registry):
    """150 runs, each with its own name: at most max_workloads names keep series; the least recently run go."""
    from benchd.measure.records import RequestRecord

    metrics = Metrics(registry, max_workloads=50)
    telemetry = Telemetry(metrics)
    for i in range(150):
        observer = telemetry.for_run(f"run{i}", "tiny", "transformers", f"workload-{i}")
        observer.run_started(0.0)
        record = RequestRecord(index=0, request_id="r", warmup=False, prompt_tokens=4, max_new_tokens=2,
                               scheduled_s=0.0, submitted_s=0.0, admitted_s=0.001)
        observer.submitted(record)
        observer.admitted(record)
        for t in (0.01, 0.02):
            record.arrival_s.append(t)
            record.arrival_tokens.append(1)
            observer.arrivals(record, len(record.arrival_s) - 1)
        record.finished_s = 0.02
        observer.finished(record)
        observer.run_finished(0.03, "succeeded", None)
    page = generate_latest(registry).decode()
    workloads = {s.labels["workload"] for f in registry.collect() for s in f.samples if "workload" in s.labels}
    assert workloads == {f"workload-{i}" for i in range(100, 150)}
    assert registry.get_sample_value("benchd_series_evicted_total", {"reason": "max_workloads"}) == 100
    assert registry.get_sample_value("benchd_workloads_tracked") == 50
    per_workload = page.count('workload="workload-149"')
    assert len(page.splitlines()) < 60 * (per_workload + 1)


def test_the_daemon_caps_its_workloads(tmp_path):
    with daemon(tmp_path, metrics={"max_workloads": 2}) as server:
        server.wait_ready()
        for name in ("one", "two", "three"):
            server.wait_status(submit(server, spec(requests=1, output=2, name=name)), "succeeded")
        page = server.http.get("/metrics").text
        assert 'workload="one"' not in page and 'workload="two"' in page and 'workload="three"' in page
        assert 'benchd_series_evicted_total{hostname="test-node",reason="max_workloads"} 1.0' in page


def test_gauges_are_live_during_a_run(tiny, registry):
    spec = make_spec(workload={"arrivals": {"profile": "concurrent", "concurrency": 4}, "stop": {"requests": 24},
                               "output_tokens": {"dist": "fixed", "value": 48}})
    thread = threading.Thread(target=run, args=(spec,), kwargs={"loaded": tiny,
                                                                  "telemetry": Telemetry(Metrics(registry))})
    thread.start()
    seen = {"in_progress": 0, "running": 0, "kv": 0, "throughput": 0, "kv_total": 0}
    while thread.is_alive():
        seen["in_progress"] = max(seen["in_progress"], value(registry, "benchd_run_in_progress") or 0)
        seen["running"] = max(seen["running"], value(registry, "benchd_requests_running") or 0)
        seen["kv"] = max(seen["kv"], value(registry, "benchd_kv_cache_usage_ratio") or 0)
        seen["kv_total"] = max(seen["kv_total"], value(registry, "benchd_kv_cache_capacity_blocks") or 0)
        seen["throughput"] = max(seen["throughput"], value(registry, "benchd_run_output_tokens_per_second") or 0)
        time.sleep(0.005)
    thread.join()
    assert seen["in_progress"] == 1 and seen["running"] >= 2 and 0 < seen["kv"] <= 1
    assert seen["kv_total"] == 64 and seen["throughput"] > 0
    assert value(registry, "benchd_run_in_progress") == 0 and value(registry, "benchd_requests_running") == 0
    # After the run: the engine holds no request (its load reads 0, not the last sample's), and the run's throughput
    # so far has no run to describe: its series is gone, so Prometheus marks it stale.
    assert value(registry, "benchd_kv_cache_usage_ratio") == 0 and value(registry, "benchd_kv_cache_used_blocks") == 0
    assert value(registry, "benchd_run_output_tokens_per_second") is None
    assert value(registry, "benchd_kv_cache_capacity_blocks") == 64  # the warm engine's cache, as of its last run


def test_exposition_formats_and_exemplars(tiny, registry):
    run(make_spec(workload={"stop": {"requests": 4}}), loaded=tiny, telemetry=Telemetry(Metrics(registry)))
    classic = generate_latest(registry).decode()
    assert "# EOF" not in classic and "#" not in classic.split("benchd_time_to_first_token_seconds_bucket")[1][:200]
    families = {f.name: f for f in parse_text(classic)}
    assert families["benchd_time_to_first_token_seconds"].type == "histogram"
    om = {f.name: f for f in parse_openmetrics(generate_openmetrics(registry).decode())}
    exemplars = [s.exemplar for s in om["benchd_time_to_first_token_seconds"].samples if s.exemplar]
    assert exemplars and all(len(e.labels["run_id"]) == 32 for e in exemplars)  # untraced: the run id only
    assert "trace_id" not in exemplars[0].labels
    for name in ("benchd_inter_token_latency_seconds", "benchd_request_duration_seconds"):
        assert any(s.exemplar for s in om[name].samples), name
    check = subprocess.run(["promtool", "check", "metrics"], input=classic, capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout + check.stderr == "", check.stdout + check.stderr


# ---- spans ---------------------------------------------------------------------------------------


def attributes(span):
    return {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in span.attributes}


@pytest.fixture
def otlp_env(monkeypatch):
    def configure(endpoint, protocol="http/protobuf", **extra):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "benchd-test")
        for key, val in extra.items():
            monkeypatch.setenv(key, val)
    return configure


def traced_run(tiny, spec, registry, dropped=None, shutdown_s=None):
    """Spans and GenAI metrics on (the endpoint set by otlp_env); the run's outcome and how long it took."""
    dropped = [] if dropped is None else dropped
    provider = build_tracer_provider(lambda reason, n: dropped.append((reason, n)))
    genai = build_genai_metrics()
    assert provider is not None and genai is not None
    telemetry = Telemetry(Metrics(registry), provider, genai)
    started = time.monotonic()
    outcome = run(spec, loaded=tiny, telemetry=telemetry)
    elapsed = time.monotonic() - started
    started = time.monotonic()
    telemetry.shutdown()
    if shutdown_s is not None:
        shutdown_s.append(time.monotonic() - started)
    return outcome, elapsed


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


# ---- GenAI metrics over OTLP ---------------------------------------------------------------------------


def latest_metrics(receiver):
    """Each metric's latest export: cumulative, it holds everything."""
    return {metric.name: metric for _, metric in receiver.metrics()}


def point_attributes(point):
    return {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in point.attributes}


def bucket_counts(bounds, values):
    """OTel explicit buckets: (bounds[i-1], bounds[i]], then (bounds[-1], +inf)."""
    edges = [float("-inf"), *bounds, float("inf")]
    return [sum(1 for v in values if low < v <= high) for low, high in itertools.pairwise(edges)]


def check_histogram(metric, unit, bounds, values, attributes):
    assert metric.unit == unit, metric.name
    assert metric.histogram.aggregation_temporality == 2  # cumulative
    (point,) = [p for p in metric.histogram.data_points if point_attributes(p) == attributes]
    assert list(point.explicit_bounds) == bounds, metric.name
    assert point.count == len(values) and list(point.bucket_counts) == bucket_counts(bounds, values), metric.name
    assert point.sum == pytest.approx(sum(values), rel=1e-9, abs=1e-12), metric.name
    assert (point.min, point.max) == (min(values), max(values)), metric.name


SERVER_ATTRIBUTES = {"gen_ai.operation.name": "text_completion", "gen_ai.provider.name": "transformers",
                     "gen_ai.request.model": "tiny"}


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_genai_server_metrics_reach_an_otlp_receiver(tiny, registry, otlp_env, protocol):
    """An engine in benchd's worker is a model server: the conventions' server histograms, with their names, units,
    buckets and attributes, holding exactly the run's measured requests (the same observations as Prometheus')."""
    receiver_type = HTTPReceiver if protocol == "http/protobuf" else GRPCReceiver
    with receiver_type() as receiver:
        otlp_env(receiver.endpoint, protocol)
        spec = make_spec(workload={"warmup": {"requests": 2}, "stop": {"requests": 8},
                                   "arrivals": {"profile": "concurrent", "concurrency": 3}})
        outcome, _ = traced_run(tiny, spec, registry)
        metrics = latest_metrics(receiver)
    assert {resource["service.name"] for resource, _ in receiver.metrics()} == {"benchd-test"}
    good = [r for r in outcome.stages[0].records if not r.warmup and r.ok]
    assert len(good) == 8
    expected = {
        "gen_ai.server.time_to_first_token": (SEMCONV_TTFT, [r.ttft_s for r in good]),
        "gen_ai.server.time_per_output_token": (SEMCONV_TPOT, [r.tpot_s for r in good]),
        "gen_ai.server.request.duration": (SEMCONV_DURATION, [r.e2e_s for r in good]),
    }
    assert set(metrics) == set(expected)  # no client metrics: nothing is measured from outside a server
    for name, (bounds, values) in expected.items():
        check_histogram(metrics[name], "s", bounds, values, SERVER_ATTRIBUTES)
    ttft = metrics["gen_ai.server.time_to_first_token"].histogram.data_points[0]
    assert ttft.sum == pytest.approx(value(registry, "benchd_time_to_first_token_seconds_sum"), rel=1e-12)


def test_failed_requests_are_durations_with_their_error_type(tiny, registry, otlp_env):
    def fault(module, args):
        raise RuntimeError("injected fault")

    hook = tiny.model.model.layers[0].register_forward_pre_hook(fault)
    try:
        with HTTPReceiver() as receiver:
            otlp_env(receiver.endpoint)
            outcome, _ = traced_run(tiny, make_spec(workload={"stop": {"requests": 3}}), registry)
            metrics = latest_metrics(receiver)
    finally:
        hook.remove()
    records = outcome.stages[0].records
    assert set(metrics) == {"gen_ai.server.request.duration"}  # no first token: no TTFT, no TPOT
    (point,) = metrics["gen_ai.server.request.duration"].histogram.data_points
    kinds = {error_kind(r.error) for r in records}
    assert len(kinds) == 1 and point_attributes(point) == {**SERVER_ATTRIBUTES, "error.type": kinds.pop()}
    assert point.count == 3 and point.sum == pytest.approx(sum(r.finished_s - r.scheduled_s for r in records))


def test_server_ttft_and_tpot_count_successful_responses_only(tiny, registry, otlp_env):
    """A request that failed after its first tokens: Prometheus' TTFT has it (observed live), the conventions'
    server TTFT and TPOT ("for successful responses") do not, and its duration carries its error.type."""
    calls = {"n": 0}

    def fault(module, args):  # the static engine: the first request's fourth forward pass fails, the rest succeed
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("injected fault")

    spec = make_spec(engine="static", workload={"stop": {"requests": 3}, "output_tokens": {"dist": "fixed", "value": 8},
                                                "arrivals": {"profile": "concurrent", "concurrency": 1}})
    hook = tiny.model.model.layers[0].register_forward_pre_hook(fault)
    try:
        with HTTPReceiver() as receiver:
            otlp_env(receiver.endpoint)
            outcome, _ = traced_run(tiny, spec, registry)
            metrics = latest_metrics(receiver)
    finally:
        hook.remove()
    records = outcome.stages[0].records
    failed, good = [r for r in records if not r.ok], [r for r in records if r.ok]
    assert len(failed) == 1 and failed[0].arrival_s and len(good) == 2  # the failed one had its first token
    assert value(registry, "benchd_time_to_first_token_seconds_count", engine="static") == 3
    check_histogram(metrics["gen_ai.server.time_to_first_token"], "s", SEMCONV_TTFT, [r.ttft_s for r in good],
                    SERVER_ATTRIBUTES)
    check_histogram(metrics["gen_ai.server.time_per_output_token"], "s", SEMCONV_TPOT, [r.tpot_s for r in good],
                    SERVER_ATTRIBUTES)
    durations = {point_attributes(p).get("error.type"): p.count
                 for p in metrics["gen_ai.server.request.duration"].histogram.data_points}
    assert durations == {None: 2, error_kind(failed[0].error): 1}


def error_kind(error):
    from benchd.telemetry.run import error_type

    return error_type(error)


def test_genai_metrics_over_runs_are_cumulative_or_delta_and_bounded():
    from opentelemetry.sdk.resources import Resource

    from benchd.telemetry.genai import SERVER_TTFT, GenAIMetrics

    resource = Resource.create({})
    metrics = GenAIMetrics(max_series=2)
    first = metrics.series(SERVER_TTFT, {"gen_ai.request.model": "a"})
    for v in (0.001, 0.003, 0.5):
        first.observe(v)
    second = metrics.series(SERVER_TTFT, {"gen_ai.request.model": "a"})  # another run, the same attributes
    second.observe(20.0)
    (point,) = metrics.collect(resource).resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
    assert point.count == 4 and point.sum == pytest.approx(20.504) and (point.min, point.max) == (0.001, 20.0)
    assert list(point.bucket_counts) == bucket_counts(SEMCONV_TTFT, [0.001, 0.003, 0.5, 20.0])
    metrics.retire([first])
    metrics.retire([first])  # twice changes nothing
    (again,) = metrics.collect(resource).resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
    assert (again.count, again.sum, list(again.bucket_counts)) == (4, point.sum, list(point.bucket_counts))
    # Attribute sets past the cap share one overflow set, as the SDK's cardinality limit does.
    metrics.series(SERVER_TTFT, {"gen_ai.request.model": "b"}).observe(0.01)
    metrics.series(SERVER_TTFT, {"gen_ai.request.model": "c"}).observe(0.02)
    metrics.series(SERVER_TTFT, {"gen_ai.request.model": "d"}).observe(0.03)
    points = metrics.collect(resource).resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
    assert sorted((dict(p.attributes).get("gen_ai.request.model", "overflow"), p.count) for p in points) == [
        ("a", 4), ("b", 1), ("overflow", 2)]
    assert {"otel.metric.overflow": True} in [dict(p.attributes) for p in points]

    delta = GenAIMetrics()
    series = delta.series(SERVER_TTFT, {"gen_ai.request.model": "a"})
    series.observe(0.002)
    series.observe(0.004)
    (p1,) = delta.collect(resource, delta=True).resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
    assert delta.collect(resource, delta=True) is None  # nothing new
    series.observe(0.3)
    (p2,) = delta.collect(resource, delta=True).resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
    assert (p1.count, p2.count, p2.sum) == (2, 1, pytest.approx(0.3))
    assert p2.start_time_unix_nano > p1.start_time_unix_nano and p2.min is None


def test_timed_runs_make_no_genai_series(registry):
    """A kernel or train-step run generates no tokens: no GenAI series, none of the attribute-set cap used."""
    from benchd.telemetry.genai import GenAIMetrics

    genai = GenAIMetrics(max_series=1)
    telemetry = Telemetry(Metrics(registry), None, genai)
    kernel = make_spec(kind="kernel", kernel={"op": "matmul", "shapes": [{"m": 8, "n": 8, "k": 8}]})
    telemetry.for_run("r1", kernel.subject, kernel.runner, "k", spec=kernel).run_finished(0.0, "succeeded", None)
    generate = telemetry.for_run("r2", "tiny", "transformers", "test", spec=make_spec())
    assert [s.attributes for s in generate.otel_series[:1]] == [SERVER_ATTRIBUTES]  # not the overflow set


def test_a_run_on_every_gpu_is_one_set_of_genai_series(registry):
    """Each GPU's part writes series of its own (one writer each); they add up under the run's attributes, while
    Prometheus keeps a child per gpu."""
    from opentelemetry.sdk.resources import Resource

    from benchd.measure.records import RequestRecord
    from benchd.telemetry.genai import GenAIMetrics

    genai = GenAIMetrics()
    observer = Telemetry(Metrics(registry), None, genai).for_run("r", "tiny", "transformers", "test", spec=make_spec())
    parts = [observer.part(gpu) for gpu in ("GPU-0", "GPU-1")]
    for i, (part, ttft) in enumerate(zip(parts * 2, (0.01, 0.02, 0.03, 0.5))):
        record = RequestRecord(i, f"q{i}", False, 8, 4, scheduled_s=1.0, admitted_s=1.0,
                               arrival_s=[1.0 + ttft, 1.1 + ttft], arrival_tokens=[1, 3], finished_s=1.1 + ttft)
        part.arrivals(record, 0)
        part.finished(record)
    for part in (*parts, observer):
        part.run_finished(2.0, "succeeded", None)
    metrics = {m.name: m for m in genai.collect(Resource.create({})).resource_metrics[0].scope_metrics[0].metrics}
    (point,) = metrics["gen_ai.server.time_to_first_token"].data.data_points
    assert dict(point.attributes) == SERVER_ATTRIBUTES and point.count == 4
    assert point.sum == pytest.approx(0.56)
    counts = [value(registry, "benchd_time_to_first_token_seconds_count", gpu=gpu) for gpu in ("GPU-0", "GPU-1")]
    assert counts == [2, 2]


def test_genai_metrics_follow_the_otel_variables(monkeypatch):
    from benchd.telemetry.genai import metrics_enabled

    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_METRICS_EXPORTER",
                 "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    assert build_genai_metrics() is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://127.0.0.1:4318/v1/metrics")
    assert metrics_enabled()
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    assert not metrics_enabled() and build_genai_metrics() is None
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    with pytest.raises(ValueError, match="OTEL_METRICS_EXPORTER: prometheus is not supported"):
        metrics_enabled()
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/json")
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_PROTOCOL"):
        build_genai_metrics()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert build_genai_metrics() is None


def test_benchd_run_exports_its_genai_metrics_before_it_exits(tmp_path):
    """The CLI's run: the last export happens at its end, on the way out."""
    import os
    import sys

    from tests.helpers import ROOT

    with HTTPReceiver() as receiver:
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "benchd-cli"}
        result = subprocess.run([sys.executable, "-m", "benchd.cli", "run", "--model", "tiny", "--device", "cpu",
                                 "--requests", "5", "--prompt-tokens", "8", "--output-tokens", "6", "--out",
                                 str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
        assert result.returncode == 0, result.stderr
        metrics = latest_metrics(receiver)
    import json

    rows = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    ttft = metrics["gen_ai.server.time_to_first_token"].histogram.data_points[0]
    assert ttft.count == len(rows) == 5 and ttft.sum == pytest.approx(sum(r["ttft_s"] for r in rows), rel=1e-9)
    assert {resource["service.name"] for resource, _ in receiver.metrics()} == {"benchd-cli"}


# ---- the live daemon -----------------------------------------------------------------------------


def test_live_daemon_metrics_in_both_formats(tmp_path):
    with daemon(tmp_path) as server:
        run_id = submit(server, spec(requests=40, output=32, concurrency=4))
        gauges = set()
        while server.http.get(f"/runs/{run_id}").json()["status"] in ("queued", "running"):
            families = {f.name: f for f in parse_text(server.http.get("/metrics").text)}
            for name in ("benchd_run_in_progress", "benchd_requests_running", "benchd_kv_cache_usage_ratio"):
                for sample in families[name].samples if name in families else []:
                    if sample.value > 0:
                        gauges.add(name)
            time.sleep(0.01)
        assert gauges == {"benchd_run_in_progress", "benchd_requests_running", "benchd_kv_cache_usage_ratio"}
        summary = server.http.get(f"/runs/{run_id}").json()["summary"][0]

        om_response = server.http.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        assert om_response.headers["content-type"].startswith("application/openmetrics-text")
        assert om_response.text.endswith("# EOF\n")
        text_response = server.http.get("/metrics")
        assert text_response.headers["content-type"].startswith("text/plain")
        labels = {"model": "tiny", "engine": "transformers", "workload": "short", "gpu": "", "hostname": NODE}
        for families in (parse_openmetrics(om_response.text), parse_text(text_response.text)):
            samples = {(s.name, tuple(sorted(s.labels.items()))): s for f in families for s in f.samples}

            def get(name, samples=samples, **extra):
                return samples[(name, tuple(sorted({**labels, **extra}.items())))].value

            assert get("benchd_time_to_first_token_seconds_count") == 40
            assert get("benchd_inter_token_latency_seconds_count") == 40 * 31 == summary["itl_s"]["count"]
            assert get("benchd_time_to_first_token_seconds_sum") / 40 == pytest.approx(summary["ttft_s"]["mean"])
            assert get("benchd_request_duration_seconds_sum") / 40 == pytest.approx(summary["e2e_s"]["mean"])
            assert get("benchd_runs_total", status="succeeded") == 1
        om_ttft = [s for f in parse_openmetrics(om_response.text) for s in f.samples
                   if s.name == "benchd_time_to_first_token_seconds_bucket" and s.exemplar]
        assert om_ttft and all(s.exemplar.labels["run_id"] == run_id for s in om_ttft)
        check = subprocess.run(["promtool", "check", "metrics"], input=text_response.text, capture_output=True,
                               text=True)
        assert check.returncode == 0, check.stderr
        import benchd

        build = [line for line in text_response.text.splitlines() if line.startswith("benchd_build_info{")]
        assert build == [f'benchd_build_info{{hostname="{NODE}",python_version="{platform.python_version()}",'
                         f'version="{benchd.__version__}"}} 1.0'], build


def test_daemon_exports_spans_configured_by_otel_variables(tmp_path):
    with GRPCReceiver() as receiver:
        process, url = serve(tmp_path, free_port(), OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
                             OTEL_EXPORTER_OTLP_PROTOCOL="grpc", OTEL_SERVICE_NAME="benchd-node-7",
                             OTEL_TRACES_SAMPLER="always_on", OTEL_METRIC_EXPORT_INTERVAL="200")
        try:
            run_id = httpx.post(f"{url}/runs", json=spec(requests=5)).json()["id"]
            wait_for(lambda: httpx.get(f"{url}/runs/{run_id}").json()["status"] == "succeeded", 60)
            spans = receiver.wait_for_spans(6)
            run = httpx.get(f"{url}/runs/{run_id}").json()

            def counted():  # the periodic export, while the daemon runs
                ttft = latest_metrics(receiver).get("gen_ai.server.time_to_first_token")
                return ttft is not None and ttft.histogram.data_points[0].count == 5

            wait_for(counted, 30, "the run's five TTFTs exported")
        finally:
            process.terminate()
            process.wait(60)
    assert receiver.resource_attributes()["service.name"] == "benchd-node-7"
    (run_span,) = [s for s in spans if s.name == "benchd.run short"]
    assert attributes(run_span)["benchd.run_id"] == run_id
    assert run["metadata"]["trace_id"] == run_span.trace_id.hex()


def test_arrivals_observed_in_runs_are_what_they_would_be_one_at_a_time(registry):
    """Token arrivals reach the daemon in batches: every series, and which gaps carry exemplars, must be what the
    same arrivals one at a time would give; an arrival of k tokens is k equal gaps."""
    from benchd.measure.records import RecordBook

    stamps = [1.0, 1.01, 1.03, 1.035, 1.2, 1.21, 1.22, 1.5, 1.5001]
    counts = [1, 1, 1, 1, 3, 1, 1, 1, 1]
    registries = {"one at a time": registry, "in runs": CollectorRegistry()}
    exemplar_gaps = {}
    for mode, reg in registries.items():
        observer = Telemetry(Metrics(reg)).for_run("run-1", "tiny", "transformers", "test")
        book = RecordBook()
        record = book.request(0, "r0", False, 4, 11, 0.9, submitted_s=0.9)
        observer.submitted(record)
        runs = [(i, i + 1) for i in range(9)] if mode == "one at a time" else [(0, 1), (1, 4), (4, 4), (4, 9)]
        for start, end in runs:
            changed = book.tokens("r0", stamps[start:end], counts[start:end], list(range(100 + start, 100 + end)))
            if changed is not None:  # an empty run changes nothing
                observer.arrivals(*changed)
        assert record.arrival_s == stamps and record.token_ids == list(range(100, 109))
        assert record.arrival_tokens == counts and book.measured_tokens == 11
        families = {f.name: f for f in parse_openmetrics(generate_openmetrics(reg).decode())}
        exemplar_gaps[mode] = sorted(round(s.exemplar.value, 9) for s in
                                     families["benchd_inter_token_latency_seconds"].samples if s.exemplar)
    one, runs = ([line for line in generate_latest(r).decode().splitlines() if "_created" not in line]
                 for r in registries.values())
    assert one == runs
    assert value(registry, "benchd_inter_token_latency_seconds_count") == 10  # 8 gaps, the chunk's split in 3
    assert value(registry, "benchd_generation_tokens_total") == 11
    assert exemplar_gaps["one at a time"] == exemplar_gaps["in runs"] != []
