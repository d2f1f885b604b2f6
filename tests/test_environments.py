"""Workers in other Python environments (supervisor/environments.py): an existing venv (the Makefile's .venv-newest, the
newest transformers 5.x) and a requirements list built into a cached venv, each a matrix's variant or a run's
environment; and each way an environment breaks failing its run, clearly, while the next run succeeds."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from benchd.protocol.messages import PROTOCOL_VERSION
from benchd.spec.matrix import interleaved
from tests.helpers import ROOT, daemon, spec, submit, wait_for

NEWEST = ROOT / ".venv-newest" / "bin" / "python"
SRC = ROOT / "src" / "benchd"


def probe_wheel(where: Path) -> Path:
    """A wheel of one module, written here: a requirement that installs without an index."""
    path = where / "benchd_probe-1.0-py3-none-any.whl"
    files = {"benchd_probe.py": "VALUE = 1\n",
             "benchd_probe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: benchd-probe\nVersion: 1.0\n",
             "benchd_probe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                 "Tag: py3-none-any\n"}
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
        wheel.writestr("benchd_probe-1.0.dist-info/RECORD",
                       "".join(f"{name},,\n" for name in files) + "benchd_probe-1.0.dist-info/RECORD,,\n")
    return path


def other_protocol(where: Path) -> Path:
    """An interpreter whose benchd (a copy of this one, first on its path) speaks protocol PROTOCOL_VERSION + 1."""
    copy = where / "other" / "benchd"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    messages = copy / "protocol" / "messages.py"
    text = messages.read_text()
    assert f"PROTOCOL_VERSION = {PROTOCOL_VERSION}\n" in text
    messages.write_text(text.replace(f"PROTOCOL_VERSION = {PROTOCOL_VERSION}\n",
                                     f"PROTOCOL_VERSION = {PROTOCOL_VERSION + 1}\n"))
    python = where / "other-python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={copy.parent}:$PYTHONPATH exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    where = tmp_path_factory.mktemp("environments")
    environments = {
        "probe": [str(probe_wheel(where))],
        "missing": str(where / "no-such-venv" / "bin" / "python"),
        "unsatisfiable": ["benchd-no-such-package==0.0.1"],
        "bare": "/usr/bin/python3",  # the system's Python: no msgspec, no torch
        "other": str(other_protocol(where)),
    }
    if NEWEST.exists():
        environments["newest"] = str(NEWEST)
    with daemon(where, environments=environments, environments_dir=str(where / "built")) as server:
        server.wait_ready()
        server.where = where
        yield server


def finished(server, run_id: str) -> dict:
    return server.wait_status(run_id, "succeeded", "failed", timeout_s=180)


@pytest.mark.engine
def test_a_matrix_over_two_venvs_runs_interleaved_and_records_each_variants_stack(live):
    if not NEWEST.exists():
        pytest.skip("no .venv-newest (make .venv-newest/.installed)")
    body = {**spec(requests=4, output=8), "name": "releases", "matrix": {"environment": ["current", "newest"]},
            "repeats": 2}
    created = live.http.post("/matrices", json=body)
    assert created.status_code == 202, created.text
    matrix_id, run_ids = created.json()["id"], created.json()["runs"]
    wait_for(lambda: live.http.get(f"/matrices/{matrix_id}").json()["status"] not in ("queued", "running"), 300,
             "the matrix to end")
    row = live.http.get(f"/matrices/{matrix_id}").json()
    assert row["status"] == "succeeded", row["error"]
    assert [(r["round"], r["variant"]) for r in row["runs"]] == interleaved(2, 2)
    runs = [live.http.get(f"/runs/{r}").json() for r in run_ids]
    started = [r["started_at"] for r in runs]
    assert started == sorted(started)
    asked = "from importlib.metadata import version; print(version('transformers'))"
    newest_version = subprocess.run([NEWEST, "-c", asked], capture_output=True, text=True, check=True).stdout.strip()
    import transformers

    assert newest_version != transformers.__version__  # two releases, or the test compares nothing
    assert [r["metadata"]["environment"] for r in runs] == ["current", "newest"] * 2
    assert [r["metadata"]["transformers_version"] for r in runs] == [transformers.__version__, newest_version] * 2
    assert [r["spec"]["environment"] for r in runs] == ["current", "newest"] * 2
    variants = row["comparison"]["variants"]
    assert [v["label"] for v in variants] == ["environment=current", "environment=newest"]
    assert [v["stack"]["transformers_version"] for v in variants] == [transformers.__version__, newest_version]
    assert variants[1]["tokens"]["requests"] == 2 * 4  # greedy tokens paired, release against release
    assert {m["metric"] for m in variants[1]["metrics"]} >= {"output_tokens_per_s", "ttft_s.p50"}


@pytest.mark.engine
def test_an_environment_built_from_requirements_is_built_once_and_reused(live):
    commit = {"repository": "https://github.com/huggingface/transformers", "branch": "main", "commit": "0123abcd",
              "message": "a change to measure"}
    first = finished(live, submit(live, {**spec(requests=2, output=4), "environment": "probe", "commit": commit}))
    assert first["status"] == "succeeded", first["error"]
    assert first["metadata"]["environment"] == "probe" and first["metadata"]["commit"] == commit
    built = [p for p in (live.where / "built").iterdir() if p.is_dir()]
    assert len(built) == 1 and (built[0] / ".built").exists()
    assert list(built[0].glob("lib/python*/site-packages/benchd_probe.py"))  # installed there, not in the daemon's
    log = built[0].with_suffix(".log")
    assert "benchd_probe" in log.read_text() and log.read_text().count("$ ") == 2  # venv, then the install
    workers = live.http.get("/readyz").json()["workers"]
    assert [(w["environment"], w["protocol"]) for w in workers] == [("probe", PROTOCOL_VERSION)]
    stamp = log.stat().st_mtime_ns
    again = finished(live, submit(live, {**spec(requests=2, output=4), "environment": "current"}))
    assert again["status"] == "succeeded"
    third = finished(live, submit(live, {**spec(requests=2, output=4), "environment": "probe"}))
    assert third["status"] == "succeeded" and log.stat().st_mtime_ns == stamp  # from the cache: no second build


@pytest.mark.engine
@pytest.mark.parametrize("environment, why", [
    ("missing", "environment 'missing': no interpreter at "),
    ("unsatisfiable", "environment 'unsatisfiable': building it failed (exit code 1; log "),
    ("bare", "the worker in environment 'bare' did not start: the worker exited with code 1"),
    ("other", f"the worker in environment 'other' speaks benchd protocol {PROTOCOL_VERSION + 1}, this daemon "
              f"protocol {PROTOCOL_VERSION}"),
])
def test_a_broken_environment_fails_its_run_clearly_and_the_next_run_succeeds(live, environment, why):
    failed = finished(live, submit(live, {**spec(requests=2, output=4), "environment": environment}))
    assert failed["status"] == "failed" and why in failed["error"], failed["error"]
    if environment == "unsatisfiable":  # the build log's tail
        assert "benchd-no-such-package" in failed["error"]
    if environment == "bare":  # the worker's own words, from its log
        assert "ModuleNotFoundError" in failed["error"]
    after = finished(live, submit(live, spec(requests=2, output=4)))
    assert after["status"] == "succeeded", after["error"]
    wait_for(lambda: live.http.get("/readyz").status_code == 200, 60, "the daemon to be ready again")
    assert [w["environment"] for w in live.http.get("/readyz").json()["workers"]] == ["current"]


def test_an_http_spec_may_name_only_a_declared_environment(live):
    refused = live.http.post("/runs", json={**spec(), "environment": "tf-9"})
    assert refused.status_code == 422
    (detail,) = refused.json()["detail"]
    assert detail["loc"] == ["body", "environment"] and "'tf-9' is not a declared environment" in detail["msg"]
    refused = live.http.post("/runs", json={**spec(), "commit": {"commit": "not a hash"}})
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", "commit", "commit"]
    refused = live.http.post("/matrices", json={**spec(), "matrix": {"environment": ["current", "tf-9"]}})
    assert refused.status_code == 422 and "tf-9" in refused.text
