"""benchd's own cost on the GPU: the reference workload through benchd with everything on (Prometheus
histograms and exemplars, spans to a local OTLP receiver in its own process, the hardware sampler at 1 s)
against bare `generate_batch` with the same continuous-batching configuration, alternating in one process.

    python bench/gpu_overhead.py [--repeats 3]

Bare generate_batch is timed from its own per-token timestamps (record_timestamps): throughput over
first request created → last token, TTFT = first token − the first request created (all are scheduled at
once, as benchd schedules them), ITL = consecutive token gaps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np
from common import REFERENCE, ROOT, environment
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from prometheus_client import CollectorRegistry

from benchd.engines.transformers_cb import cb_config
from benchd.hardware import HardwareReader
from benchd.metrics import Metrics
from benchd.models import greedy_config, load_model
from benchd.runner import run
from benchd.sampler import HardwareSampler
from benchd.spec import parse_spec
from benchd.telemetry import Telemetry
from benchd.tracing import build_tracer_provider
from benchd.workload import contents


def bare(loaded, spec) -> dict:
    """transformers' generate_batch, nothing of benchd around it but the prompts and the configuration."""
    stream = contents(spec.workload, spec.seed, loaded.vocab_size, loaded.special_ids)
    prompts = [next(stream).prompt_ids for _ in range(spec.workload.stop.requests)]
    out_len = spec.workload.output_tokens.value
    results = loaded.model.generate_batch(
        prompts, generation_config=greedy_config(loaded, True, out_len),
        continuous_batching_config=cb_config(spec.transformers, "cuda"), record_timestamps=True,
        max_new_tokens=out_len,
    )
    outputs = list(results.values())
    start = min(o.created_time for o in outputs)
    end = max(o.timestamps[-1] for o in outputs)
    tokens = sum(len(o.generated_tokens) for o in outputs)
    # All requests are scheduled at once, as benchd schedules them: TTFT counts from the batch's start (the first
    # request's creation), like benchd's from the scheduled time; from each request's own creation it would
    # leave out the time generate_batch takes to add the requests before it.
    ttft = [o.timestamps[0] - start for o in outputs]
    itl = [b - a for o in outputs for a, b in zip(o.timestamps, o.timestamps[1:])]
    return {"output_tok_s": tokens / (end - start), "tokens": tokens,
            **{f"ttft_p{p}_ms": float(np.percentile(ttft, p)) * 1e3 for p in (50, 90, 99)},
            **{f"itl_p{p}_ms": float(np.percentile(itl, p)) * 1e3 for p in (50, 90, 99)}}


def instrumented(loaded, spec, telemetry, sampler) -> dict:
    outcome = run(spec, loaded=loaded, telemetry=telemetry, hardware=sampler)
    s = outcome.summaries()[0]
    return {"output_tok_s": s.output_tokens_per_s, "tokens": s.output_tokens,
            "ttft_p50_ms": s.ttft_s.p50 * 1e3, "ttft_p90_ms": s.ttft_s.p90 * 1e3, "ttft_p99_ms": s.ttft_s.p99 * 1e3,
            "itl_p50_ms": s.itl_s.p50 * 1e3, "itl_p90_ms": s.itl_s.p90 * 1e3, "itl_p99_ms": s.itl_s.p99 * 1e3,
            "dispatch_lag_p50_ms": s.dispatch_lag_s.p50 * 1e3, "dispatch_lag_max_ms": s.dispatch_lag_s.max * 1e3,
            "energy_per_token_mj": (outcome.hardware.energy_per_output_token_joules or 0) * 1e3
            if outcome.hardware else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", nargs="*", default=["bare", "benchd"],
                        help="bare, benchd (everything on), benchd-off (nothing exported, no sampler), "
                             "benchd-si1ms (everything on, the interpreter's GIL switch interval at 1 ms)")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    print(environment(), flush=True)
    spec = parse_spec(REFERENCE)
    loaded = load_model(spec.model, spec.dtype, spec.device, seed=0)
    receiver = subprocess.Popen([sys.executable, "-m", "tests.otlp"], cwd=ROOT, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    endpoint = receiver.stdout.readline().strip()
    dropped = []
    provider = build_tracer_provider(lambda reason, n: dropped.append(n),
                                     exporter=OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces"))
    telemetry = Telemetry(Metrics(CollectorRegistry()), provider)
    sampler = HardwareSampler(HardwareReader.default(), interval_s=1.0)
    sampler.start()
    quiet = Telemetry()  # benchd's runner and engine with nothing exported: the cost of the measuring itself
    modes = {
        "bare": lambda: bare(loaded, spec),
        "benchd": lambda: instrumented(loaded, spec, telemetry, sampler),
        "benchd-off": lambda: instrumented(loaded, spec, quiet, None),
        "benchd-si1ms": lambda: switching(0.001, lambda: instrumented(loaded, spec, telemetry, sampler)),
    }
    rows = {mode: [] for mode in args.modes}
    bare(loaded, spec)  # untimed: first-use costs of both paths
    for _ in range(args.repeats):
        for mode in args.modes:
            rows[mode].append(modes[mode]())
        print(json.dumps({mode: runs[-1] for mode, runs in rows.items()}), flush=True)
    sampler.stop()
    telemetry.shutdown()
    spans, _ = receiver.communicate("", timeout=60)
    median = {mode: {k: statistics.median(r[k] for r in runs) for k in runs[0] if runs[0][k] is not None}
              for mode, runs in rows.items()}
    with open(os.path.join(args.out, "overhead.json"), "w") as f:
        json.dump({"environment": environment(), "runs": rows, "median": median, "spans": spans.strip(),
                   "spans_dropped": sum(dropped)}, f, indent=2)
    print(f"\nspans received {spans.strip()}, dropped {sum(dropped)}")
    others = [mode for mode in args.modes if mode != "bare"]
    print(f"{'figure (median of ' + str(args.repeats) + ')':28} {'bare':>10} "
          + " ".join(f"{mode:>14} {'/ bare':>7}" for mode in others))
    for key in ("output_tok_s", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p90_ms", "itl_p99_ms"):
        b = median["bare"][key]
        print(f"{key:28} {b:10.2f} " + " ".join(f"{median[m][key]:14.2f} {median[m][key] / b:7.3f}" for m in others))


def switching(interval_s: float, fn):
    before = sys.getswitchinterval()
    sys.setswitchinterval(interval_s)
    try:
        return fn()
    finally:
        sys.setswitchinterval(before)


if __name__ == "__main__":
    main()
