"""Where the transformers engine's dispatch lag comes from on CPU: the same seeded Poisson run on the tiny model in
this process (benchd's worker core, no daemon, no HTTP), with the engine idle between arrivals (1 output token) and
generating (32), at several GIL switch intervals, with the engine's thread giving way to due sends (engines/handoff.py)
and without, alternating, and every garbage collection timed: the run's dispatch lag p50, p99 and max, and whether a
collection overlapped any of the latest dispatches.

    python bench/dispatch_lag.py [--requests 150] [--rate 5] [--cpu-threads 1] [--switch-intervals 0.005,0.0002]
                                 [--handoff on,off] [--repeats 1]

Runs on the project's 2-core CPU machine (no GPU); prints one line a configuration."""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from http_load import workload  # the same run as bench/http_load.py's, without the daemon

import benchd.engines.transformers.engine as transformers_cb
from benchd.models.loading import load_model
from benchd.spec import RunSpec, validate_spec
from benchd.daemon.inprocess import run_local


class Collections:
    """Every garbage collection's start and end (perf_counter seconds), from gc.callbacks."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []
        self._start = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.spans.append((self._start, time.perf_counter()))


def spec(rate: float, requests: int, output_tokens: int, prompt_tokens: int, cpu_threads: int) -> RunSpec:
    data = workload(rate, requests, cpu_threads)
    data["workload"]["prompt_tokens"]["value"] = prompt_tokens
    data["workload"]["output_tokens"]["value"] = output_tokens
    return validate_spec({**data, "name": "dispatch-lag", "model": "tiny", "dtype": "float32",
                                   "device": "cpu"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--rate", type=float, default=5.0)
    parser.add_argument("--cpu-threads", type=int, default=1)
    parser.add_argument("--switch-intervals", default="0.005,0.0002", type=lambda s: [float(x) for x in s.split(",")])
    parser.add_argument("--handoff", default="on,off", type=lambda s: s.split(","),
                        help="the engine's thread gives way to due sends (on), or has no hooks to (off)")
    parser.add_argument("--repeats", type=int, default=1, help="the generating cases, alternating, this many times")
    args = parser.parse_args()
    loaded = load_model("tiny", dtype="float32", device="cpu", seed=0)
    collections = Collections()
    gc.callbacks.append(collections)
    hooks = transformers_cb.handoff_hooks
    cases = [("idle engine", 1, 4, args.switch_intervals[0], args.handoff[0])]
    cases += [("generating", 32, 32, interval, handoff) for _ in range(args.repeats)
              for interval in args.switch_intervals for handoff in args.handoff]
    for name, output_tokens, prompt_tokens, interval, handoff in cases:
        sys.setswitchinterval(interval)
        transformers_cb.handoff_hooks = hooks if handoff == "on" else lambda model, handoff: []
        collections.spans.clear()
        outcome = run_local(spec(args.rate, args.requests, output_tokens, prompt_tokens, args.cpu_threads), loaded)
        records = [r for r in outcome.stages[0].records if not r.warmup]
        lags = sorted(r.dispatch_lag_s for r in records)
        p99 = statistics.quantiles(lags, n=100, method="inclusive")[98]
        latest = sorted(records, key=lambda r: -r.dispatch_lag_s)[:max(1, len(records) // 100)]
        spans = collections.spans
        overlapping = sum(any(s < r.submitted_s and e > r.scheduled_s for s, e in spans) for r in latest)
        longest = max((e - s for s, e in spans), default=0.0)
        print(f"{name} ({prompt_tokens}/{output_tokens} tokens), switch interval {interval * 1e3:g} ms, handoff "
              f"{handoff}: dispatch lag "
              f"p50 {statistics.median(lags) * 1e3:.2f} p99 {p99 * 1e3:.2f} max {lags[-1] * 1e3:.2f} ms; "
              f"{len(spans)} collections, longest {longest * 1e3:.1f} ms, overlapping {overlapping} of the "
              f"{len(latest)} latest dispatches", flush=True)

if __name__ == "__main__":
    main()
