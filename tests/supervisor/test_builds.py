"""Environments across versions and their builds: a schedule that pits the daemon's environment against a
candidate, a bare requirement pinned to the newest release, a build that installs only what the daemon lacks, `benchd
run` in the declared environments, and a build that leaves the run queue to the runs behind its run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchd.spec.matrix import interleaved
from tests.helpers import ROOT, daemon, spec, submit, wait_for
from tests.supervisor.helpers import NEWEST, StallingIndex, finished, probe_wheel

# ---- a regression watch across versions: a declared schedule's matrix, the candidate against the daemon's own ----


def test_a_scheduled_matrix_must_be_valid_for_the_settings_to_be():
    from benchd.daemon.settings import Settings

    watch = {"name": "watch", "spec": spec(), "interval_s": 60, "matrix": {"workload.stop.requests": [4, -1]}}
    with pytest.raises(ValueError, match="variant workload.stop.requests=-1"):
        Settings(schedules=[watch])
    with pytest.raises(ValueError, match="matrix"):
        Settings(schedules=[{**watch, "matrix": {"environment": []}}])


@pytest.mark.engine
def test_a_schedule_pits_the_daemons_environment_against_a_candidate_and_exports_the_verdict(tmp_path):
    """The watch a team keeps before upgrading a fleet (docs/guides/environments.md): every interval the candidate
    (.venv-newest, the newest transformers 5.x) runs against the daemon's own, interleaved; the comparison sets the
    variant's verdict, both environments named, and benchd_regression_detected, which BenchdRegression fires on."""
    if not NEWEST.exists():
        pytest.skip("no .venv-newest (make .venv-newest/.installed)")
    watch = {"name": "upgrade-watch", "spec": {**spec(requests=4, output=8), "name": "upgrade-watch"},
             "interval_s": 1.0, "matrix": {"environment": ["current", "candidate"]}, "repeats": 2}
    with daemon(tmp_path, environments={"candidate": str(NEWEST)}, schedules=[watch]) as server:
        server.wait_ready()

        def compared():
            rows = server.http.get("/matrices", params={"workload": "upgrade-watch"}).json()
            return [r for r in rows if r["status"] not in ("queued", "running")]

        seen = []

        def snapshot():  # the newest compared matrix, and /metrics read while it stayed the newest
            before = compared()
            text = server.http.get("/metrics").text
            if before and before[0]["id"] == compared()[0]["id"]:
                seen[:] = [before[0], text]
            return bool(seen)

        wait_for(snapshot, 240, "the scheduled matrix to be compared")
        row, text = seen
        assert row["status"] == "succeeded", row["error"]
        runs = [server.http.get(f"/runs/{r['run_id']}").json() for r in row["runs"]]
        assert [r["metadata"]["environment"] for r in runs] == ["current", "candidate"] * 2
        assert {r["schedule"] for r in runs} == {"upgrade-watch"}
        candidate = row["comparison"]["variants"][1]
        throughput = next(m for m in candidate["metrics"] if m["metric"] == "output_tokens_per_s")
        # Two paired rounds at the verdicts' confidence (0.995) may decide nothing: whichever the verdict, the
        # gauges say it.
        assert throughput["verdict"] in ("faster", "slower", "equivalent") or throughput["reason"]
        slower = float(throughput["verdict"] == "slower")
        assert (f'benchd_matrix_variant_regression_detected{{baseline="environment=current",hostname="test-node",'
                f'metric="output_tokens_per_s",variant="environment=candidate",workload="upgrade-watch"}} '
                f'{slower}') in text
        assert (f'benchd_regression_detected{{hostname="test-node",metric="output_tokens_per_s",'
                f'workload="upgrade-watch"}} {slower}') in text
        assert 'benchd_regression_relative_change{hostname="test-node",metric="output_tokens_per_s",' \
               'workload="upgrade-watch"}' in text
        # the schedule never piles up behind itself: one matrix at a time, however short its interval
        statuses = [r["status"] for r in server.http.get("/matrices", params={"workload": "upgrade-watch"}).json()]
        assert sum(s in ("queued", "running") for s in statuses) <= 1


def test_a_bare_requirement_is_the_newest_release_on_the_index_and_the_last_answer_when_it_is_unreachable(
        tmp_path, monkeypatch):
    """["transformers"] is the newest release the index has (pinned, the venv keyed by it: a newer release is a venv
    of its own); an index out of reach falls back on the last answer, and with none the run's error says so."""
    from packaging.version import Version

    from benchd.supervisor.environments import EnvironmentProblem, Environments

    if not NEWEST.exists():
        pytest.skip("no .venv-newest (make .venv-newest/.installed)")
    asked = "from importlib.metadata import version; print(version('transformers'))"
    built_newest = subprocess.run([NEWEST, "-c", asked], capture_output=True, text=True, check=True).stdout.strip()
    declared = ["transformers", "benchd-probe @ file:///nowhere.whl"]
    environments = Environments({"tf-newest": declared}, tmp_path)
    try:
        pinned = environments.pinned("tf-newest", declared)
    except EnvironmentProblem as problem:
        pytest.skip(f"no index reachable from here: {problem}")
    project, version = pinned[0].split("==")
    # the Makefile's newest 5.x, or newer
    assert project == "transformers" and Version(version) >= Version(built_newest)
    assert pinned[1] == declared[1]  # only bare names are pinned
    assert environments.venv(pinned) != environments.venv(declared)  # keyed by the release: a new one, a new venv

    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")  # no configured extra indexes or wheel directories
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens there
    assert Environments({"tf-newest": declared}, tmp_path).pinned("tf-newest", declared) == pinned
    with pytest.raises(EnvironmentProblem, match="tf-newest.*newest release.*no earlier answer"):
        Environments({"tf-newest": declared}, tmp_path / "empty").pinned("tf-newest", declared)


