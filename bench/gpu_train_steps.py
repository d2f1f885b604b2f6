"""Training steps on a GPU: the forward/backward table of the five classic sizes, the warm-up study, and the
memory breakdown against the allocator's peak. Every figure comes from benchd's own train_step runs.

    python bench/gpu_train_steps.py [--sizes small medium large xl 2.7B] [--context 512] [--batch 4]

The warm-up study runs first, so its level 0 is the process's first work on the GPU (a cold start, as a fresh
`benchd run` would see it).
"""

from __future__ import annotations

import argparse
import json
import os

from common import environment

from benchd.spec import parse_spec
from benchd.timed import run_timed

PRECISIONS = {"fp32": {"dtype": "float32"}, "bf16": {"dtype": "bfloat16"},
              "bf16 autocast": {"dtype": "float32", "autocast": "bfloat16"}}


def train(model: str, precision: str, mode: str, batch: int, context: int, **options):
    settings = dict(PRECISIONS[precision])
    autocast = settings.pop("autocast", None)
    spec = parse_spec({"kind": "train_step", "name": f"train-{model}", "model": model, "device": "cuda",
                       **settings, "train_step": {"mode": mode, "batch_size": batch, "context_length": context,
                                                  "autocast": autocast, **options}})
    outcome = run_timed(spec)
    if outcome.status != "succeeded":
        print(f"{model} {precision} {mode}: {outcome.status}: {outcome.error}", flush=True)
    return outcome


def ms(stats) -> str:
    return "–" if stats is None or stats.mean is None else f"{stats.mean * 1e3:.2f} ± {stats.std * 1e3:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", nargs="*", default=["small", "medium", "large", "xl", "2.7B"])
    parser.add_argument("--precisions", nargs="*", default=list(PRECISIONS))
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--study-size", default="small")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    print(environment(), flush=True)
    results: dict = {"environment": environment()}

    study = train(args.study_size, "fp32", "forward_backward", args.batch, args.context,
                  warmup_study=[0, 1, 2, 5])
    results["warmup_study"] = [s.model_dump(mode="json") for s in study.results]
    print(f"\nwarm-up study: {args.study_size}, fp32, forward + backward, batch {args.batch} × {args.context}, "
          "10 measured steps each")
    print("| warm-up steps | forward ms (mean ± std) | backward ms | step ms | step min / max ms |")
    print("| --- | --- | --- | --- | --- |")
    for s in study.results:
        step = s.phases["step"]
        print(f"| {s.warmup_steps} | {ms(s.phases['forward'])} | {ms(s.phases['backward'])} | {ms(step)} | "
              f"{step.min * 1e3:.2f} / {step.max * 1e3:.2f} |", flush=True)

    rows = []
    for precision in args.precisions:
        for size in args.sizes:
            outcome = train(size, precision, "forward_backward", args.batch, args.context)
            if not outcome.results:
                continue
            s = outcome.results[0]
            rows.append((size, precision, s))
            print(json.dumps({"size": size, "precision": precision, "forward_ms": ms(s.phases.get("forward")),
                              "backward_ms": ms(s.phases.get("backward")), "mfu": s.mfu,
                              "peak_gib": (s.memory.peak_allocated or 0) / 2**30, "status": s.status}), flush=True)
    results["table"] = [{"size": size, "precision": p, **s.model_dump(mode="json")} for size, p, s in rows]
    print(f"\nforward and backward, batch {args.batch} × context {args.context}, 5 warm-up + 10 measured steps")
    print("| size | parameters | precision | forward ms | backward ms | step ms | tokens/s | TFLOP/s | MFU | "
          "peak GiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for size, precision, s in rows:
        print(f"| {size} | {s.parameters:,} | {precision} | {ms(s.phases['forward'])} | {ms(s.phases['backward'])} "
              f"| {ms(s.phases['step'])} | {s.tokens_per_s:,.0f} | {s.achieved_tflops:.1f} | "
              f"{s.mfu:.1%} of {s.peak_tflops:g} | {(s.memory.peak_allocated or 0) / 2**30:.2f} |")

    memory = train("2.7B", "fp32", "train", args.batch, args.context, warmup_steps=1, steps=3)
    if memory.results:
        m = memory.results[0].memory
        results["memory_2.7B_fp32_train"] = memory.results[0].model_dump(mode="json")
        print("\n2.7B fp32, forward + backward + AdamW: analytic breakdown beside the allocator's peak (GiB)")
        print("| parameters | gradients | AdamW states | activations (est.) | total (est.) | peak allocated |")
        print("| --- | --- | --- | --- | --- | --- |")
        print(f"| {m.parameters / 2**30:.2f} | {m.gradients / 2**30:.2f} | {m.optimizer_states / 2**30:.2f} | "
              f"{m.activations / 2**30:.2f} | {m.total / 2**30:.2f} | "
              f"{(m.peak_allocated or 0) / 2**30:.2f} |")
    with open(os.path.join(args.out, "train_steps.json"), "w") as f:
        json.dump(results, f, indent=2, default=str)


if __name__ == "__main__":
    main()
