"""The stack A/B on a GPU: the reference workload (shrunk to fit ~8 minutes on an H100) over bf16 / torchao int8
weight-only / float8 / int4 weight-only × sdpa / eager × static generate() / continuous batching, as one benchd
matrix: variants interleaved round after round on one worker process, each compared with bf16 + sdpa on continuous
batching, plus what each method needed (library and configuration, quantized layers, time to quantize, weights).

    PYTHONPATH=/tmp/site:src python3 bench/gpu_matrix.py                 # H100: about 7-8 minutes
    PYTHONPATH=/tmp/site:src python3 bench/gpu_matrix.py --repeats 3 --budget-s 900
    python3 bench/gpu_matrix.py --smoke                                  # CPU: the tiny model, about a minute

Needs torchao on the GPU host (bash bench/wheelhouse_stack.sh puts torchao 0.17.0, built for torch 2.11, in .whl/).
The workload is the reference's shape at half its size each way (128 requests × 128 prompt × 128 output tokens,
64 at once; static batches of 64) so that 16 variants × 2 rounds fit: each run also loads and quantizes its variant
(outside the measured window) and continuous batching captures its CUDA graphs. --budget-s stops starting runs once
the next would not fit, and the comparison is made on the runs that ran.
"""

from __future__ import annotations

import argparse
import copy
import importlib.metadata
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from common import REFERENCE, environment

from benchd.cli.matrix import comparison_table
from benchd.daemon.lifecycle import Lifecycle
from benchd.daemon.matrices import run_matrix
from benchd.hardware.devices import local, pick
from benchd.hardware.nvml import NVMLReader
from benchd.spec.matrix import parse_matrix
from benchd.stopping import StopSignal
from benchd.supervisor.pool import WorkerPool
from benchd.supervisor.settings import WorkerSettings
from benchd.telemetry.run import Telemetry

QUANTIZATIONS = ["none", "int8_weight_only", "float8", "int4_weight_only"]
ATTENTION = ["sdpa", "eager"]
ENGINES = ["transformers", "static"]  # last: the two engines of a variant share its loaded model


def document(args: argparse.Namespace) -> dict:
    if args.smoke:  # the CPU: what runs there (no float8 or int4 kernels), on the tiny model
        base = {"name": "matrix-smoke", "model": "tiny", "device": "cpu", "dtype": "float32",
                "transformers": {"block_size": 16, "num_blocks": 64, "max_batch_tokens": 128},
                "static": {"batch_size": 4},
                "workload": {"arrivals": {"profile": "concurrent", "concurrency": 4}, "stop": {"requests": 16},
                             "prompt_tokens": {"dist": "fixed", "value": 16},
                             "output_tokens": {"dist": "fixed", "value": 16}}}
        quantizations = ["none", "int8_weight_only"]
    else:
        base = copy.deepcopy(REFERENCE)
        base["name"] = "reference-matrix"
        base["static"] = {"batch_size": args.batch}
        base["workload"].update({"arrivals": {"profile": "concurrent", "concurrency": args.batch},
                                 "stop": {"requests": args.requests},
                                 "prompt_tokens": {"dist": "fixed", "value": args.tokens},
                                 "output_tokens": {"dist": "fixed", "value": args.tokens}})
        quantizations = args.quantization
    return {**base, "matrix": {"quantization": quantizations, "attn_implementation": ATTENTION, "engine": ENGINES},
            "repeats": args.repeats,
            "baseline": {"quantization": "none", "attn_implementation": "sdpa", "engine": "transformers"}}


