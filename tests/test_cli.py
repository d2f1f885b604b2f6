"""benchd run as a user runs it: a subprocess, its exit code, its files."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).parent.parent


def benchd(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "benchd.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, **kwargs)


def test_run_example_writes_summary_and_requests(tmp_path):
    result = benchd("run", "examples/tiny-poisson.yaml", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "TTFT ms" in result.stdout and "poisson@20/s" in result.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "succeeded"
    (stage,) = summary["stages"]
    assert stage["requests"] == 40 and stage["warmup_requests"] == 4 and stage["errors"] == 0
    assert stage["ttft_s"]["count"] == 40 and stage["slo_attainment"] is not None
    assert summary["metadata"]["model"] == "tiny"
    rows = list(csv.DictReader((tmp_path / "requests.csv").open()))
    assert len(rows) == 44
    for row in rows:
        times = row["token_times_s"].split()
        assert len(times) == int(row["output_tokens"]) == int(row["max_new_tokens"])
        assert float(row["ttft_s"]) > 0


def test_quick_flags(tmp_path):
    result = benchd("run", "--model", "tiny", "--device", "cpu", "--engine", "static", "--requests", "3",
                    "--prompt-tokens", "8", "--output-tokens", "4", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["spec"]["engine"] == "static"
    assert summary["stages"][0]["output_tokens"] == 12


def test_bad_spec_exits_nonzero_naming_the_field(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("workload:\n  arrivals: {profile: poisson, rate: -2}\n")
    result = benchd("run", str(spec))
    assert result.returncode == 2
    assert "workload.arrivals.poisson.rate" in result.stderr and "greater than 0" in result.stderr


def test_spec_beyond_the_model_is_rejected_before_running():
    result = benchd("run", "--model", "tiny", "--device", "cpu", "--prompt-tokens", "4000", "--output-tokens", "200")
    assert result.returncode == 2
    assert "workload.prompt_tokens" in result.stderr and "4096" in result.stderr


def test_ctrl_c_keeps_and_writes_what_was_measured(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "benchd.cli", "run", "--model", "tiny", "--device", "cpu", "--concurrency", "2",
         "--duration", "120", "--prompt-tokens", "16", "--output-tokens", "512", "--out", str(tmp_path)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines = []  # a warning (no NVML on this machine) may come before benchd's lines
    while not any("measuring" in line for line in lines):
        lines.append(process.stderr.readline())
        assert len(lines) < 20 and lines[-1], lines
    time.sleep(3)  # several seconds of requests
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    stage = summary["stages"][0]
    assert stage["status"] == "interrupted" and stage["requests"] > 0 and stage["output_tokens"] > 0
    rows = list(csv.DictReader((tmp_path / "requests.csv").open()))
    assert any(row["error"] == "interrupted" and int(row["output_tokens"]) > 0 for row in rows)
    assert "status: interrupted" in stdout
