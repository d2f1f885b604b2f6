"""Where a continuous-batching engine's GPU memory goes: each probe runs one configuration on one workload through
benchd's worker core in a fresh process and reports the cache, the attention masks, every CUDA-graph capture (its
shape key and how much the graph pool grew), the warm-up's captures, memory over time and, on a failure, the
allocator's state (private pools, i.e. CUDA graphs, apart).

    python bench/gpu_memory.py --model llama-3.2-1b --probe "main defaults=issue32:{}" \
        --probe "planned=issue32:{\"max_batch_tokens\": 2048, \"num_blocks\": 1024}"

A probe is LABEL=WORKLOAD:OPTIONS, OPTIONS the spec's `transformers:` options as JSON ({} = benchd's defaults,
{"library_defaults": true} = transformers' own). Workloads: issue32 (issue 31's 32/s Poisson stage alone),
sweep (its whole sweep 2, 8, 32/s), reference (256 × 256/256 all at once, run --repeats times on one warm engine).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import threading
import time

from common import REFERENCE, ROOT, environment

GIB = 2**30
ISSUE_WORKLOAD = {
    "stop": {"duration_s": 30}, "warmup": {"requests": 4},
    "prompt_tokens": {"dist": "fixed", "value": 256}, "output_tokens": {"dist": "fixed", "value": 128},
}
WORKLOADS = {
    "issue32": {**ISSUE_WORKLOAD, "arrivals": {"profile": "poisson", "rate": 32}},
    "sweep": {**ISSUE_WORKLOAD, "arrivals": {"profile": "sweep", "over": "poisson", "values": [2, 8, 32]}},
    "reference": REFERENCE["workload"],
}


# ---- in the probe's own process ------------------------------------------------------------------------------

def private_pools() -> dict:
    """Segments the caching allocator holds, split into the default pool and private pools (CUDA graphs)."""
    import torch

    out = {"private_bytes": 0, "private_segments": 0, "default_bytes": 0, "default_segments": 0}
    for segment in torch.cuda.memory_snapshot():
        pool = tuple(segment.get("segment_pool_id", (0, 0)))
        side = "default" if pool == (0, 0) else "private"
        out[f"{side}_bytes"] += segment["total_size"]
        out[f"{side}_segments"] += 1
    return out


def memory_now() -> dict:
    import torch

    free, total = torch.cuda.mem_get_info()
    return {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
            "device_used": total - free, "device_total": total}


class Probe:
    """Instruments transformers' model runner (graph captures, warm-up) and benchd's engine start."""

    def __init__(self) -> None:
        self.captures: list[dict] = []
        self.warmups: list[dict] = []
        self.engine: dict = {}
        self.timeline: list[dict] = []
        self.warnings: list[str] = []
        self._stop = threading.Event()

    def install(self) -> None:
        import torch
        from transformers.generation.continuous_batching import model_runner

        from benchd.engines.transformers import engine as transformers

        probe = self
        runner_cls = model_runner.ModelRunner
        capture, warmup = runner_cls._capture_graph, runner_cls.run_one_warmup

        def io_of(runner):
            io = runner.inputs_and_outputs
            return io.io_pairs[io.current_pair].device_io if hasattr(io, "io_pairs") else io

        def timed_capture(self, forward_fn, stream, *args):
            torch.cuda.synchronize()
            before, started = memory_now(), time.perf_counter()
            try:
                return capture(self, forward_fn, stream, *args)
            finally:
                torch.cuda.synchronize()
                after = memory_now()
                probe.captures.append({"t": started, "key": list(io_of(self)._get_graph_key()),
                                       "s": time.perf_counter() - started,
                                       "reserved_delta": after["reserved"] - before["reserved"],
                                       "reserved": after["reserved"]})

        def timed_warmup(self, model, num_q_tokens, max_kv_read):
            n = len(probe.captures)
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            duration = warmup(self, model, num_q_tokens, max_kv_read)
            probe.warmups.append({"q": num_q_tokens, "kv": max_kv_read, "s": duration,
                                  "captured": len(probe.captures) > n,
                                  "peak_over_base": torch.cuda.max_memory_allocated() - base})
            return duration

        runner_cls._capture_graph, runner_cls.run_one_warmup = timed_capture, timed_warmup

        start = transformers.TransformersEngine.start

        def described_start(self):
            start(self)
            probe.engine = describe(self)

        transformers.TransformersEngine.start = described_start

        class Warnings(logging.Handler):
            def emit(self, record):
                probe.warnings.append(record.getMessage()[:300])

        handler = Warnings(logging.WARNING)
        logging.getLogger("transformers").addHandler(handler)
        for name in ("transformers.generation.continuous_batching.requests",
                     "transformers.generation.continuous_batching"):
            logging.getLogger(name).addHandler(handler)
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        t0 = time.perf_counter()
        while not self._stop.wait(0.5):
            row = {"t": round(time.perf_counter() - t0, 2), **memory_now()}
            self.timeline.append(row)

    def stop(self) -> None:
        self._stop.set()


def describe(engine) -> dict:
    """The started engine's cache, masks and static tensors, and memory right after its warm-up."""
    from benchd.engines.transformers.batching import SIZE_FIELD

    processor = engine._manager.batch_processor
    cache, config = processor.cache, engine._manager.continuous_batching_config
    io = processor.inputs_and_outputs
    ios = [pair.device_io for pair in io.io_pairs] if hasattr(io, "io_pairs") else [io]
    nbytes = lambda tensors: sum(t.numel() * t.element_size() for t in tensors)  # noqa: E731
    masks = [m for each in ios if each.attention_mask is not None for m in each.attention_mask.values()]
    return {
        # 5.24 names the block size page_size (SIZE_FIELD), keeps the cache in one tensor of sectors, and counts the
        # tokens a step may read (max_tokens_read) where 5.17 counted pages
        "num_blocks": cache.num_blocks, "block_size": getattr(config, SIZE_FIELD),
        "num_pages": getattr(cache, "num_pages", None), "max_tokens_read": getattr(cache, "max_tokens_read", None),
        "max_batch_tokens": cache.max_batch_tokens,
        "max_requests_per_batch": config.max_requests_per_batch,
        "use_cuda_graph": list(config.cuda_graph_booleans), "use_async_batching": config.use_async_batching,
        "q_padding": config.q_padding_interval_size, "kv_padding": config.kv_padding_interval_size,
        "max_memory_percent": config.max_memory_percent,
        "kv_cache_bytes": nbytes([cache.cache_tensor] if hasattr(cache, "cache_tensor")
                                 else [*cache.key_cache, *cache.value_cache]),
        "mask_bytes": nbytes(masks), "mask_shapes": [list(m.shape) for m in masks],
        "index_bytes": sum(nbytes([each.read_index_storage, each.write_index_storage]) for each in ios),
        "after_start": {**memory_now(), **private_pools()},
    }


