"""What one read of a server's Prometheus page costs the daemon: benchd's read (only the known names parsed) beside
prometheus_client parsing the whole page, on a vLLM-sized page written by prometheus_client with vLLM V1's names
(two engine cores, 15 histograms of 20 buckets each, as vllm/v1/metrics/loggers.py has about that many).

    python bench/server_page.py [--reads 500]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from benchd.measure.server_metrics import read  # noqa: E402


def page() -> str:
    registry, labels = CollectorRegistry(), ["model_name", "engine"]
    gauges = [Gauge(n, n, labels, registry=registry) for n in (
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")]
    counters = [Counter(n, n, labels, registry=registry) for n in (
        "vllm:num_preemptions", "vllm:prefix_cache_hits", "vllm:prefix_cache_queries", "vllm:prompt_tokens",
        "vllm:generation_tokens")]
    histograms = [Histogram(f"vllm:histogram_{i}_seconds", "x", labels, registry=registry,
                            buckets=[0.001 * 2 ** k for k in range(20)]) for i in range(15)]
    for engine in ("0", "1"):
        for g in gauges:
            g.labels("llama", engine).set(3)
        for c in counters:
            c.labels("llama", engine).inc(100)
        for h in histograms:
            h.labels("llama", engine).observe(0.01)
    return generate_latest(registry).decode()


def per_read_ms(function, text: str, reads: int) -> float:
    began = time.perf_counter()
    for _ in range(reads):
        function(text)
    return (time.perf_counter() - began) / reads * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reads", type=int, default=500)
    args = parser.parse_args()
    text = page()
    ours = per_read_ms(read, text, args.reads)
    whole = per_read_ms(lambda t: list(text_string_to_metric_families(t)), text, args.reads)
    print(f"page: {len(text):,} bytes, {text.count(chr(10)):,} lines")
    print(f"benchd's read: {ours:.3f} ms; the whole page parsed: {whole:.3f} ms ({whole / ours:.1f}x)")


if __name__ == "__main__":
    main()
