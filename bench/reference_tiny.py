"""The reference workload's shape (bench/common.py: 256 requests × 256 prompt × 256 output tokens, all at once) on
the tiny CPU model, through `benchd run` in a process of its own each time, as a user runs it: the run's figures,
one line a run. With bench/before_after.py it puts two versions of benchd side by side:

    python bench/before_after.py 2d6c4ea --rounds 2 -- reference_tiny.py --repeats 2

Every run is a cold process (the model loaded, the engine warmed by 16 warm-up requests, then measured); both
versions pay the same.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import REFERENCE

SPEC = {**REFERENCE, "name": "reference-tiny", "model": "tiny", "dtype": "float32", "device": "cpu",
        "workload": {**REFERENCE["workload"], "warmup": {"requests": 16}}}


def once(work: Path) -> dict:
    spec = work / "spec.json"
    spec.write_text(json.dumps(SPEC))
    # benchd from whatever PYTHONPATH names first (before_after.py points it at each version's src/).
    done = subprocess.run([sys.executable, "-c", "from benchd.cli.main import main; main()", "run", str(spec),
                           "--out", str(work / "out")], capture_output=True, text=True, env={**os.environ})
    if done.returncode != 0:
        raise SystemExit(done.stdout[-2000:] + done.stderr[-2000:])
    return json.loads((work / "out" / "summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            summary = once(Path(tmp))
        (stage,) = summary["stages"]
        ms = {name: {q: stage[name][q] * 1e3 for q in ("p50", "p99")} for name in ("ttft_s", "itl_s", "tpot_s")}
        print(f"run {repeat + 1}: {stage['output_tokens_per_s']:,.0f} output tok/s, "
              f"TTFT p50 / p99 {ms['ttft_s']['p50']:.0f} / {ms['ttft_s']['p99']:.0f} ms, "
              f"ITL p50 / p99 {ms['itl_s']['p50']:.2f} / {ms['itl_s']['p99']:.2f} ms, "
              f"TPOT p50 {ms['tpot_s']['p50']:.2f} ms, dispatch lag p99 {stage['dispatch_lag_s']['p99'] * 1e3:.2f} ms, "
              f"{'valid' if stage['valid'] else 'INVALID'}")


if __name__ == "__main__":
    main()
