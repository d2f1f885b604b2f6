"""A start refused after the warm-up gives its memory back: in one worker core, the default run, then a run whose
engine start is refused after the warm-up (async batching under transformers 5.17 with paged sdpa, docs/memory.md),
then the default run twice more. Prints each run's status, throughput and the device's memory right after it.

    python bench/gpu_refused_start.py [--model llama-3.2-1b] [--requests 64]
"""

from __future__ import annotations

import argparse

import torch
from common import REFERENCE, environment

from benchd.daemon.inprocess import LocalPool, run_local
from benchd.models.loading import load_model
from benchd.spec import parse_spec

GIB = 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3.2-1b")
    parser.add_argument("--requests", type=int, default=64)
    args = parser.parse_args()
    print(environment(), flush=True)
    workload = {**REFERENCE["workload"], "stop": {"requests": args.requests},
                "arrivals": {"profile": "concurrent", "concurrency": args.requests}}
    loaded = load_model(args.model, "bfloat16", "cuda", seed=0)
    pool = LocalPool(loaded)
    try:
        for label, options in [("default", {}), ("async, refused", {"use_async_batching": True}),
                               ("default after", {}), ("default again", {})]:
            spec = parse_spec({"name": "refused-start", "model": args.model, "dtype": "bfloat16", "device": "cuda",
                               "seed": 0, "engine": "transformers", "transformers": options, "workload": workload})
            outcome = run_local(spec, loaded=loaded, pool=pool)
            summaries = outcome.summaries()
            rate = f"{summaries[0].output_tokens_per_s:,.0f} tok/s" if summaries else (outcome.error or "")[:120]
            free, total = torch.cuda.mem_get_info()
            print(f"{label}: {outcome.status}, {rate}; allocated {torch.cuda.memory_allocated() / GIB:.2f} GiB, "
                  f"reserved {torch.cuda.memory_reserved() / GIB:.2f} GiB, {free / GIB:.2f} of {total / GIB:.2f} GiB "
                  "free", flush=True)
    finally:
        pool.stop()


if __name__ == "__main__":
    main()
