"""Verdicts a fleet can alert on (issue 41), on a GPU: each case run by `benchd run` as a user runs it, then each
stage's verdict and what it rests on, from the summary.json it writes:

- sweep: Poisson at 2, 8 and 32 requests/s, 256 prompt and 128 output tokens, Llama-3.2-1B's shape in bf16. The 8/s
  stage read INVALID: dispatch_lag under a fixed 1 ms p99 with TTFT p50 19 ms and ITL p50 11 ms: lag p99 over TTFT
  p50 and ITL p50 now, never under 1 ms.
- closed: a closed loop of 512, prompts of 1,024–4,000 and outputs of 64–1,024 tokens, stop.duration_s 20. It ran
  265 s and was still draining: now it stops sending at 20 s and drains at most its default drain, cutting the rest.
- reference: examples/reference-gpu.yaml (256 × 256 + 256 tokens at once).

Per stage: the verdict and each broken rule's message; dispatch lag p99 against TTFT p50 and ITL p50; the requests
completed, failed and cut (their share), how long the stage drained of its bound; each GPU's clock events (share of
the sampler's reads under each NVML reason) and its mean SM clock of its maximum. And the bound `benchd run` printed
before the run against the time it took.

    PYTHONPATH=/tmp/site:src python3 bench/gpu_verdicts.py [--cases sweep closed reference] [--duration 30] [--force]
    python bench/gpu_verdicts.py --smoke     # the tiny model on the CPU, short stages: checks the script

$OUT/verdicts.json (when OUT is set) keeps every case's summary.json and the lines printed here.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REFERENCE, ROOT, environment

from benchd.measure.records import RequestRecord
from benchd.measure.summary import LatencyStats, ttft_moved

LLAMA = {"model": "llama-3.2-1b", "dtype": "bfloat16", "device": "cuda", "seed": 0}


def cases(duration_s: float, smoke: bool) -> dict[str, dict]:
    """Each case's spec; smoke: the same shapes scaled to the tiny model on the CPU."""
    if smoke:
        tiny = {"model": "tiny", "dtype": "float32", "device": "cpu", "seed": 0,
                "transformers": {"block_size": 16, "num_blocks": 256, "max_batch_tokens": 256}}
        return {
            "sweep": {**tiny, "name": "verdicts-sweep", "workload": {
                "arrivals": {"profile": "sweep", "over": "poisson", "values": [2, 8]},
                "stop": {"duration_s": 2}, "prompt_tokens": {"dist": "fixed", "value": 16},
                "output_tokens": {"dist": "fixed", "value": 8}}},
            "closed": {**tiny, "name": "verdicts-closed", "workload": {
                "arrivals": {"profile": "concurrent", "concurrency": 4}, "stop": {"duration_s": 1, "drain_s": 1},
                "prompt_tokens": {"dist": "uniform", "min": 16, "max": 64},
                "output_tokens": {"dist": "uniform", "min": 500, "max": 2000}}},
            "reference": {**tiny, "name": "verdicts-reference", "workload": {
                "arrivals": {"profile": "concurrent", "concurrency": 8}, "stop": {"requests": 8},
                "prompt_tokens": {"dist": "fixed", "value": 16}, "output_tokens": {"dist": "fixed", "value": 16}}},
        }
    return {
        "sweep": {**LLAMA, "name": "verdicts-sweep", "workload": {
            "arrivals": {"profile": "sweep", "over": "poisson", "values": [2, 8, 32]},
            "stop": {"duration_s": duration_s}, "warmup": {"seconds": 5},
            "prompt_tokens": {"dist": "fixed", "value": 256}, "output_tokens": {"dist": "fixed", "value": 128}}},
        "closed": {**LLAMA, "name": "verdicts-closed", "workload": {
            "arrivals": {"profile": "concurrent", "concurrency": 512}, "stop": {"duration_s": 20},
            "prompt_tokens": {"dist": "uniform", "min": 1024, "max": 4000},
            "output_tokens": {"dist": "uniform", "min": 64, "max": 1024}}},
        "reference": REFERENCE,
    }


