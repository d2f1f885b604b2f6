"""Workers in other Python environments (supervisor/environments.py) on a live daemon: an existing venv (the
Makefile's .venv-newest, the newest transformers 5.x) and a requirements list built into a cached venv, each a
matrix's variant or a run's environment; each way an environment breaks failing its run, clearly, while the next run
succeeds; and requirements a spec brings, off over HTTP unless the settings allow them."""

from __future__ import annotations

import subprocess

import pytest

from benchd.protocol.messages import PROTOCOL_VERSION
from benchd.spec.matrix import interleaved
from benchd.supervisor.paths import WORKER_PATH
from tests.helpers import daemon, spec, submit, wait_for
from tests.supervisor.helpers import NEWEST, finished, other_protocol, probe_wheel


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
    built = [p for p in (live.where / "built").iterdir() if p.is_dir() and p.name != WORKER_PATH]
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
    ("missing", "environment 'missing': no interpreter at its path (BENCHD_ENVIRONMENTS)"),
    ("unsatisfiable", "environment 'unsatisfiable': building it failed (exit code 1): ERROR: "),
    ("bare", "the worker in environment 'bare' did not start: the worker exited with code 1"),
    ("other", f"the worker in environment 'other' speaks benchd protocol {PROTOCOL_VERSION + 1}, this daemon "
              f"protocol {PROTOCOL_VERSION}"),
])
def test_a_broken_environment_fails_its_run_clearly_and_the_next_run_succeeds(live, environment, why):
    failed = finished(live, submit(live, {**spec(requests=2, output=4), "environment": environment}))
    assert failed["status"] == "failed" and why in failed["error"], failed["error"]
    if environment == "unsatisfiable":  # what pip said, and where its whole log is
        assert "benchd-no-such-package" in failed["error"] and " in BENCHD_ENVIRONMENTS_DIR" in failed["error"]
    if environment == "bare":  # the worker's own words, from its log
        assert "ModuleNotFoundError" in failed["error"]
    after = finished(live, submit(live, spec(requests=2, output=4)))
    assert after["status"] == "succeeded", after["error"]
    wait_for(lambda: live.http.get("/readyz").status_code == 200, 180, "the daemon to be ready again")
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


# ---- requirements a spec brings: off over HTTP unless the settings allow it ------------------------------------------


@pytest.mark.parametrize("fields, why", [
    ({"requirements": ["-r /etc/passwd"]}, "requirements.0: not a requirement (PEP 508"),
    ({"requirements": ["transformers==5.24.0 --index-url http://x"]}, "requirements.0: not a requirement"),
    ({"requirements": []}, "requirements: List should have at least 1 item"),
    ({"requirements": ["a"] * 17}, "requirements: List should have at most 16 items"),
    ({"environment": "tf-next", "requirements": ["transformers==5.24.0"]}, "not both"),
])
def test_a_specs_requirements_are_pep_508_requirements_and_no_more(fields, why):
    from benchd.spec import SpecError, parse_spec

    with pytest.raises(SpecError) as raised:
        parse_spec(fields)
    assert why in str(raised.value), str(raised.value)


def test_requirements_over_http_are_refused_unless_the_settings_allow_them(live):
    refused = live.http.post("/runs", json={**spec(), "requirements": ["transformers==5.24.0"]})
    assert refused.status_code == 422
    (detail,) = refused.json()["detail"]
    assert detail["loc"] == ["body", "requirements"] and "BENCHD_ENVIRONMENTS_FROM_SPECS" in detail["msg"]


@pytest.mark.engine
def test_requirements_a_spec_brings_are_built_once_where_the_settings_allow_them(tmp_path, monkeypatch):
    """BENCHD_ENVIRONMENTS_FROM_SPECS: a run's own requirements (here a release found in pip's wheel directory) build
    an environment named by them, reused by the next run that brings them; a local file is still refused."""
    from benchd.spec.requirements import environment_name

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    probe_wheel(wheels)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    with daemon(tmp_path, environments_from_specs=True, environments_dir=str(tmp_path / "built")) as server:
        server.wait_ready()
        refused = server.http.post("/runs", json={**spec(), "requirements": [
            "benchd-probe==1.0", f"benchd-probe @ file://{wheels}/benchd_probe-1.0-py3-none-any.whl"]})
        assert refused.status_code == 422, refused.text
        (detail,) = refused.json()["detail"]
        assert detail["loc"] == ["body", "requirements", 1] and "a local path is the operator's" in detail["msg"]
        body = {**spec(requests=2, output=4), "requirements": ["benchd-probe==1.0"]}
        first = finished(server, submit(server, body))
        assert first["status"] == "succeeded", first["error"]
        name = environment_name(["benchd-probe==1.0"])
        assert first["metadata"]["environment"] == name and first["spec"]["requirements"] == ["benchd-probe==1.0"]
        (built,) = [p for p in (tmp_path / "built").iterdir() if p.is_dir() and p.name != WORKER_PATH]
        assert list(built.glob("lib/python*/site-packages/benchd_probe.py"))
        log = built.with_suffix(".log")
        stamp = log.stat().st_mtime_ns
        again = finished(server, submit(server, body))
        assert again["status"] == "succeeded" and again["metadata"]["environment"] == name
        assert log.stat().st_mtime_ns == stamp  # the same list: the same venv, not built again
