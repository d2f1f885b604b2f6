"""How often the comparison rule cries wolf, and how often it finds a real step (docs/benchmarks.md; issue 53): real
runs of the tiny model on this machine's CPU through a daemon, one spec, runs labelled "a" and, interleaved with
them, runs labelled "b" that a controlled delay slows: every forward pass busy-waits 20 % of the step time (ITL
p50) a calibration daemon measured first (the daemon's fault injection, BENCHD_FAULTS__ACTION=spin: a wait that
holds the core and the GIL as more computation would; a sleep of 0.2 ms cost 0.5 ms more on this shared machine).
Then, over the stored runs, as GET /compare reads them (store/sides.py, measure/compare.py):

- A/A: `--pairs` comparisons of one "a" run against another (each borrowing the spread of the stored "a" runs of
  its segment) and of three against three other: the share of each figure called slower or faster, all wrong;
- A/B: as many comparisons of "a" runs against "b" runs: the share of each figure called slower (found) and faster
  (wrong);

at each `--confidence`, with the step each figure took (the median of the "b" runs' over the "a" runs'). Writes its
figures to --out (JSON) and prints a table.

    python bench/compare_rule.py --out docs/data                          # 30 + 15 runs, about 10 minutes
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

WORKLOAD = {"arrivals": {"profile": "concurrent", "concurrency": 16}, "stop": {"requests": 100},
            "prompt_tokens": {"dist": "fixed", "value": 64}, "output_tokens": {"dist": "fixed", "value": 32}}
SPEC = {"name": "rule", "model": "tiny", "device": "cpu", "dtype": "float32",
        "transformers": {"block_size": 16, "num_blocks": 256, "max_batch_tokens": 256}, "workload": WORKLOAD}
STEP = 0.20  # the known step: of the step time (ITL p50)


def ready(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/readyz").status_code == 200
    except httpx.TransportError:
        return False


class Daemon:
    """`benchd serve` on the CPU over a SQLite store in `work`, with these extra settings."""

    def __init__(self, work: Path, port: int, **env: str) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.database = f"sqlite:///{work}/benchd.db"
        variables = {**os.environ, "BENCHD_DATABASE_URL": self.database, "BENCHD_PORT": str(port),
                     "BENCHD_DEVICE": "cpu", "BENCHD_DTYPE": "float32", "BENCHD_DEFAULT_SCHEDULE": "false",
                     "BENCHD_SPOOL_DIR": str(work / "spool"), "BENCHD_WORKERS__LOG_DIR": str(work / "workers"),
                     "BENCHD_NODE_NAME": "bench", **env}
        self.process = subprocess.Popen([sys.executable, "-m", "benchd.cli", "serve"], cwd=ROOT, env=variables,
                                        stdout=subprocess.DEVNULL, stderr=open(work / f"serve-{port}.log", "a"))  # noqa: SIM115
        deadline = time.perf_counter() + 300
        while not ready(self.url):
            if time.perf_counter() > deadline or self.process.poll() is not None:
                raise SystemExit(f"the daemon did not start ({work}/serve-{port}.log)")
            time.sleep(0.5)

    def run(self, label: str) -> dict:
        import httpx

        run_id = httpx.post(f"{self.url}/runs", json={**SPEC, "label": label}).json()["id"]
        while (row := httpx.get(f"{self.url}/runs/{run_id}").json())["status"] in ("queued", "running"):
            time.sleep(0.2)
        if row["status"] != "succeeded":
            raise SystemExit(f"run {run_id}: {row['status']}: {row.get('error')}")
        return row

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)


def collect(work: Path, port: int, a_runs: int, b_runs: int) -> tuple[str, float]:
    """The calibration (4 runs: the step time as ITL p50 of the last 3), then the series: a cold run, and "a" and
    "b" runs interleaved (two "a" to one "b"). The database's URL and the delay."""
    calibration = Daemon(work / "calibration", port)
    try:
        itl = [calibration.run("a")["summary"][0]["itl_s"]["p50"] for _ in range(4)][1:]
    finally:
        calibration.stop()
    delay = STEP * float(np.median(itl))
    print(f"calibrated: ITL p50 {np.median(itl) * 1e3:.3f} ms, so a wait of {delay * 1e3:.3f} ms a forward pass for "
          "runs labelled b", flush=True)
    daemon = Daemon(work, port + 1, BENCHD_FAULTS__WORKLOAD="rule", BENCHD_FAULTS__LABEL="b",
                    BENCHD_FAULTS__ACTION="spin", BENCHD_FAULTS__DELAY_S=f"{delay:.6f}")
    try:
        daemon.run("a")  # its engine's first: cold, left out of what follows
        order = ["a", "a", "b"] * max(b_runs, (a_runs + 1) // 2)
        made = {"a": 0, "b": 0}
        for label in order:
            if made[label] >= (a_runs if label == "a" else b_runs):
                continue
            row = daemon.run(label)
            made[label] += 1
            first = row["summary"][0]
            print(f"  {label} {made[label]:>2}: ITL p50 {first['itl_s']['p50'] * 1e3:6.3f} ms, "
                  f"{first['output_tokens_per_s']:7.1f} tok/s", flush=True)
    finally:
        daemon.stop()
    return daemon.database, delay


def judge(database: str, work: Path, pairs: int, confidences: list[float], seed: int) -> dict:
    """Every comparison over the stored runs, as GET /compare makes it."""
    from benchd.measure.compare import compare
    from benchd.store.database import Store
    from benchd.store.sides import side_from_store

    store = Store(database, spool_dir=work / "judge-spool", node="bench")
    store.start()
    assert store.wait_ready(60)
    rows = store.list_runs(status="succeeded", workload="rule", limit=500).items
    warm = {label: sorted(r["id"] for r in rows if r["label"] == label and (r["run_metadata"] or {}).get("engine_run") != 1)
            for label in ("a", "b")}
    from benchd.measure.compare import COMPARED
    from benchd.measure.sides import LATENCIES
    from benchd.measure.context import stage_figures

    figures = {r["id"]: stage_figures(r["summary"][0], r["energy_per_token_j"], LATENCIES, COMPARED) for r in rows}
    step = {metric: float(np.median([figures[i][metric] for i in warm["b"]])
                          / np.median([figures[i][metric] for i in warm["a"]]) - 1)
            for metric in figures[warm["a"][0]]}
    rng = random.Random(seed)
    plans = {
        "A/A, 1 against 1": [rng.sample(warm["a"], 2) for _ in range(pairs)],
        "A/A, 3 against 3": [(lambda s: (s[:3], s[3:]))(rng.sample(warm["a"], 6)) for _ in range(pairs)],
        "A/B, 1 against 1": [([rng.choice(warm["a"])], [rng.choice(warm["b"])]) for _ in range(pairs)],
        "A/B, 3 against 3": [(rng.sample(warm["a"], 3), rng.sample(warm["b"], 3)) for _ in range(pairs)],
    }
    sides: dict[tuple[str, ...], object] = {}

    def side(ids):
        key = tuple(ids)
        if key not in sides:
            sides[key] = side_from_store(store, list(ids))
        return sides[key]

    out = {}
    for name, plan in plans.items():
        started = time.perf_counter()
        for confidence in confidences:
            counts: dict[str, dict[str, int]] = {}
            for a, b in plan:
                a, b = ([a], [b]) if isinstance(a, str) else (a, b)
                for m in compare(side(a), side(b), confidence=confidence).metrics:
                    counts.setdefault(m.metric, {}).setdefault(m.verdict, 0)
                    counts[m.metric][m.verdict] += 1
            out[f"{name} @ {confidence:g}"] = counts
        print(f"  {name}: {len(plan)} comparisons at {len(confidences)} confidences in "
              f"{time.perf_counter() - started:.1f} s", flush=True)
        sides.clear()
    store.close()
    return {"runs": {k: len(v) for k, v in warm.items()}, "step": step, "verdicts": out}


def table(found: dict, pairs: int) -> None:
    print(f"\nper figure, the share of {pairs} comparisons called slower and faster (A/A: both wrong; A/B: slower "
          "found, faster wrong), and how many got each other verdict")
    print("the step each figure took, b's median over a's: " + ", ".join(
        f"{metric} {change:+.1%}" for metric, change in found["step"].items()))
    for case, counts in found["verdicts"].items():
        print(case)
        for metric, verdicts in counts.items():
            rest = ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items()) if v not in ("slower", "faster"))
            print(f"  {metric:22} slower {verdicts.get('slower', 0) / pairs:6.1%}  "
                  f"faster {verdicts.get('faster', 0) / pairs:6.1%}   ({rest})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a-runs", type=int, default=30)
    parser.add_argument("--b-runs", type=int, default=15)
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--confidence", type=float, action="append", help="default: 0.95, 0.99, 0.995, 0.999")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port", type=int, default=18753)
    parser.add_argument("--database", help="judge the runs of an earlier invocation's store (sqlite:///…/benchd.db)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    confidences = args.confidence or [0.95, 0.99, 0.995, 0.999]
    work = Path(tempfile.mkdtemp(prefix="benchd-compare-rule-"))
    (work / "calibration").mkdir()
    started = time.perf_counter()
    if args.database:
        database, delay = args.database, None
    else:
        database, delay = collect(work, args.port, args.a_runs, args.b_runs)
        print(f"runs stored in {database} ({time.perf_counter() - started:.0f} s)", flush=True)
    found = judge(database, work, args.pairs, confidences, args.seed)
    table(found, args.pairs)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        result = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores", "step": STEP,
                  "delay_s": delay, "pairs": args.pairs, "spec": SPEC, **found}
        (args.out / "compare_rule_cpu.json").write_text(json.dumps(result, indent=1))
        print(f"wrote {args.out / 'compare_rule_cpu.json'}")


if __name__ == "__main__":
    main()
