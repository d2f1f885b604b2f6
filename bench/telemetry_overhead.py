"""What benchd's instrumentation costs: one seeded workload with telemetry off and on, in one process.

On means everything: Prometheus histograms with exemplars, counters and gauges, and a span per request
exported over OTLP/HTTP to a local receiver in its own process, as a collector would be. Runs alternate (off, on, off, on, …) so drift hits both; the
figure is the ratio of median output tok/s. Target on the tiny CPU model: at least 0.98.

    python bench/telemetry_overhead.py [--model tiny] [--device cpu] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from prometheus_client import CollectorRegistry

from benchd.engines import create_engine
from benchd.metrics import Metrics
from benchd.models import load_model
from benchd.runner import run
from benchd.spec import parse_spec
from benchd.telemetry import Telemetry
from benchd.tracing import build_tracer_provider

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()

    spec = parse_spec({
        "name": "overhead", "model": args.model, "device": args.device, "seed": 0,
        "transformers": {"block_size": 32, "num_blocks": 256, "max_batch_tokens": 256} if args.device == "cpu" else {},
        "workload": {
            "arrivals": {"profile": "concurrent", "concurrency": args.concurrency},
            "stop": {"requests": args.requests},
            "warmup": {"requests": args.concurrency},
            "prompt_tokens": {"dist": "fixed", "value": 32},
            "output_tokens": {"dist": "fixed", "value": 64},
        },
    })
    loaded = load_model(spec.model, spec.dtype, spec.device, spec.seed)
    engine = create_engine(loaded, spec)
    engine.start()
    dropped = []
    # The receiver (tests/otlp.py) decodes the protobufs in its own process, as a collector would.
    receiver = subprocess.Popen([sys.executable, "-m", "tests.otlp"], cwd=ROOT, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    endpoint = receiver.stdout.readline().strip()
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    provider = build_tracer_provider(lambda reason, n: dropped.append((reason, n)),
                                     exporter=OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces"))
    modes = {"off": Telemetry(), "on": Telemetry(metrics, provider)}
    throughput: dict[str, list[float]] = {"off": [], "on": []}
    ttft_p50: dict[str, list[float]] = {"off": [], "on": []}
    itl_p50: dict[str, list[float]] = {"off": [], "on": []}
    run(spec, loaded=loaded, engine=engine)  # one untimed pass: allocator and caches settle
    for _ in range(args.repeats):
        for mode, telemetry in modes.items():
            summary = run(spec, loaded=loaded, engine=engine, telemetry=telemetry).summaries()[0]
            throughput[mode].append(summary.output_tokens_per_s)
            ttft_p50[mode].append(summary.ttft_s.p50)
            itl_p50[mode].append(summary.itl_s.p50)
    modes["on"].shutdown()
    spans, _ = receiver.communicate("", timeout=60)
    engine.stop()

    off, on = statistics.median(throughput["off"]), statistics.median(throughput["on"])
    print(f"model {args.model} on {loaded.device}, {args.requests} requests × 32/64 tokens, "
          f"concurrency {args.concurrency}, {args.repeats} runs per mode")
    for mode in ("off", "on"):
        print(f"  telemetry {mode:3}: output tok/s median {statistics.median(throughput[mode]):8.1f} "
              f"(runs: {', '.join(f'{x:.0f}' for x in throughput[mode])}); "
              f"TTFT p50 {statistics.median(ttft_p50[mode]) * 1e3:.2f} ms; "
              f"ITL p50 {statistics.median(itl_p50[mode]) * 1e3:.3f} ms")
    print(f"  spans received by the local OTLP receiver: {spans.strip()}; dropped: {sum(n for _, n in dropped)}")
    print(f"telemetry on / off output tok/s: {on / off:.3f}")


if __name__ == "__main__":
    main()
