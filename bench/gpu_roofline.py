"""How far from the hardware (issue 35): the GPU's measured limits beside its datasheet, then the reference workload
run by continuous batching and by static batches of 64, each placed on that roofline (benchd.measure.roofline):
steps, achieved bandwidth and FLOP/s, MBU, MFU, the roofline bound and the fraction of it reached.

    python bench/gpu_roofline.py [--variants continuous static-64] [--warmup 1]
    python bench/gpu_roofline.py --profile    # then one round of each under torch.profiler: where the time goes
    python bench/gpu_roofline.py --smoke      # the tiny model on the CPU: checks the script
    python bench/gpu_roofline.py --spec examples/long-closed-gpu.yaml --requests 512 --variants continuous

Each variant's engine is started once (CUDA graphs captured before any timed request), runs the workload --warmup
times untimed, then once timed: all requests submitted at once, elapsed from the first submit to the last token.
The steps are those the engine counted in the timed run. $OUT/roofline.json keeps every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

from common import REFERENCE, environment

from benchd.engines import GenerationRequest, create_engine
from benchd.hardware.speed import measure
from benchd.loadgen.contents import contents
from benchd.measure.roofline import ModelCost, roofline
from benchd.models.flops import PRECISIONS, Shape, peak_bandwidth, peak_tflops
from benchd.models.loading import load_model
from benchd.models.memory import dtype_bytes
from benchd.models.quantize import streamed_weight_bytes
from benchd.spec import parse_spec

SMOKE = {**REFERENCE, "name": "smoke", "model": "tiny", "dtype": "float32", "device": "cpu",
         "transformers": {"block_size": 16, "num_blocks": 128, "max_batch_tokens": 256},
         "workload": {**REFERENCE["workload"], "arrivals": {"profile": "concurrent", "concurrency": 16},
                      "stop": {"requests": 16}, "prompt_tokens": {"dist": "fixed", "value": 32},
                      "output_tokens": {"dist": "fixed", "value": 32}}}


class Finish:
    """A TokenSink that waits for every request's end and keeps the last."""

    def __init__(self, expected: int) -> None:
        self.expected, self.ends, self.errors = expected, 0, []
        self.last_s = 0.0
        self.done = threading.Event()

    def admitted(self, request_id, t): pass
    def tokens(self, request_id, t, n, token_ids=()): pass
    def stamped_tokens(self, request_id, stamps, token_ids): pass
    def submitted(self, request_id, t): pass
    def prompt_tokens(self, request_id, n): pass

    def finished(self, request_id, t, error=None):
        if error:
            self.errors.append(error)
        self.last_s = max(self.last_s, t)
        self.ends += 1
        if self.ends == self.expected:
            self.done.set()


def run_once(engine, requests) -> float:
    sink = Finish(len(requests))
    started = time.perf_counter()
    for request in requests:
        engine.submit(request, sink)
    if not sink.done.wait(1800):
        raise SystemExit("the engine did not finish")
    if sink.errors:
        raise SystemExit(f"{len(sink.errors)} requests failed: {sink.errors[0]}")
    return sink.last_s - started


def limits(speed, dtype: str) -> list[dict]:
    """The measured limits beside the datasheet's (None where the device is not in the table)."""
    rows = [{"limit": "bandwidth GB/s", "measured": speed.copy_bytes_per_s / 1e9,
             "datasheet": (peak_bandwidth(speed.name) or 0) / 1e9 or None}]
    for name, rate in speed.matmul_flops_per_s.items():
        sheet = peak_tflops(speed.name, PRECISIONS[name])
        rows.append({"limit": f"{name} TFLOP/s", "measured": rate / 1e12, "datasheet": sheet})
    for row in rows:
        row["of_datasheet"] = row["measured"] / row["datasheet"] if row["datasheet"] else None
    return rows


def where_time_goes(profile, wall_s: float, gpu: bool, top: int = 12) -> dict:
    """One profiled round: the device's busy time (its kernels', one stream) against the round's wall time, and the
    kernels that took most of it, by name (on the CPU: the operators, by self time)."""
    import torch

    spent: dict[str, float] = {}
    if gpu:
        for event in profile.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                spent[event.name] = spent.get(event.name, 0.0) + event.time_range.elapsed_us() / 1e6
    else:
        for event in profile.key_averages():
            spent[event.key] = spent.get(event.key, 0.0) + event.self_cpu_time_total / 1e6
    busy = sum(spent.values())
    ranked = sorted(spent.items(), key=lambda kv: -kv[1])[:top]
    return {"counted": "the GPU's kernels" if gpu else "the operators' self time, every thread", "wall_s": wall_s,
            "busy_s": busy, "busy_of_wall": busy / wall_s if wall_s else None,
            "top": [{"name": name[:120], "s": t, "of_wall": t / wall_s if wall_s else None} for name, t in ranked]}


