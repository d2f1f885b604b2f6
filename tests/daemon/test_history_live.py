"""A workload's history end to end: real scheduled runs of the tiny model whose environment switches to one that slows
the worker; the change points found, named by that switch, exported on /metrics, drawn on a page a real chromium
loads, listed by the command line, and confirmed by an interleaved matrix between the two environments (and a second
confirmation cancelled)."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from benchd.measure import changes
from benchd.measure.history import (
    ChangePoint,
)
from tests.helpers import ROOT, daemon, spec, submit, wait_for

# ---- end to end --------------------------------------------------------------------------------------------

# An environment whose interpreter slows its worker once it has an engine: every embedding lookup (one a forward step)
# sleeps 10 ms, about 8 times a step of the tiny model here (a slower library: a real change of the stack, burning no
# core). The first run in it starts the worker and is left out as cold; every later one is slow from its first step (a
# thread that held the GIL for 20 ms of every 21 left some short runs nearly as fast as before, and the change point a
# run past the switch).
SLOWER = """import sys, threading, time
def _slow():
    while "benchd.engines.transformers.engine" not in sys.modules:
        time.sleep(0.05)
    import torch.nn.functional as F
    embedding = F.embedding
    def slowed(*args, **kwargs):
        time.sleep(0.01)
        return embedding(*args, **kwargs)
    F.embedding = slowed
