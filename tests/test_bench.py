"""The GPU scripts' CPU smoke modes: they run where CI runs, so the GPU session does not find them broken."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_loadgen_comparison_runs_benchd_against_the_c_mock(tmp_path):
    """The peers' comparison with benchd alone, two short rates: the mock builds, records its stamps, and the
    table compares benchd's figures with them."""
    done = subprocess.run([sys.executable, "bench/loadgen_peers.py", "--tools", "benchd", "--cases", "short",
                           "--rates", "20,40", "--seconds", "2", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = [line.split("|") for line in done.stdout.splitlines() if line.startswith("| benchd | short |")]
    assert len(rows) >= 2
    for row in rows[-2:]:
        rate, at_server, errors = float(row[3]), float(row[4]), int(row[5])
        assert errors == 0 and at_server == pytest.approx(rate, rel=0.2)
        ttft_truth_p50 = float(row[8].split("/")[0])
        assert 19.5 < ttft_truth_p50 < 25  # the mock's own stamp of its 20 ms first token
    stamps = (tmp_path / "short" / "stamps.txt").read_text().splitlines()
    assert len(stamps) >= 2 * (20 + 40) * 0.9 and all(len(line.split()) == 17 for line in stamps)  # read + 16


def test_loadgen_scaling_mode_prints_its_table(tmp_path):
    """--processes: benchd alone with 1 and 2 client processes (cores clipped to this machine's), prompts from a
    file made ahead, and the compact table at the end."""
    done = subprocess.run([sys.executable, "bench/loadgen_peers.py", "--processes", "1,2", "--scale-rates", "20",
                           "--seconds", "2", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    table = done.stdout.split("| client processes |")[1].splitlines()
    assert [line.split("|")[1].strip() for line in table[2:4]] == ["1", "2"]
    runs = [line for line in done.stdout.splitlines() if line.startswith("| benchd ×2 | short | 40 |")]
    assert runs and int(runs[0].split("|")[5]) == 0  # 40 requests/s over two client processes, none failed
    assert len((tmp_path / "scale" / "prompts.jsonl").read_text().splitlines()) == 2000
