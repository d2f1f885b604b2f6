"""Which continuous-batching configuration is fastest on the reference workload, against transformers' own
defaults and static generate() at several batch sizes, all in one process run.

    python bench/gpu_engine_defaults.py [--quick]

Every configuration runs through benchd's worker core on an engine of its own, started once (warm-up and CUDA-graph
capture outside every measured window) and run --repeats times; reported is the median of the runs after the
first, as benchd reports it: output tok/s over the measured window.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time

from common import REFERENCE, environment

from benchd.models.loading import load_model
from benchd.daemon.inprocess import LocalPool, run_local
from benchd.spec import parse_spec

CONFIGS: list[tuple[str, str, dict]] = [
    ("library defaults", "transformers", {"library_defaults": True}),
    ("benchd defaults", "transformers", {}),
    ("benchd defaults, 16 cpu threads", "transformers", {"cpu_threads": 16}),
    ("benchd defaults, 8 cpu threads", "transformers", {"cpu_threads": 8}),
    ("benchd defaults, 4 cpu threads", "transformers", {"cpu_threads": 4}),
    ("cuda graphs + async", "transformers", {"use_cuda_graph": True, "use_async_batching": True}),
    ("cuda graphs, no async", "transformers", {"use_cuda_graph": True, "use_async_batching": False}),
    ("cuda graphs, block 128", "transformers", {"use_cuda_graph": True, "block_size": 128}),
    ("cuda graphs, block 512", "transformers", {"use_cuda_graph": True, "block_size": 512}),
    ("cuda graphs, 2048 batch tokens", "transformers", {"use_cuda_graph": True, "max_batch_tokens": 2048}),
    ("cuda graphs, 8192 batch tokens", "transformers", {"use_cuda_graph": True, "max_batch_tokens": 8192}),
    ("cuda graphs, compile level 1", "transformers", {"use_cuda_graph": True, "compile_level": 1}),
    ("cuda graphs, compile level 2", "transformers", {"use_cuda_graph": True, "compile_level": 2}),
    ("cuda graphs, compile level 3", "transformers", {"use_cuda_graph": True, "compile_level": 3}),
    ("static batch 32", "static", {"batch_size": 32}),
    ("static batch 64", "static", {"batch_size": 64}),
    ("static batch 128", "static", {"batch_size": 128}),
    ("static batch 256", "static", {"batch_size": 256}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="run only configurations whose name contains one of these")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--repeats", type=int, default=3, help="runs per engine; the median of all but the first")
    args = parser.parse_args()
    print(environment(), flush=True)
    loaded = load_model(REFERENCE["model"], REFERENCE["dtype"], REFERENCE["device"], seed=0)
    print(f"model loaded in {loaded.load_s:.1f} s", flush=True)
    results = []
    for label, engine, options in CONFIGS:
        if args.only and not any(word in label for word in args.only):
            continue
        spec = parse_spec({**REFERENCE, "engine": engine, engine: options})
        started = time.perf_counter()
        pool = LocalPool(loaded)  # its engine starts with the first run and stays warm for the next, as a worker's
        runs = [run_local(spec, loaded=loaded, pool=pool) for _ in range(args.repeats)]
        pool.stop()
        wall = time.perf_counter() - started
        # The first pass can capture graphs for shapes the warm-up did not; a daemon's engine is warm.
        warm = runs[1:] or runs
        outcome = sorted(warm, key=lambda o: o.summaries()[0].output_tokens_per_s if o.stages else 0)[len(warm) // 2]
        s = outcome.summaries()[0] if outcome.stages else None
        row = {"config": label, "engine": engine, "options": options, "status": outcome.status,
               "error": outcome.error, "wall_s": wall,
               "all_output_tok_s": [o.summaries()[0].output_tokens_per_s for o in runs if o.stages],
               "output_tok_s": s.output_tokens_per_s if s else None,
               "ttft_p50_ms": s.ttft_s.p50 * 1e3 if s and s.ttft_s.p50 else None,
               "itl_p50_ms": s.itl_s.p50 * 1e3 if s and s.itl_s.p50 else None,
               "kv_peak": s.kv_cache_occupancy_peak if s else None,
               "settings": outcome.metadata.engine_settings if outcome.metadata else None}
        results.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "settings"}), flush=True)
        gc.collect()
    with open(os.path.join(args.out, "engine_defaults.json"), "w") as f:
        json.dump({"environment": environment(), "results": results}, f, indent=2, default=str)
    base = next((r["output_tok_s"] for r in results if r["config"] == "library defaults"), None)
    print(f"\n{'configuration':34} {'output tok/s':>12} {'× library':>10} {'TTFT p50 ms':>12} {'ITL p50 ms':>11}")
    for r in results:
        tok = r["output_tok_s"]
        ratio = f"{tok / base:.2f}" if tok and base else "–"
        print(f"{r['config']:34} {tok or 0:12.0f} {ratio:>10} {r['ttft_p50_ms'] or 0:12.1f} "
              f"{r['itl_p50_ms'] or 0:11.2f}  {r['status']}  all: {[round(x) for x in r['all_output_tok_s']]}")


if __name__ == "__main__":
    main()
