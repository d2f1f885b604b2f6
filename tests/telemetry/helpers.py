"""What the telemetry tests share: the GenAI conventions' buckets, a run's Prometheus values, traced runs and
OTLP's histograms as received."""

import itertools
import time

import pytest

from benchd.daemon.inprocess import run_local as run
from benchd.telemetry.genai import build_genai_metrics
from benchd.telemetry.metrics import Metrics
from benchd.telemetry.run import Telemetry
from benchd.telemetry.tracing import build_tracer_provider

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


def attributes(span):
    return {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in span.attributes}


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


def error_kind(error):
    from benchd.telemetry.spans import error_type

    return error_type(error)