def versions() -> str:
    found = []
    for package in ("torchao", "bitsandbytes", "flash-attn"):
        try:
            found.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{package} not installed")
    return ", ".join(found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2, help="rounds: every variant once a round")
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=128, help="prompt and output tokens each")
    parser.add_argument("--batch", type=int, default=64, help="requests in flight, and the static batch")
    parser.add_argument("--quantization", nargs="+", default=QUANTIZATIONS)
    parser.add_argument("--budget-s", type=float, default=450.0, help="start no run that would end past this")
    parser.add_argument("--smoke", action="store_true", help="the tiny model on the CPU")
    parser.add_argument("--out", type=Path, default=Path("matrix-results.json"))
    args = parser.parse_args()

    matrix = parse_matrix(document(args))
    variants = matrix.variants()
    # the GPU benchd run would take (BENCHD_DEVICES, else the first visible), its worker pinned to it
    reader = NVMLReader(cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
    reader.start()
    device = pick(local([variants[0].spec.device], reader.devices), variants[0].spec.device)
    reader.close()
    print(environment(), "·", versions(), flush=True)
    print(f"{len(variants)} variants × {matrix.repeats} rounds, interleaved; budget {args.budget_s:g} s", flush=True)
    pool = WorkerPool([device], WorkerSettings(log_dir=Path(tempfile.gettempdir()) / "benchd-workers"))
    pool.start()
    lifecycle = Lifecycle(pool, Telemetry())
    stop = StopSignal()  # the matrix's: set between runs, never while one runs
    started = time.perf_counter()
    longest = [0.0]

    def execute(run_id, variant):
        begun = time.perf_counter()
        result = lifecycle.execute(run_id, variant.spec, device.key, StopSignal())
        took = time.perf_counter() - begun
        longest[0] = max(longest[0], took)
        m = result.metadata
        figure = result.stages[0].summary().output_tokens_per_s if result.stages else None
        print(f"{time.perf_counter() - started:6.0f} s  variant {variant.index:2d} {variant.label}: {result.status}"
              + (f", {figure:,.0f} output tok/s" if figure is not None else "")
              + (f", load {m.model_load_s:.1f} s" if m is not None and m.model_load_s else "")
              + f", run {took:.1f} s" + (f" — {result.error}" if result.error else ""), flush=True)
        if time.perf_counter() - started + longest[0] > args.budget_s:
            stop.set("cancelled")
        return result

    try:
        outcome = run_matrix(matrix, execute, stop)
    finally:
        pool.stop()
    elapsed = time.perf_counter() - started
    ran = len(outcome.runs)
    print(f"\n{ran} of {len(variants) * matrix.repeats} runs in {elapsed:.0f} s"
          + ("" if ran == len(variants) * matrix.repeats else " (the budget stopped the rest)"))
    comparison = outcome.comparison
    from rich.console import Console

    Console(width=260).print(comparison_table(f"benchd matrix · {REFERENCE['model'] if not args.smoke else 'tiny'}",
                                              comparison, outcome.status))
    # Against the same engine's bf16 + sdpa, and what each method needed
    same = {(v.values["engine"]): v for v in comparison.variants
            if v.values["quantization"] == "none" and v.values["attn_implementation"] == "sdpa"}
    print(f"\n{'engine':13} {'quantization':17} {'attn':5} {'tok/s':>8} {'× bf16 sdpa':>11} {'TTFT p50':>9} "
          f"{'ITL p50':>9} {'weights':>9} {'peak':>9} {'tokens = base':>13}  method (layers)")
    for v in comparison.variants:
        ref = same.get(v.values["engine"])
        ratio = (v.output_tokens_per_s / ref.output_tokens_per_s if ref is not None and v.output_tokens_per_s
                 and ref.output_tokens_per_s else None)
        ms = lambda x: "–" if x is None else f"{x * 1e3:.2f} ms"  # noqa: E731
        gib = lambda x: "–" if x is None else f"{x / 2**30:.2f} GiB"  # noqa: E731
        agree = "baseline" if v.baseline else "–" if v.tokens is None else f"{v.tokens.ratio:.1%}"
        method = v.stack.get("quantization_method") or "–"
        if v.quantized_layers:
            method += f" ({v.quantized_layers} layers)"
        tps = "failed" if v.output_tokens_per_s is None else f"{v.output_tokens_per_s:,.0f}"
        print(f"{v.values['engine']:13} {v.values['quantization']:17} {v.values['attn_implementation']:5} "
              f"{tps:>8} {'–' if ratio is None else f'{ratio:.3f}':>11} {ms(v.ttft_p50_s):>9} {ms(v.itl_p50_s):>9} "
              f"{gib(v.weight_bytes):>9} {gib(v.peak_memory_bytes):>9} {agree:>13}  {method}")
    errors = {v.label: r.error for _, i, _, r in outcome.runs for v in variants if v.index == i and r.error}
    for label, error in errors.items():
        print(f"failed: {label}: {error}")
    args.out.write_text(json.dumps({"environment": environment(), "versions": versions(), "elapsed_s": elapsed,
                                    "comparison": comparison.model_dump(mode="json"), "errors": errors}, indent=2))
    print(f"wrote {args.out}")
    return 0 if outcome.status == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