def run(name: str, spec: dict, out: Path, force: bool = False) -> tuple[dict, float, str,
                                                                      list[tuple[str, RequestRecord]]]:
    """`benchd run` of the spec as a user runs it; (its summary.json, its wall time, the bound it printed, its
    requests as requests.jsonl holds them)."""
    path = out / f"{name}.json"
    path.write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "benchd.cli", "run", str(path), "--out", str(out / name),
                           *(["--force"] if force else [])], capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - started
    if not (out / name / "summary.json").exists():
        raise SystemExit(f"{name}: benchd run wrote no summary (exit {done.returncode}):\n{done.stderr[-3000:]}")
    bound = re.search(r"its stages end [^\n]*", done.stderr)
    rows = [json.loads(line) for line in (out / name / "requests.jsonl").read_text().splitlines() if line.strip()]
    records = [(row["stage"], RequestRecord.from_row(row)) for row in rows]
    return json.loads((out / name / "summary.json").read_text()), wall, bound.group(0) if bound else "?", records


def ms(value: float | None) -> str:
    return "–" if value is None else f"{value * 1e3:.2f} ms"


def moved(records: list[tuple[str, RequestRecord]], stage: str) -> str:
    """How far dispatch lag moved the stage's TTFT p50, p90 and p99 (what spec/validity.py judges)."""
    good = [r for name, r in records if name == stage and not r.warmup and r.ok]
    found = ttft_moved(good, LatencyStats.of([r.ttft_s for r in good]))
    return ", ".join(f"{name} by {ms(late - sent)} ({(late - sent) / late:.1%})" for name, late, sent in found) or "–"


def stage_lines(stage: dict, records: list[tuple[str, RequestRecord]]) -> list[str]:
    lag, ttft, itl = (stage["dispatch_lag_s"] or {}).get("p99"), stage["ttft_s"].get("p50"), stage["itl_s"].get("p50")
    verdict = "valid" if stage["valid"] else "INVALID: " + ", ".join(i["check"] for i in stage["invalid"])
    lines = [f"  {stage['stage']}: {verdict}",
             f"    dispatch lag p99 {ms(lag)}, moving TTFT {moved(records, stage['stage'])}; TTFT p50 {ms(ttft)}, "
             f"ITL p50 {ms(itl)}",
             f"    requests {stage['requests']} ok, {stage['errors']} failed, {stage.get('cut', 0)} cut "
             f"({(stage.get('cut_share') or 0):.1%}); drained "
             + ("–" if stage.get("drain_s") is None else f"{stage['drain_s']:.1f} s of ≤ {stage['drain_bound_s']:.3g} s")
             + f"; window {stage['duration_s']:.1f} s, {stage['output_tokens_per_s']:.0f} output tok/s"]
    for gpu in stage.get("clocks") or []:
        events = ", ".join(f"{event} {share:.0%}" for event, share in gpu["events"].items() if share) or "none"
        ratio = (f"{gpu['sm_clock_mean_hertz'] / gpu['sm_clock_max_hertz']:.0%}"
                 if gpu.get("sm_clock_mean_hertz") and gpu.get("sm_clock_max_hertz") else "–")
        lines.append(f"    GPU {gpu['gpu']}: {gpu['samples']} samples; clock events {events}; SM clock {ratio} of max")
    lines += [f"    invalid: {i['message']}" for i in stage["invalid"]]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", choices=["sweep", "closed", "reference"],
                        default=["sweep", "closed", "reference"])
    parser.add_argument("--duration", type=float, default=30.0, help="each sweep stage's stop.duration_s")
    parser.add_argument("--smoke", action="store_true", help="the tiny model on the CPU: checks the script")
    parser.add_argument("--force", action="store_true", help="run what admission would refuse (benchd run --force)")
    args = parser.parse_args()
    specs = cases(args.duration, args.smoke)
    printed = [environment()]
    print(printed[0], flush=True)
    kept = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.cases:
            summary, wall, bound, records = run(name, specs[name], Path(scratch), args.force)
            lines = [f"{name}: {summary['status']}, run valid: {summary['valid']}; benchd run said {bound}; "
                     f"took {wall:.0f} s with loading"]
            for stage in summary["stages"]:
                lines += stage_lines(stage, records)
            print("\n".join(lines), flush=True)
            printed += lines
            kept[name] = summary
    if os.environ.get("OUT"):
        path = Path(os.environ["OUT"]) / "verdicts.json"
        path.write_text(json.dumps({"lines": printed, "summaries": kept}, indent=1))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
