"""What benchd's instrumentation costs: one seeded workload with telemetry off and on, in one process, through the
daemon's lifecycle (daemon/inprocess.py: a worker's core in this process, its engine kept warm across runs).

On means everything: Prometheus histograms with exemplars, counters and gauges, a span per request, and the
OpenTelemetry GenAI histograms exported every second, both over OTLP/HTTP to a local receiver in its own process, as
a collector would be; "no genai" is all of it but the GenAI histograms. Runs alternate (off, no genai, on, off, …)
so drift hits every mode.

--engine transformers (the default) generates with the model in this process: the figure is the ratio of median
output tok/s, on / off; target on the tiny CPU model: at least 0.98. --engine openai drives a local
OpenAI-compatible server (tests/openai_server.py, in its own process; benchd's client loop in another): the
server sets the pace, so the figure is this process's CPU time per output chunk (ingest and telemetry), on against
off. Both print what one observation costs on each path first.

    python bench/telemetry_overhead.py [--engine transformers|openai] [--model tiny] [--device cpu] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from prometheus_client import CollectorRegistry

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from benchd.daemon.lifecycle import Lifecycle  # noqa: E402
from benchd.telemetry.metrics import Metrics  # noqa: E402
from benchd.telemetry.genai import SERVER_TTFT, GenAIMetrics, GenAIRequest, build_genai_metrics  # noqa: E402
from benchd.spec import parse_spec  # noqa: E402
from benchd.stopping import StopSignal  # noqa: E402
from benchd.telemetry.run import Telemetry  # noqa: E402
from benchd.telemetry.tracing import build_tracer_provider  # noqa: E402
from benchd.daemon.inprocess import LocalPool  # noqa: E402


def per_observation_us(n: int = 200_000) -> dict[str, float]:
    """One histogram observation on each path, µs: benchd's Prometheus child, benchd's GenAI series, and the OTel
    SDK's own Histogram.record with the conventions' attributes (what a GenAI series replaces)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    prometheus = Metrics(CollectorRegistry()).itl.labels("tiny", "transformers", "overhead")
    attributes = GenAIRequest("chat", "openai", "m", "127.0.0.1", 8000, client=True).attributes()
    series = GenAIMetrics().series(SERVER_TTFT, attributes)
    sdk = MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("bench").create_histogram(
        SERVER_TTFT.name, unit="s", explicit_bucket_boundaries_advisory=list(SERVER_TTFT.bounds))
    out = {}
    for name, observe in (("prometheus", prometheus.observe), ("genai", series.observe),
                          ("otel sdk", lambda v: sdk.record(v, attributes))):
        for _ in range(1000):
            observe(0.013)
        start = time.perf_counter()
        for _ in range(n):
            observe(0.013)
        out[name] = (time.perf_counter() - start) / n * 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["transformers", "openai"], default="transformers")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--output-tokens", type=int, default=64)
    args = parser.parse_args()

    costs = per_observation_us()
    print("one observation: " + ", ".join(f"{name} {us:.2f} µs" for name, us in costs.items()), flush=True)

    server = None
    workload = {
        "arrivals": {"profile": "concurrent", "concurrency": args.concurrency},
        "stop": {"requests": args.requests},
        "warmup": {"requests": args.concurrency},
        "prompt_tokens": {"dist": "fixed", "value": 32},
        "output_tokens": {"dist": "fixed", "value": args.output_tokens},
    }
    if args.engine == "openai":
        server = subprocess.Popen([sys.executable, "-m", "tests.openai_server", "--delay", "0.001"], cwd=ROOT,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        prompts = Path(tempfile.mkdtemp(prefix="benchd-overhead-")) / "prompts.jsonl"
        prompts.write_text("".join(json.dumps({"prompt": f"prompt {i}"}) + "\n" for i in range(64)))
        del workload["prompt_tokens"]  # prompts from a dataset: no tokenizer needed to size them
        spec = parse_spec({"name": "overhead", "engine": "openai", "model": "ok", "seed": 0,
                           "workload": {**workload, "dataset": {"format": "jsonl", "path": str(prompts)}},
                           "openai": {"base_url": server.stdout.readline().strip()}})
    else:
        spec = parse_spec({
            "name": "overhead", "model": args.model, "device": args.device, "seed": 0, "workload": workload,
            "transformers": {"block_size": 32, "num_blocks": 256, "max_batch_tokens": 256}
            if args.device == "cpu" else {},
        })
    # The receiver (tests/otlp.py) decodes the protobufs in its own process, as a collector would.
    receiver = subprocess.Popen([sys.executable, "-m", "tests.otlp"], cwd=ROOT, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    endpoint = receiver.stdout.readline().strip()
    dropped = []
    provider = build_tracer_provider(lambda reason, n: dropped.append((reason, n)),
                                     exporter=OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces"))
    genai = build_genai_metrics(exporter=OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics"),
                                export_interval_millis=1000)
    # "no genai": what the GenAI histograms add, on top of everything else.
    modes = {"off": Telemetry(), "no genai": Telemetry(Metrics(CollectorRegistry()), provider),
             "on": Telemetry(Metrics(CollectorRegistry()), provider, genai)}
    pool = LocalPool()
    throughput: dict[str, list[float]] = {mode: [] for mode in modes}
    cpu_per_chunk: dict[str, list[float]] = {mode: [] for mode in modes}
    ttft_p50: dict[str, list[float]] = {mode: [] for mode in modes}
    itl_p50: dict[str, list[float]] = {mode: [] for mode in modes}

    def once(telemetry: Telemetry):
        cpu = time.process_time()
        outcome = Lifecycle(pool, telemetry).execute(uuid.uuid4().hex, spec, spec.device, StopSignal())
        cpu = time.process_time() - cpu
        if outcome.status != "succeeded":
            raise SystemExit(f"the run {outcome.status}: {outcome.error}")
        chunks = sum(len(r.arrival_s) for stage in outcome.stages for r in stage.records)
        return outcome.summaries()[0], cpu / chunks

    try:
        once(modes["off"])  # one untimed pass: the model loads, the engine starts, allocator and caches settle
        for _ in range(args.repeats):
            for mode, telemetry in modes.items():
                summary, cpu = once(telemetry)
                throughput[mode].append(summary.output_tokens_per_s)
                cpu_per_chunk[mode].append(cpu)
                ttft_p50[mode].append(summary.ttft_s.p50)
                itl_p50[mode].append(summary.itl_s.p50)
    finally:
        modes["on"].shutdown()  # the provider and the GenAI reader are shared: one shutdown flushes both
        pool.stop()
        counts, _ = receiver.communicate("", timeout=60)
        if server is not None:
            server.communicate("", timeout=30)
    spans, metric_exports = counts.split()

    subject = f"model {args.model} on {args.device}" if args.engine != "openai" else "openai engine, local server"
    print(f"{subject}, {args.requests} requests × 32/{args.output_tokens} tokens, concurrency {args.concurrency}, "
          f"{args.repeats} runs per mode")
    for mode in modes:
        print(f"  telemetry {mode:8}: output tok/s median {statistics.median(throughput[mode]):8.1f} "
              f"(runs: {', '.join(f'{x:.0f}' for x in throughput[mode])}); "
              f"CPU {statistics.median(cpu_per_chunk[mode]) * 1e6:.1f} µs/chunk; "
              f"TTFT p50 {statistics.median(ttft_p50[mode]) * 1e3:.2f} ms; "
              f"ITL p50 {statistics.median(itl_p50[mode]) * 1e3:.3f} ms")
    print(f"  received by the local OTLP receiver: {spans} spans (dropped: {sum(n for _, n in dropped)}), "
          f"{metric_exports} metric exports")
    off, on = statistics.median(throughput["off"]), statistics.median(throughput["on"])
    cpu_off, cpu_on = statistics.median(cpu_per_chunk["off"]), statistics.median(cpu_per_chunk["on"])
    cpu_bare = statistics.median(cpu_per_chunk["no genai"])
    print(f"telemetry on / off output tok/s: {on / off:.3f}; CPU per chunk on / off: {cpu_on / cpu_off:.3f} "
          f"(+{(cpu_on - cpu_off) * 1e6:.2f} µs), of which the GenAI histograms +{(cpu_on - cpu_bare) * 1e6:.2f} µs")


if __name__ == "__main__":
    main()