def stage_row(summary) -> dict:
    ms = lambda v: None if v is None else round(v * 1e3, 2)  # noqa: E731
    return {"stage": summary.stage, "status": summary.status, "requests": summary.requests,
            "errors": summary.errors, "output_tok_s": round(summary.output_tokens_per_s or 0, 1),
            "ttft_p50_ms": ms(summary.ttft_s.p50), "ttft_p99_ms": ms(summary.ttft_s.p99),
            "itl_p50_ms": ms(summary.itl_s.p50), "itl_p99_ms": ms(summary.itl_s.p99),
            "kv_peak": summary.kv_cache_occupancy_peak,
            "valid": summary.valid, "invalid": [i.message for i in summary.invalid]}


def child(model: str, workload: str, options: dict, repeats: int) -> dict:
    import torch

    sys.path.insert(0, str(ROOT / "src"))
    from benchd.models.loading import load_model
    from benchd.spec import parse_spec
    from benchd.daemon.inprocess import LocalPool, run_local

    probe = Probe()
    probe.install()
    loaded = load_model(model, "bfloat16", "cuda", seed=0)
    weights = torch.cuda.memory_allocated()
    spec = parse_spec({"name": f"memory-{workload}", "model": model, "dtype": "bfloat16", "device": "cuda",
                       "seed": 0, "engine": "transformers", "transformers": options,
                       "workload": WORKLOADS[workload]})
    pool = LocalPool(loaded)
    runs = []
    failure = None
    try:
        for _ in range(repeats if workload == "reference" else 1):
            torch.cuda.reset_peak_memory_stats()
            outcome = run_local(spec, loaded=loaded, pool=pool)
            runs.append({"status": outcome.status, "error": (outcome.error or "")[:1500],
                         "stages": [stage_row(s) for s in outcome.summaries()],
                         "peak_reserved": torch.cuda.max_memory_reserved(),
                         "peak_allocated": torch.cuda.max_memory_allocated()})
            if outcome.status != "succeeded":
                failure = {**memory_now(), **private_pools()}
                break
    finally:
        probe.stop()
        pool.stop()
    deltas = sorted((c["reserved_delta"] for c in probe.captures), reverse=True)
    return {"model": model, "workload": workload, "options": options, "weights_bytes": weights,
            "engine": probe.engine, "warmups": probe.warmups, "runs": runs, "failure": failure,
            "captures": len(probe.captures), "capture_s": round(sum(c["s"] for c in probe.captures), 2),
            "capture_growth_bytes": sum(deltas), "largest_growths": deltas[:8],
            "capture_keys": [c["key"] for c in probe.captures][:400],
            "capture_log": [{k: c[k] for k in ("key", "reserved_delta", "reserved")} for c in probe.captures][:400],
            "timeline": probe.timeline[::4], "warnings": probe.warnings[:20],
            "peak_device_used": max((r["device_used"] for r in probe.timeline), default=None)}


