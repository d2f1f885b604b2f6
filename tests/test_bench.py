"""The GPU scripts' CPU smoke modes: they run where CI runs, so the GPU session does not find them broken."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_overhead_script_accounts_for_both_paths(tmp_path):
    done = subprocess.run([sys.executable, "bench/gpu_overhead.py", "--smoke", "--repeats", "1",
                           "--modes", "bare", "benchd"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OUT": str(tmp_path)}, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "benchd / bare output tok/s by pair" in done.stdout
    result = json.loads((tmp_path / "overhead.json").read_text())
    bare, benchd = result["runs"]["bare"][0], result["runs"]["benchd"][0]
    for row in (bare, benchd):
        assert row["tokens"] == 16 * 32 and row["step_calls"] > 0 and row["schedule_calls"] >= row["step_calls"]
        assert row["generation_cpu_s"] > 0 and row["batches"] > 0
    assert bare["q_tokens"] >= 16 * 32 and benchd["q_tokens"] >= 16 * 32  # every prompt token went through
    assert benchd["consumer_cpu_s"] > 0 and "consumer_cpu_s" not in bare