def test_a_build_installs_only_what_the_daemons_environment_lacks_with_its_pip_where_uv_is_on_the_path(
        tmp_path, monkeypatch):
    """The requirements' dependencies that the daemon has (here numpy and torch) count as installed: the build needs
    no index for them. uv reads only the venv's own site-packages and would fetch them all: an offline GPU host's
    build failed so (docs/benchmarks/stack-matrix.md). A uv on the path is not used while the daemon has pip."""
    from benchd.supervisor.environments import Environments

    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "uv").write_text("#!/bin/sh\necho uv was used >&2\nexit 3\n")
    (tools / "uv").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # no index: what the daemon lacks could not come from anywhere
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    wheel = probe_wheel(tmp_path, requires=("numpy", "torch"))
    environments = Environments({"deps": [str(wheel)]}, tmp_path / "built")
    python = environments.interpreter("deps").python
    log = next((tmp_path / "built").glob("*.log")).read_text()
    assert "-m pip --python" in log and "uv was used" not in log
    site = subprocess.run([python, "-c", "import benchd_probe, numpy, torch; print(benchd_probe.__file__, "
                                         "numpy.__file__, torch.__file__)"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert str(tmp_path / "built") in site[0]  # the requirement in the venv
    assert str(tmp_path / "built") not in site[1] and str(tmp_path / "built") not in site[2]  # the daemon's own


@pytest.mark.engine
def test_benchd_run_here_takes_the_environments_the_settings_declare(tmp_path):
    """`benchd run` of a matrix over environments, without a daemon: BENCHD_ENVIRONMENTS as the daemon reads it, each
    variant's runs in a worker of its environment, the comparison naming each variant's resolved versions (the GPU
    check of issue 34 ran so: examples/releases-gpu.yaml)."""
    if not NEWEST.exists():
        pytest.skip("no .venv-newest (make .venv-newest/.installed)")
    import yaml

    document = {**spec(requests=4, output=8), "name": "releases-here", "matrix": {"environment": ["current", "next"]},
                "repeats": 2}
    (tmp_path / "releases.yaml").write_text(yaml.safe_dump(document))
    env = {**os.environ, "BENCHD_ENVIRONMENTS": json.dumps({"next": str(NEWEST)})}
    done = subprocess.run([sys.executable, "-m", "benchd.cli", "run", str(tmp_path / "releases.yaml"), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    row = json.loads((tmp_path / "out" / "matrix.json").read_text())
    assert [(r["round"], r["variant"]) for r in row["runs"]] == interleaved(2, 2)
    asked = "from importlib.metadata import version; print(version('transformers'))"
    newest_version = subprocess.run([NEWEST, "-c", asked], capture_output=True, text=True, check=True).stdout.strip()
    variants = row["comparison"]["variants"]
    assert [v["stack"]["environment"] for v in variants] == ["current", "next"]
    assert variants[1]["stack"]["transformers_version"] == newest_version
    import transformers

    from benchd.measure.matrix import MatrixComparison
    from benchd.report.matrix import summary_rows

    values = [r[0] for r in summary_rows(MatrixComparison.model_validate(row["comparison"]))]  # the CLI's, the page's
    assert f"transformers {transformers.__version__}" in values[0] and f"transformers {newest_version}" in values[1]


@pytest.mark.engine
def test_a_run_whose_environment_is_being_built_leaves_the_queue_to_the_runs_behind_it(tmp_path, monkeypatch):
    """The build runs on a thread of its own while its run waits in the queue: the run behind it, in the daemon's
    own environment, runs meanwhile; once the build ends (here it fails: the index has no such package), the waiting
    run ends with why."""
    index = StallingIndex()
    monkeypatch.setenv("PIP_INDEX_URL", index.url)
    try:
        with daemon(tmp_path, environments={"slow": ["benchd-slow-package==1.0"]},
                    environments_dir=str(tmp_path / "built")) as server:
            server.wait_ready()
            waiting = submit(server, {**spec(requests=2, output=4), "environment": "slow"})
            behind = submit(server, spec(requests=2, output=4))
            assert index.asked.wait(120), "the build never asked the index"
            assert finished(server, behind)["status"] == "succeeded"
            assert server.http.get(f"/runs/{waiting}").json()["status"] == "queued"  # its build still runs
            index.release.set()
            failed = finished(server, waiting)
            assert failed["status"] == "failed" and "environment 'slow': building it failed" in failed["error"]
    finally:
        index.close()