# ---- the parent ---------------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3.2-1b")
    parser.add_argument("--probe", action="append", default=[], help="LABEL=WORKLOAD:OPTIONS (JSON)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        label, workload, options = json.loads(args.child)
        print("RESULT " + json.dumps(child(args.model, workload, options, args.repeats)), flush=True)
        return
    print(environment(), flush=True)
    results = []
    for probe in args.probe:
        label, rest = probe.split("=", 1)
        workload, options = rest.split(":", 1)
        started = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, __file__, "--model", args.model, "--repeats", str(args.repeats),
                                   "--child", json.dumps([label, workload, json.loads(options)])],
                                  capture_output=True, text=True, timeout=args.timeout)
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            result = json.loads(lines[-1][7:]) if lines else {"crash": done.stderr[-3000:]}
        except subprocess.TimeoutExpired as timeout:
            result = {"crash": f"timed out after {args.timeout} s", "stderr": (timeout.stderr or b"")[-2000:].decode()}
        result.update(label=label, wall_s=round(time.perf_counter() - started, 1))
        results.append(result)
        report(result)
    with open(os.path.join(args.out, f"gpu_memory_{args.model}.json"), "w") as out:
        json.dump({"environment": environment(), "results": results}, out, indent=1)


def report(r: dict) -> None:
    print(f"\n== {r['label']} ({r.get('workload')}, {r.get('options')}) in {r['wall_s']} s", flush=True)
    if "crash" in r:
        print("CRASH:", r["crash"][-1500:], flush=True)
        return
    e = r["engine"]
    if e:
        start = e["after_start"]
        print(f"weights {r['weights_bytes'] / GIB:.2f} GiB; cache {e['kv_cache_bytes'] / GIB:.2f} GiB "
              f"({e['num_blocks']} × {e['block_size']} tokens); masks {e['mask_bytes'] / GIB:.2f} "
              f"GiB {e['mask_shapes']}; max_batch_tokens {e['max_batch_tokens']}; graphs {e['use_cuda_graph']} "
              f"async {e['use_async_batching']}; padding q {e['q_padding']} kv {e['kv_padding']}")
        print(f"after start: allocated {start['allocated'] / GIB:.2f} reserved {start['reserved'] / GIB:.2f} "
              f"private pools {start['private_bytes'] / GIB:.2f} GiB, device used {start['device_used'] / GIB:.2f} "
              f"of {start['device_total'] / GIB:.2f} GiB")
    for w in r["warmups"]:
        print(f"  warm-up q={w['q']} kv={w['kv']}: {w['s']:.2f} s, captured {w['captured']}, "
              f"peak over base {w['peak_over_base'] / GIB:.2f} GiB")
    print(f"captures {r['captures']} in {r['capture_s']} s, pool growth {r['capture_growth_bytes'] / GIB:.2f} GiB, "
          f"largest {[round(d / GIB, 2) for d in r['largest_growths']]}")
    for run in r["runs"]:
        print(f"  run {run['status']}: peak reserved {run['peak_reserved'] / GIB:.2f} GiB, allocated "
              f"{run['peak_allocated'] / GIB:.2f} GiB {run['error'][:600]}")
        for stage in run["stages"]:
            print("   ", stage)
    if r["failure"]:
        f = r["failure"]
        print(f"  at failure: allocated {f['allocated'] / GIB:.2f} reserved {f['reserved'] / GIB:.2f} private pools "
              f"{f['private_bytes'] / GIB:.2f} ({f['private_segments']} segments) default {f['default_bytes'] / GIB:.2f} "
              f"GiB")
    print(f"  peak device used {r['peak_device_used'] and r['peak_device_used'] / GIB:.2f} GiB; warnings: "
          f"{r['warnings'][:3]}", flush=True)


if __name__ == "__main__":
    main()