def variant(loaded, base: dict, name: str, cost: ModelCost, speed, warmup: int, profile: bool = False) -> dict:
    data = json.loads(json.dumps(base))
    if "@" in name:  # continuous@paged|triton_paged: that attention
        data["attn_implementation"] = name.split("@", 1)[1]
    if name.startswith("static-"):
        data |= {"engine": "static", "static": {"batch_size": int(name.split("-", 1)[1])}}
    spec = parse_spec(data)
    stream = contents(spec.workload, spec.seed, loaded.vocab_size, loaded.special_ids)
    made = [next(stream) for _ in range(spec.workload.stop.requests)]
    engine = create_engine(loaded, spec)
    engine.start()
    try:
        for round_ in range(warmup + 1):
            requests = [GenerationRequest(f"{round_}-{i}", c.prompt_ids, c.max_new_tokens) for i, c in enumerate(made)]
            engine.forget()  # the warm-up's prompts cached: each round prefills its own, as a daemon's run does
            mark = len(engine.steps)
            elapsed_s = run_once(engine, requests)
        steps = engine.steps.since(mark)
        where = None
        if profile:  # one more round, profiled (slower than the timed one: its own wall time is the reference)
            import torch
            from torch.profiler import ProfilerActivity

            gpu = loaded.device.type == "cuda"
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
            requests = [GenerationRequest(f"p-{i}", c.prompt_ids, c.max_new_tokens) for i, c in enumerate(made)]
            engine.forget()
            threads = None  # on the CPU the operators run on the engine's thread, which the profiler sees only so
            if not gpu:
                threads = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
            with torch.profiler.profile(activities=activities, experimental_config=threads) as profiled:
                profiled_s = run_once(engine, requests)
            where = where_time_goes(profiled, profiled_s, gpu)
    finally:
        engine.stop()
    line = roofline(steps, cost, elapsed_s, speed.copy_bytes_per_s, speed.flops_per_s(spec.dtype))
    output = sum(c.max_new_tokens for c in made)
    return {"variant": name, "output_tok_s": output / elapsed_s, **line.as_dict(), "where": where}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="+", default=["continuous", "static-64"])
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="the tiny model on the CPU")
    parser.add_argument("--profile", action="store_true",
                        help="then one more round of each under torch.profiler: where the time goes")
    parser.add_argument("--spec", help="a spec file (YAML) whose model and workload stand for the reference's: its "
                                       "first --requests requests, all at once")
    parser.add_argument("--requests", type=int, default=256)
    args = parser.parse_args()
    base = SMOKE if args.smoke else REFERENCE
    if args.spec:
        import yaml

        given = yaml.safe_load(Path(args.spec).read_text())
        base = {"dtype": "auto", **{k: v for k, v in given.items() if k not in ("matrix", "repeats", "baseline")},
                "seed": 0}
        base["workload"] = {**base["workload"], "stop": {"requests": args.requests},
                            "arrivals": {"profile": "concurrent", "concurrency": args.requests}}
    device = base["device"]
    speed = measure(device)
    loaded = load_model(base["model"], dtype=base["dtype"], device=device, seed=base["seed"])
    element = dtype_bytes(base["dtype"], loaded.device.type)
    cost = ModelCost.of(Shape.of(loaded.model.config), streamed_weight_bytes(loaded.model), element)
    print(environment())
    print(f"\n{speed.name}: measured limits (best of the probe's calls) against the datasheet")
    print(f"{'limit':<20}{'measured':>12}{'datasheet':>12}{'of sheet':>10}")
    table = limits(speed, base["dtype"])
    for row in table:
        sheet = f"{row['datasheet']:,.1f}" if row["datasheet"] else "-"
        share = f"{row['of_datasheet']:.0%}" if row["of_datasheet"] else "-"
        print(f"{row['limit']:<20}{row['measured']:>12,.1f}{sheet:>12}{share:>10}")
    print(f"\n{base['model']} {base['dtype']}: {cost.weight_bytes / 1e9:.2f} GB of weights a step, "
          f"{cost.kv_bytes_per_token / 1e3:.1f} kB of K and V a token")
    rows = [variant(loaded, base, name, cost, speed, args.warmup, args.profile) for name in args.variants]
    print(f"\n{'variant':<12}{'tok/s':>9}{'steps':>7}{'elapsed s':>10}{'GB/s':>9}{'TFLOP/s':>9}{'MBU':>7}"
          f"{'MFU':>7}{'bound s':>9}{'of bound':>9}  bound by")
    for r in rows:
        print(f"{r['variant']:<12}{r['output_tok_s']:>9,.0f}{r['steps']:>7}{r['elapsed_s']:>10.2f}"
              f"{r['achieved_bytes_per_s'] / 1e9:>9,.1f}{r['achieved_flops_per_s'] / 1e12:>9.2f}{r['mbu']:>7.1%}"
              f"{r['mfu']:>7.1%}{r['bound_s']:>9.3f}{r['of_bound']:>9.1%}  {r['bound_by']}")
    for r in rows:
        if (where := r["where"]) is not None:
            print(f"\n{r['variant']}, profiled round: {where['wall_s']:.2f} s wall, {where['counted']} "
                  f"{where['busy_s']:.2f} s ({where['busy_of_wall']:.0%}); most of it:")
            for k in where["top"]:
                print(f"  {k['s']:8.3f} s {k['of_wall']:6.1%}  {k['name']}")
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    (out / "roofline.json").write_text(json.dumps({"environment": environment(), "speed": speed.as_dict(),
                                                   "limits": table, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
