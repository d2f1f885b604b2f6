"""The /metrics page benchd writes is the page prometheus_client writes for the same registry, byte for byte."""

from __future__ import annotations

import random

import pytest
from prometheus_client import Counter, Gauge, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from benchd.telemetry.exposition import NodeRegistry, page
from benchd.telemetry.metrics import Metrics


def populated() -> NodeRegistry:
    registry = NodeRegistry('node "7"\\a')
    metrics = Metrics(registry)
    rng = random.Random(3)
    for w in range(3):
        labels = ("tiny", "transformers", f"w{w}", "" if w else "0")
        for histogram in (metrics.ttft, metrics.itl, metrics.tpot, metrics.e2e, metrics.queue, metrics.dispatch_lag):
            series = histogram.labels(*labels)
            for i in range(200):
                series.observe(rng.expovariate(20), {"trace_id": f"{i:032x}"} if i % 40 == 0 else None)
        metrics.generation_tokens.labels(*labels).inc(3_500_000)  # past a million: Go's exponent form
        metrics.prompt_tokens.labels(*labels).inc(12)
        metrics.kv_usage.labels(*labels).set(0.125)
        metrics.requests.labels(*labels, "success").inc(7)
    metrics.regression.labels('say "hi"\nback\\slash', "ttft_p99").set(-0.5)  # every character to escape
    metrics.step_duration.labels("m", "train", "forward").observe(0.02)
    metrics.kernel_duration.labels("k", "matmul", "torch", "8x8", "bf16").observe(3e-6)
    metrics.ttft.labels("empty", "x", "y", "")  # a series that has seen nothing
    Counter("benchd_test_faults", 'a "quoted"\nhelp \\ text', ("component",), registry=registry).labels("a").inc()
    Gauge("benchd_test_level", "plain", registry=registry).set(3)
    return registry


@pytest.mark.parametrize("openmetrics", [False, True])
def test_the_page_is_prometheus_clients_page(openmetrics):
    registry = populated()
    reference = generate_openmetrics(registry) if openmetrics else generate_latest(registry)
    assert page(registry, openmetrics) == reference


def test_exemplars_and_node_label_survive_a_parse():
    families = {f.name: f for f in text_string_to_metric_families(page(populated(), True).decode())}
    buckets = [s for s in families["benchd_time_to_first_token_seconds"].samples if s.name.endswith("_bucket")]
    assert any(s.exemplar is not None and len(s.exemplar.labels["trace_id"]) == 32 for s in buckets)
    assert all(s.labels["hostname"] == 'node "7"\\a' for s in buckets)
    tokens = families["benchd_generation_tokens"].samples
    assert {s.value for s in tokens} == {3_500_000.0}


def test_generic_families_keep_their_place_and_an_unregistered_one_goes():
    registry = populated()
    Gauge("benchd_before", "registered after the hot families", registry=registry).set(1)
    gone = Gauge("benchd_gone", "unregistered", registry=registry)
    registry.unregister(gone)
    page_text = page(registry, False).decode()
    assert "benchd_gone" not in page_text
    assert page_text == generate_latest(registry).decode()
    assert page_text.index("benchd_test_level") < page_text.index("benchd_before")


def test_label_values_reach_prometheus_without_control_or_bidi_characters():
    """A matrix's values are its variants' labels (benchd_matrix_variant_*{variant=…}), and a client chooses them:
    CR, ESC, BEL, U+2028 and a bidi override reach the page escaped, so the page still parses line by line and the
    series is removed by the value it was set with."""
    registry = NodeRegistry("n")
    metrics = Metrics(registry)
    hostile = "label=a\rb\x1b[2J\x07\u2028c\u202eexe.txt"
    metrics.variant_throughput.labels("w", hostile).set(1.0)
    text = page(registry, False).decode()
    assert not any(c in text for c in "\r\x1b\x07\u2028\u202e")
    (sample,) = [s for f in text_string_to_metric_families(page(registry, True).decode())
                 if f.name == "benchd_matrix_variant_output_tokens_per_second" for s in f.samples]
    assert sample.labels["variant"] == "label=a\\x0db\\x1b[2J\\x07\\u2028c\\u202eexe.txt"
    metrics.variant_throughput.remove("w", hostile)
    assert "benchd_matrix_variant_output_tokens_per_second{" not in page(registry, False).decode()
