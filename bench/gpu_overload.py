"""Overload that plateaus (issue 50, item 3): an open-loop sweep from under the engine's capacity to past it, once a
value of one setting (the spec's matrix: transformers.scheduler, FIFO against benchd's split steps), alternating in
one invocation, each a fresh `benchd run` (its own process and engine). Per stage: offered and
completed requests a second, completed against the variant's best valid stage (its capacity), TTFT, ITL, the cache's
peak occupancy, requests cut at the drain and the stage's verdict; and its steps and prefill tokens (re-prefilled
ones included: a request transformers soft-resets for want of cache blocks is prefilled again).

    python3 bench/gpu_overload.py [--spec examples/overload-gpu.yaml] [--rounds 1]
    python3 bench/gpu_overload.py --smoke     # the tiny model on the CPU: checks the script

$OUT/overload.json (or ./overload.json) keeps every stage's figures and the environment.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from common import ROOT, environment

SMOKE = {"model": "tiny", "dtype": "float32", "device": "cpu",
         "transformers": {"block_size": 16, "num_blocks": 32, "max_batch_tokens": 128},
         "workload": {"arrivals": {"profile": "sweep", "over": "poisson", "values": [2, 40]},
                      "stop": {"duration_s": 3, "drain_s": 3}, "warmup": {"requests": 2},
                      "prompt_tokens": {"dist": "normal", "mean": 60, "std": 30, "min": 8, "max": 120},
                      "output_tokens": {"dist": "normal", "mean": 80, "std": 30, "min": 4, "max": 200}}}


def variants(document: dict, smoke: bool) -> dict[str, dict]:
    """The spec of each value of the matrix's one setting (a dotted path): the file's own fields, without its
    matrix."""
    base = {k: v for k, v in document.items() if k not in ("matrix", "repeats", "baseline")}
    if smoke:
        base = {**base, **SMOKE}
    [(path, values)] = document["matrix"].items()
    specs = {}
    for value in values:
        spec = json.loads(json.dumps(base))
        *parents, leaf = path.split(".")
        node = spec
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
        specs[f"{leaf}-{value}"] = spec
    return specs


def run(spec: dict, out: Path) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(spec, f)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "benchd.cli", "run", f.name, "--out", str(out)], env=env,
                          capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: a run whose verdict is invalid (an overloaded stage is)
        raise SystemExit(f"benchd run exited with {done.returncode}:\n{done.stderr[-3000:]}")
    return json.loads((out / "summary.json").read_text())


def stages(summary: dict) -> list[dict]:
    rows = []
    for s in summary["stages"]:
        rows.append({
            "stage": s["stage"], "offered": s.get("offered_requests_per_s"),
            "completed": s.get("completed_requests_per_s"), "requests": s["requests"], "cut": s.get("cut"),
            "output_tok_s": s["output_tokens_per_s"], "ttft_p50_s": (s.get("ttft_s") or {}).get("p50"),
            "itl_p50_s": (s.get("itl_s") or {}).get("p50"), "itl_p90_s": (s.get("itl_s") or {}).get("p90"),
            "kv_peak": s.get("kv_cache_occupancy_peak"), "valid": s.get("valid"),
            "steps": (s.get("roofline") or {}).get("steps"),
            "prefill_tokens": (s.get("roofline") or {}).get("prefill_tokens"),
            "invalid": [i.get("check") for i in s.get("invalid") or []]})
    capacity = max((r["completed"] or 0 for r in rows if r["valid"]), default=None)
    for r in rows:
        r["of_capacity"] = r["completed"] / capacity if capacity and r["completed"] else None
    return rows


def show(name: str, rows: list[dict]) -> None:
    print(f"\n{name}")
    print(f"{'stage':>16} {'offered':>8} {'done/s':>7} {'of cap':>7} {'cut':>5} {'tok/s':>8} {'TTFT p50':>9} "
          f"{'ITL p50':>8} {'ITL p90':>8} {'kv peak':>7} {'steps':>6} {'prefill':>9}  verdict")

    def ms(x):
        return f"{x * 1e3:.1f}" if x is not None else "–"

    for r in rows:
        print(f"{r['stage']:>16} {r['offered'] or 0:8.2f} {r['completed'] or 0:7.2f} "
              f"{(r['of_capacity'] or 0) * 100:6.1f}% {r['cut'] or 0:5d} {r['output_tok_s']:8.0f} "
              f"{ms(r['ttft_p50_s']):>9} {ms(r['itl_p50_s']):>8} {ms(r['itl_p90_s']):>8} "
              f"{(r['kv_peak'] or 0) * 100:6.1f}% {r['steps'] or 0:6d} {r['prefill_tokens'] or 0:9d}  "
              f"{'valid' if r['valid'] else ', '.join(r['invalid'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default=str(ROOT / "examples" / "overload-gpu.yaml"))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    out = Path(os.environ.get("OUT", "."))
    specs = variants(yaml.safe_load(Path(args.spec).read_text()), args.smoke)
    print(environment())
    results: dict[str, list] = {name: [] for name in specs}
    for round_ in range(args.rounds):
        order = list(specs) if round_ % 2 == 0 else list(reversed(specs))  # each variant first in turn
        for name in order:
            rows = stages(run(specs[name], out / f"{name}-round{round_}"))
            results[name].append(rows)
            show(f"{name}, round {round_ + 1}", rows)
    (out / "overload.json").write_text(json.dumps({"environment": environment(), "spec": args.spec,
                                                   "results": results}, indent=1))


if __name__ == "__main__":
    main()
