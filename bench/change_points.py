"""Change points on noise, not only on steps (docs/benchmarks/change-points.md): synthetic series with a given or
measured run-to-run noise, analysed after every run as the daemon does (benchd/measure/changes.py), for steps of 2, 5
and 10 % and slow drifts: the detection rate, the runs until detected, and false change points per 1,000 runs of
pure noise; the time to analyse 10,000 runs; and, with --measure, the run-to-run noise of benchd's own runs (the
tiny model here, the reference workload on a GPU).

    python bench/change_points.py                                  # 2 % noise, and the tiny model's measured
    python bench/change_points.py --measure 30 --out .             # the tiny model's noise, 30 runs, then as above
    PYTHONPATH=/tmp/site:src python3 bench/change_points.py --measure 20 --device cuda --model llama-3.2-1b \\
        --reference --out .                                        # a GPU's noise on the reference workload
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchd.measure import changes
from benchd.measure.history import FIGURES, Series, SeriesRun, find

SHIFTS = (0.02, 0.05, 0.10)
DRIFTS = ((0.05, 50), (0.10, 50))  # total change, over so many runs


def detections(series: np.ndarray, start: int, sign: int, first: int) -> int | None:
    """After every run from `first` on: the runs after `start` when a change point of the right sign, placed within
    min_runs of start (a drift: anywhere from start − min_runs on), was first reported; None if never."""
    for k in range(first, len(series) + 1):
        for split in changes.detect(series[:k]):
            if split.index >= start - changes.MIN_RUNS and np.sign(split.relative_change) == sign:
                return k - start
    return None


def scenario(noise: float, shape: str, size: float, runs: int, trials: int, before: int, horizon: int,
             rng: np.random.Generator) -> dict:
    found = []
    for _ in range(trials):
        y = rng.normal(0, noise, before + horizon)
        if shape == "step":
            y[before:] += math.log1p(-size)  # a figure that fell (output tok/s slower)
        else:
            y[before:] += np.log1p(-size * np.minimum(np.arange(1, horizon + 1) / runs, 1.0))
        found.append(detections(np.exp(y), before, -1, before + 1))
    hit = sorted(f for f in found if f is not None)
    return {"shape": shape, "size": size, "over": runs if shape == "drift" else 1, "noise": noise, "trials": trials,
            "detected": len(hit) / trials, "runs_median": float(np.median(hit)) if hit else None,
            "runs_p90": float(np.quantile(hit, 0.9)) if hit else None, "runs_max": max(hit) if hit else None,
            "within_10": sum(1 for f in hit if f <= 10) / trials}


def false_points(noise: float, runs: int, length: int, rng: np.random.Generator) -> dict:
    """Pure noise in series of `length` runs, analysed after every run; a change point counts when it is first
    reported and again when it comes back after being withdrawn (as the daemon's counter counts)."""
    count, series = 0, 0
    for _ in range(math.ceil(runs / length)):
        y = np.exp(rng.normal(0, noise, length))
        known: dict[int, bool] = {}  # position → active
        for k in range(2 * changes.MIN_RUNS, length + 1):
            found = [s.index for s in changes.detect(y[:k])]
            matched = set()
            for index in found:
                near = [p for p in known if abs(p - index) <= changes.MIN_RUNS and p not in matched]
                if not near:
                    known[index] = True
                    count += 1
                    matched.add(index)
                    continue
                p = min(near, key=lambda p: abs(p - index))
                if not known[p]:
                    count += 1
                known.pop(p)
                known[index] = True
                matched.add(index)
            for p in known:
                if p not in matched:
                    known[p] = False
        series += 1
    total = series * length
    return {"noise": noise, "runs": total, "false": count, "per_1000": 1000 * count / total}


def speed(runs: int, repeats: int, rng: np.random.Generator) -> dict:
    """One figure's series of `runs` runs with a step, and a workload's seven figures (measure.history.find)."""
    y = np.exp(rng.normal(0, 0.02, runs))
    y[runs // 2:] *= 1.05
    one = []
    for _ in range(repeats):
        started = time.perf_counter()
        changes.detect(y)
        one.append(time.perf_counter() - started)
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    held = [SeriesRun(f"r{i}", t0 + timedelta(hours=i), "n", "GPU", True, 0.0,
                      {name: float(y[i]) * (1 + 0.01 * j) for j, name in enumerate(FIGURES)}) for i in range(runs)]
    series = Series("w", "GPU", "n", held, [], "nominal")
    every = []
    for _ in range(repeats):
        started = time.perf_counter()
        find(series)
        every.append(time.perf_counter() - started)
    return {"runs": runs, "one_figure_s": float(np.median(one)), "seven_figures_s": float(np.median(every))}


# ---- benchd's own noise ------------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> dict:
    """args.measure runs of one spec through the daemon's lifecycle with a warm engine (as a scheduled run on a
    daemon's worker), each headline figure's run-to-run noise: the standard deviation of ln(figure), and that of
    consecutive differences / √2 (free of slow drift), and the lag-1 autocorrelation."""
    from benchd.daemon.inprocess import LocalPool, run_local
    from benchd.models.loading import load_model
    from benchd.spec import parse_spec

    if args.reference:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from common import REFERENCE

        data = {**REFERENCE, "model": args.model, "device": args.device}
    else:
        data = {"name": "noise", "model": args.model, "device": args.device,
                "dtype": "float32" if args.device == "cpu" else "bfloat16", "seed": 0,
                "transformers": {"block_size": 16, "num_blocks": 256, "max_batch_tokens": 256},
                "workload": {"arrivals": {"profile": "concurrent", "concurrency": 4}, "stop": {"requests": 32},
                             "warmup": {"requests": 4}, "prompt_tokens": {"dist": "fixed", "value": 32},
                             "output_tokens": {"dist": "fixed", "value": 32}}}
    spec = parse_spec(data)
    loaded = load_model(spec.model, dtype=spec.dtype, device=spec.device, seed=0)
    pool = LocalPool(loaded)
    values: dict[str, list[float]] = {name: [] for name in FIGURES}
    try:
        run_local(spec, pool=pool)  # the engine's first run (its start, its compiled paths): a daemon's is long past
        for i in range(args.measure):
            result = run_local(spec, pool=pool)
            stage = result.summaries()[0]
            figures = {"output_tokens_per_s": stage.output_tokens_per_s, "ttft_s.p50": stage.ttft_s.p50,
                       "ttft_s.p99": stage.ttft_s.p99, "itl_s.p50": stage.itl_s.p50, "itl_s.p99": stage.itl_s.p99,
                       "tpot_s.p50": stage.tpot_s.p50,
                       "energy_per_token_j": result.hardware.energy_per_output_token_joules
                       if result.hardware is not None else None}
            for name, value in figures.items():
                if value:
                    values[name].append(float(value))
            print(f"run {i + 1}/{args.measure}: {stage.output_tokens_per_s:,.1f} tok/s, ITL p50 "
                  f"{stage.itl_s.p50 * 1e3:.3f} ms", file=sys.stderr)
    finally:
        pool.stop()
    out = {}
    for name, series in values.items():
        if len(series) < 3:
            continue
        y = np.log(np.asarray(series))
        d = np.diff(y)
        out[name] = {"runs": len(series), "mean": float(np.exp(y.mean())), "noise": float(np.std(y, ddof=1)),
                     "noise_of_differences": float(np.std(d, ddof=1) / math.sqrt(2)),
                     "lag1_autocorrelation": float(np.corrcoef(y[:-1], y[1:])[0, 1]),
                     "values": series}
    return {"spec": data, "device": args.device, "model": args.model, "figures": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--noise", type=float, nargs="+", default=[0.02],
                        help="run-to-run noise: the standard deviation of ln(figure) (0.02: about 2 %%)")
    parser.add_argument("--noise-from", help="a JSON written by --measure: its figures' noise too")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--before", type=int, default=50, help="runs before the change")
    parser.add_argument("--horizon", type=int, default=30, help="runs after the change start, analysed after each")
    parser.add_argument("--noise-runs", type=int, default=10_000, help="runs of pure noise (series of 1,000)")
    parser.add_argument("--speed-runs", type=int, default=10_000)
    parser.add_argument("--measure", type=int, default=0, help="measure benchd's noise over this many runs first")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--reference", action="store_true", help="--measure the reference workload (a GPU)")
    parser.add_argument("--out", help="write change-points-*.json here")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    report: dict = {"settings": {"alpha": changes.ALPHA, "min_runs": changes.MIN_RUNS, "penalty": changes.PENALTY},
                    "when": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    levels = {f"{n:.1%} given": n for n in args.noise}
    measured = measure(args) if args.measure else None
    if args.noise_from:
        measured = json.loads(Path(args.noise_from).read_text())
    if measured:
        report["measured"] = measured
        print(f"\nrun-to-run noise of {measured['model']} on {measured['device']} "
              f"({next(iter(measured['figures'].values()))['runs']} runs):")
        print("| figure | mean | noise (sd of ln) | from consecutive differences | lag-1 autocorrelation |")
        print("| --- | --- | --- | --- | --- |")
        for name, f in measured["figures"].items():
            print(f"| {FIGURES[name].name} | {f['mean']:.4g} | {f['noise']:.2%} | {f['noise_of_differences']:.2%} "
                  f"| {f['lag1_autocorrelation']:+.2f} |")
        for name in ("output_tokens_per_s", "itl_s.p50"):
            if name in measured["figures"]:
                levels[f"{FIGURES[name].name}, measured"] = measured["figures"][name]["noise"]
    rows = []
    print(f"\nanalysed after every run ({args.trials} series each, {args.before} runs before the change, "
          f"{args.horizon} after; alpha {changes.ALPHA}, min_runs {changes.MIN_RUNS}, penalty {changes.PENALTY}):")
    print("| noise | change | detected | within 10 runs | runs until detected: median, p90, max |")
    print("| --- | --- | --- | --- | --- |")
    for label, noise in levels.items():
        cases = [("step", s, 1) for s in SHIFTS] + [("drift", s, n) for s, n in DRIFTS]
        for shape, size, over in cases:
            row = scenario(noise, shape, size, over, args.trials, args.before, args.horizon, rng)
            row["noise_label"] = label
            rows.append(row)
            what = f"{size:.0%} step" if shape == "step" else f"{size:.0%} drift over {over} runs"
            runs = (f"{row['runs_median']:g}, {row['runs_p90']:g}, {row['runs_max']}" if row["runs_median"] is not None
                    else "–")
            print(f"| {label} | {what} | {row['detected']:.0%} | {row['within_10']:.0%} | {runs} |", flush=True)
    report["detection"] = rows
    print("\nfalse change points in pure noise, analysed after every run (series of 1,000):")
    print("| noise | runs | false change points | per 1,000 runs |")
    print("| --- | --- | --- | --- |")
    report["false"] = []
    for label, noise in levels.items():
        row = false_points(noise, args.noise_runs, 1_000, rng)
        report["false"].append({**row, "noise_label": label})
        print(f"| {label} | {row['runs']:,} | {row['false']} | {row['per_1000']:.2f} |", flush=True)
    row = speed(args.speed_runs, 5, rng)
    report["speed"] = row
    print(f"\none analysis of {row['runs']:,} runs (median of 5): one figure {row['one_figure_s'] * 1e3:.0f} ms, "
          f"a workload's seven figures {row['seven_figures_s'] * 1e3:.0f} ms")
    if args.out:
        name = f"change-points-{args.device.split(':')[0]}-{args.model}.json"
        (Path(args.out) / name).write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {Path(args.out) / name}")


if __name__ == "__main__":
    main()
