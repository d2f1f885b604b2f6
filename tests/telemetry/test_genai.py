"""OpenTelemetry's GenAI metrics over OTLP: the conventions' server histograms of an engine in benchd's worker,
failed requests, temporality and bounds, timed runs and runs on every GPU, the OTEL_* variables, `benchd run`."""

import subprocess

import pytest

from benchd.telemetry.genai import build_genai_metrics
from benchd.telemetry.metrics import Metrics
from benchd.telemetry.run import Telemetry
from tests.helpers import make_spec
from tests.otlp import GRPCReceiver, HTTPReceiver
from tests.telemetry.helpers import (
    SEMCONV_DURATION,
    SEMCONV_TPOT,
    SEMCONV_TTFT,
    SERVER_ATTRIBUTES,
    bucket_counts,
    check_histogram,
    error_kind,
    latest_metrics,
    point_attributes,
    traced_run,
    value,
)


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
