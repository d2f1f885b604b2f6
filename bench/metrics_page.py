"""What a /metrics page costs the daemon: benchd's registry with a few workloads' histograms (exemplars on), written
by prometheus_client and by benchd's exposition, text and OpenMetrics, in one invocation.

    python bench/metrics_page.py [--workloads 4] [--repeats 30]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from benchd.telemetry.exposition import NodeRegistry, page
from benchd.telemetry.metrics import Metrics


def registry(workloads: int) -> NodeRegistry:
    node = NodeRegistry("gpu-node-0")
    metrics = Metrics(node)
    rng = random.Random(0)
    for w in range(workloads):
        labels = ("llama-3.2-1b", "transformers", f"workload-{w}", "0")
        for histogram in (metrics.ttft, metrics.itl, metrics.tpot, metrics.e2e, metrics.queue, metrics.dispatch_lag):
            series = histogram.labels(*labels)
            for i in range(300):
                series.observe(rng.expovariate(10), {"trace_id": f"{i:032x}"} if i % 50 == 0 else None)
        for counter in (metrics.prompt_tokens, metrics.generation_tokens):
            counter.labels(*labels).inc(1000)
        for gauge in (metrics.running, metrics.waiting, metrics.kv_usage, metrics.throughput):
            gauge.labels(*labels).set(1)
    return node


def timed(write, repeats: int) -> tuple[float, int]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        size = len(write())
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    node = registry(args.workloads)
    for name, openmetrics, reference in (("text", False, generate_latest), ("OpenMetrics", True, generate_openmetrics)):
        assert page(node, openmetrics) == reference(node)
        before, size = timed(lambda: reference(node), args.repeats)
        after, _ = timed(lambda: page(node, openmetrics), args.repeats)
        print(f"{name}: {size:,} bytes, prometheus_client {before:.2f} ms, benchd {after:.2f} ms "
              f"({before / after:.1f}x), median of {args.repeats}")


if __name__ == "__main__":
    main()