threading.Thread(target=_slow, name="slower", daemon=True).start()
"""


def held_python(where: Path) -> Path:
    site = where / "held-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOWER)
    python = where / "held-python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site}:$PYTHONPATH exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python


WORKLOAD = "hist"


def scheduled(server, environment: str) -> None:
    body = {**spec(requests=12, output=8, concurrency=4, name=WORKLOAD), "environment": environment}
    response = server.http.post("/schedules", json={"name": "hist", "spec": body, "interval_s": 0.2})
    assert response.status_code == 201, response.text


def succeeded(server) -> int:
    return server.http.get("/runs", params={"workload": WORKLOAD, "status": "succeeded", "limit": 1}).json()["total"]


# SQLite only: the PostgreSQL twin of this fixture (its schedules' runs until change points lie at the switch) failed
# its 300 s on a loaded CI machine; the history's reads and writes on PostgreSQL are tested by tests/store and
# tests/deploy/test_deploy.py (the history dashboard against a real PostgreSQL).
@pytest.fixture(scope="module")
def switched(tmp_path_factory):
    """Five runs of a schedule in the daemon's environment and one invalid run, then the schedule's spec names
    `held` until change points in ITL p50 and output tok/s are found. A confirmation's matrix runs four rounds, its
    interval at 0.95: each of its runs is its engine's first (cold), and on a machine as loaded as the tests' a few
    cold rounds at the default 0.995 held no change even at 3× (the rule's power is measured in
    docs/benchmarks/comparisons.md, not here)."""
    where = tmp_path_factory.mktemp("history")
    with daemon(where, environments={"held": str(held_python(where))},
                history={"confirm_repeats": 4}, compare_confidence=0.95) as server:
        server.wait_ready()
        scheduled(server, "current")
        wait_for(lambda: succeeded(server) >= 4, 240, "four runs in the current environment")
        invalid = submit(server, {**spec(requests=12, output=8, concurrency=4, name=WORKLOAD),
                                  "workload": {**spec(requests=12)["workload"], "validity": {"min_requests": 1000}}})
        wait_for(lambda: succeeded(server) >= 6, 240, "five runs in the current environment and the invalid one")
        scheduled(server, "held")
        found: list = []

        def environment(run_id: str) -> str:
            return server.http.get(f"/runs/{run_id}").json()["metadata"]["environment"]

        def placed(change: dict) -> bool:
            return environment(change["before"]["last_run"]) == "current" and environment(change["run_id"]) == "held"

        def changed() -> bool:
            # Found with its first few runs, a change point may sit a run or two off where this loaded machine's
            # noise makes a run slow; more runs move it to the switch.
            found[:] = server.http.get("/changes", params={"workload": WORKLOAD}).json()["items"]
            figures = {c["figure"]: c for c in found}
            return all(f in figures and placed(figures[f]) for f in ("itl_s.p50", "output_tokens_per_s"))

        wait_for(changed, 400, "change points in ITL p50 and output tok/s, at the switch")
        assert server.http.delete("/schedules/hist").status_code == 204
        # The schedule's run in flight ends and is analysed after this: the tests read a history that still moves
        # until it has (/metrics' relative change once differed from /history's by that last run).
        wait_for(lambda: not any(server.http.get("/runs", params={"workload": WORKLOAD, "status": status,
                                                                  "limit": 1}).json()["total"]
                                 for status in ("queued", "running")), 120, "the schedule's last run to end")
        server.invalid, server.found = invalid, found
        yield server


@pytest.mark.engine
def test_a_switch_of_environment_is_found_where_it_happened_and_named(switched):
    itl = next(c for c in switched.found if c["figure"] == "itl_s.p50")
    assert itl["direction"] == "worse" and itl["relative_change"] > 0.5 and itl["p_value"] < changes.ALPHA
    assert itl["ci_low"] > 0.3 and itl["active"]
    assert {"field": "environment", "before": "current", "after": "held", "mixed": False} in itl["stack"]
    # Five valid runs in the current environment, the first of them cold (its engine's first: left out).
    assert itl["before"]["runs"] >= changes.MIN_RUNS and itl["after"]["runs"] >= changes.MIN_RUNS
    first_held = switched.http.get(f"/runs/{itl['run_id']}").json()
    assert first_held["metadata"]["environment"] == "held"
    before = switched.http.get(f"/runs/{itl['before']['last_run']}").json()
    assert before["metadata"]["environment"] == "current" and before["finished_at"] <= first_held["created_at"]
    tokens = next(c for c in switched.found if c["figure"] == "output_tokens_per_s")
    assert tokens["direction"] == "worse" and tokens["relative_change"] < -0.3 and tokens["run_id"] == itl["run_id"]
    assert "environment current → held" in ChangePoint.model_validate(itl).sentence()


@pytest.mark.engine
def test_the_history_holds_the_series_its_segments_and_what_it_left_out(switched):
    history = switched.http.get(f"/history/{WORKLOAD}").json()
    (series,) = history["series"]
    assert series["clock"] == "unknown"  # a CPU: no GPU clock read
    excluded = [(e["run_id"], e["reason"]) for e in series["excluded"]]
    assert (switched.invalid, "invalid") in excluded
    # Each environment's first run, its worker's first: its engine's warm-up in its figures.
    cold = [run_id for run_id, reason in excluded if reason != "invalid"]
    assert len(cold) == 2 and all(reason.startswith("cold: ") for _, reason in excluded if reason != "invalid")
    assert [switched.http.get(f"/runs/{r}").json()["metadata"]["engine_run"] for r in cold] == [1, 1]
    itl = next(f for f in series["figures"] if f["figure"] == "itl_s.p50")
    assert len(itl["points"]) == series["runs"] and switched.invalid not in [p["run_id"] for p in itl["points"]]
    first, second = itl["segments"]
    assert second["first_run"] == itl["change_points"][0]["run_id"] and second["mean"] > 1.5 * first["mean"]
    assert first["runs"] + second["runs"] == len(itl["points"])
    assert switched.http.get("/history/nothing-ran").status_code == 404
    assert switched.http.get(f"/history/{WORKLOAD}", params={"limit": 10_001}).status_code == 422
    page = switched.http.get("/changes", params={"workload": WORKLOAD, "figure": "ttft_s.p50", "limit": 1}).json()
    assert page["limit"] == 1 and all(c["figure"] == "ttft_s.p50" for c in page["items"])
    assert switched.http.get("/changes", params={"figure": "nonsense"}).status_code == 422
    metrics = switched.http.get("/metrics").text
    labels = f'device="{series["device"]}",figure="itl_s.p50",hostname="test-node",workload="{WORKLOAD}"'
    for line in (f"benchd_change_point_direction{{{labels}}} 1.0",
                 f'benchd_change_points_total{{direction="worse",figure="itl_s.p50",hostname="test-node",'
                 f'workload="{WORKLOAD}"}}'):
        assert line in metrics, line

    def exported() -> bool:  # the gauge holds the history's relative change once the last analysis is through
        page = switched.http.get("/metrics").text
        gauge = next(x for x in page.splitlines() if x.startswith(f"benchd_change_point_relative_change{{{labels}"))
        now = next(f for f in switched.http.get(f"/history/{WORKLOAD}").json()["series"][0]["figures"]
                   if f["figure"] == "itl_s.p50")
        return float(gauge.split()[-1]) == pytest.approx(now["change_points"][0]["relative_change"])

    wait_for(exported, 60, "the exported relative change to be the history's")


def verdict(server, change_id: str) -> dict:
    found = server.http.get(f"/changes/{change_id}").json()["confirmation"]
    return found if found and found["status"] != "scheduled" else {}


@pytest.mark.engine
def test_an_interleaved_matrix_between_the_two_environments_confirms_it(switched):
    itl = next(c for c in switched.found if c["figure"] == "itl_s.p50")
    assert itl["confirmation"] is None  # BENCHD_HISTORY__CONFIRM is off by default
    assert switched.http.post("/changes/nope/confirm").status_code == 404
    asked = switched.http.post(f"/changes/{itl['id']}/confirm")
    assert asked.status_code == 202, asked.text
    assert asked.json()["confirmation"]["status"] == "scheduled"
    assert asked.json()["confirmation"]["environments"] == ["current", "held"]
    wait_for(lambda: verdict(switched, itl["id"]), 240, "the confirmation's verdict")
    confirmation = verdict(switched, itl["id"])
    assert confirmation["status"] == "confirmed", confirmation
    assert confirmation["ci_low"] > 0 and confirmation["relative_change"] > 0.5
    matrix = switched.http.get(f"/matrices/{confirmation['matrix_id']}").json()
    assert matrix["status"] == "succeeded" and [v["values"] for v in matrix["variants"]] == [
        {"environment": "current"}, {"environment": "held"}]
    assert [(r["round"], r["variant"]) for r in matrix["runs"]] == [(i, v) for i in range(4) for v in (0, 1)]
    tokens = next(c for c in switched.found if c["figure"] == "output_tokens_per_s")
    wait_for(lambda: verdict(switched, tokens["id"]), 30, "the sibling's verdict")
    sibling = verdict(switched, tokens["id"])
    assert sibling["matrix_id"] == confirmation["matrix_id"] and sibling["status"] == "confirmed"
    p99 = next((c for c in switched.found if c["figure"] == "ttft_s.p99"), None)
    if p99 is not None:  # 48 requests a side: too few for a p99's interval
        wait_for(lambda: verdict(switched, p99["id"]), 30, "the p99's verdict")
        found = verdict(switched, p99["id"])
        assert found["status"] == "inconclusive" and "too few samples" in found["reason"]
    # The matrix's runs are its experiment: the history holds none of them.
    points = {p["run_id"] for s in switched.http.get(f"/history/{WORKLOAD}").json()["series"]
              for f in s["figures"] for p in f["points"]}
    assert not points & {r["run_id"] for r in matrix["runs"]}


@pytest.mark.engine
def test_a_cancelled_confirmation_fails_with_the_reason(switched):
    # After the confirmed one (above): asked again, a new matrix, cancelled.
    itl = next(c for c in switched.found if c["figure"] == "itl_s.p50")
    asked = switched.http.post(f"/changes/{itl['id']}/confirm")
    assert asked.status_code == 202, asked.text
    matrix_id = asked.json()["confirmation"]["matrix_id"]
    assert switched.http.get(f"/changes/{itl['id']}").json()["confirmation"]["matrix_id"] == matrix_id
    assert switched.http.delete(f"/matrices/{matrix_id}").status_code == 200
    wait_for(lambda: verdict(switched, itl["id"]), 120, "the confirmation's verdict")
    found = verdict(switched, itl["id"])
    assert found["status"] == "failed" and "the matrix cancelled" in found["reason"], found


@pytest.mark.engine
def test_the_pages_in_a_real_browser_and_the_command_line(switched):
    from tests.browser import Chromium
    from tests.report.helpers import clean, well_formed

    itl = next(c for c in switched.found if c["figure"] == "itl_s.p50")
    history = switched.http.get(f"/history/{WORKLOAD}", params={"format": "html"})
    assert history.status_code == 200 and history.headers["content-type"].startswith("text/html")
    well_formed(history.text)
    report = switched.http.get(f"/runs/{itl['run_id']}/report").text
    def style(text: str) -> str:
        return text[text.index("<style>"):text.index("</style>")]

    assert style(history.text) == style(report)  # the report's look
    with Chromium() as chromium:
        loaded = chromium.load(f"{switched.url}/history/{WORKLOAD}?format=html", "history.png")
        clean(loaded)
        (device,) = {s["device"] for s in switched.http.get(f"/history/{WORKLOAD}").json()["series"]}
        name = f"{device}-test-node-itl_s.p50".replace(".", "-").replace(" ", "-")
        chart = loaded.charts[name]
        assert not chart["empty"] and chart["marks"] >= 3 and chart["width"] > 300, chart
        assert "change points: " in chart["note"] and "(worse)" in chart["note"]
        assert "environment current → held" in loaded.text and "left out of the series" in loaded.text
        changes_page = chromium.load(f"{switched.url}/changes?format=html&workload={WORKLOAD}", "changes.png")
        clean(changes_page)
        assert "environment current → held" in changes_page.text and "ITL p50" in changes_page.text
    cli = subprocess.run([sys.executable, "-m", "benchd.cli", "history", WORKLOAD, "--server", switched.url],
                         capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert cli.returncode == 0, cli.stderr
    now = ChangePoint.model_validate(switched.http.get(f"/changes/{itl['id']}").json())  # as more runs moved it
    assert now.sentence().split(" at ")[0] in cli.stdout
    assert "environment current → held" in cli.stdout and "left out" in cli.stdout and itl["id"] in cli.stdout
    refused = subprocess.run([sys.executable, "-m", "benchd.cli", "history", WORKLOAD, "--server", switched.url,
                              "--limit", "20000"], capture_output=True, text=True, cwd=ROOT, timeout=120,
                             check=False)
    assert refused.returncode == 1 and "limit" in refused.stderr and "Traceback" not in refused.stderr


@pytest.mark.engine
def test_prometheus_fires_benchd_change_point_and_the_dashboard_marks_it(switched, tmp_path):
    import json
    import shutil

    import yaml

    from tests.helpers import free_port, prometheus_query

    rules = tmp_path / "rules"
    rules.mkdir()
    shutil.copy(ROOT / "prometheus-rules" / "benchd-changes.yml", rules)
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "rule_files": [f"{rules}/*.yml"],
        "scrape_configs": [{"job_name": "benchd", "static_configs": [
            {"targets": [f"127.0.0.1:{switched.port}"]}]}]}))
    port = free_port()
    prometheus = subprocess.Popen(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'db'}",
                                   f"--web.listen-address=127.0.0.1:{port}"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api = f"http://127.0.0.1:{port}/api/v1"

    def query(expr: str) -> list:
        return prometheus_query(api, expr)

    try:
        wait_for(lambda: query(f'ALERTS{{alertname="BenchdChangePoint", workload="{WORKLOAD}", '
                               f'figure="itl_s.p50", alertstate="firing"}}'), 90, "BenchdChangePoint to fire")
        live = json.loads((ROOT / "grafana" / "dashboards" / "benchd-live.json").read_text())
        panel = next(p for p in live["panels"] if p["title"].startswith("Change points"))
        (annotation,) = [a for a in live["annotations"]["list"] if a["name"] == "change points"]
        for expr in [t["expr"] for t in panel["targets"]] + [annotation["expr"]]:
            found = query(expr.replace('"$node"', '".*"').replace('"$workload"', '".*"'))
            assert found, expr
        marks = query(annotation["expr"].replace('"$node"', '".*"').replace('"$workload"', '".*"'))
        itl = next(c for c in switched.found if c["figure"] == "itl_s.p50")
        at = datetime.fromisoformat(itl["at"]).timestamp() * 1000
        assert any(float(m["value"][1]) == pytest.approx(at, abs=1) for m in marks
                   if m["metric"]["figure"] == "itl_s.p50")  # the mark is at the change's time
    finally:
        prometheus.terminate()
        prometheus.wait(30)
