"""A workload's history: change points found by ruptures and a t-test on synthetic series, the series' runs and
what it leaves out, the stack between two segments, a matrix's verdict on a change point; and end to end, real
scheduled runs of the tiny model on SQLite and PostgreSQL whose environment switches to one that slows the worker:
the change points found, named by that switch, exported on /metrics, drawn on a page a real chromium loads, listed
by the command line, and confirmed by an interleaved matrix between the two environments."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from benchd.daemon.history import judge
from benchd.measure import changes
from benchd.measure.compare import MetricChange
from benchd.measure.history import (
    FIGURES,
    ChangePoint,
    Confirmation,
    FigureName,
    SegmentView,
    SeriesRun,
    StackShift,
    series_of,
    stack_difference,
    stack_of,
)
from benchd.measure.matrix import MatrixComparison, VariantComparison
from tests.helpers import ROOT, daemon, spec, submit, wait_for

T0 = datetime(2026, 11, 20, 14, 0, tzinfo=UTC)


# ---- the detector ------------------------------------------------------------------------------------------


def noise(n: int, sd: float, seed: int) -> np.ndarray:
    return np.exp(np.random.default_rng(seed).normal(0, sd, n))


def test_a_5_percent_step_in_2_percent_noise_is_found_where_it_is_with_its_interval():
    values = 100 * noise(60, 0.02, 1)
    values[40:] *= 1.05
    found = changes.detect(values)
    assert [s.index for s in found] == [40]
    split = found[0]
    assert split.p_value < changes.ALPHA and split.ci_low < 0.05 < split.ci_high and split.ci_low > 0.02
    assert (split.before.start, split.before.end, split.after.start, split.after.end) == (0, 40, 40, 60)
    assert split.before.ci_low < split.before.mean < split.before.ci_high
    assert split.after.mean / split.before.mean - 1 == pytest.approx(split.relative_change)


def test_pure_noise_and_a_constant_series_have_no_change_point():
    assert changes.detect(100 * noise(1_000, 0.02, 2)) == []
    assert changes.detect([5.0] * 50) == []
    assert changes.detect([5.0] * 6) == []  # too short to split at all


def test_one_outlier_is_no_change_point_and_a_step_is_named_where_it_is_once_min_runs_runs_show_it():
    values = 100 * noise(40, 0.02, 3)
    values[-1] *= 1.3  # one run hit by something
    assert changes.detect(values) == []
    values[20] *= 1.3
    assert changes.detect(values) == []
    step = np.concatenate([values[:-1], 120 * noise(changes.MIN_RUNS, 0.02, 4)])
    assert [s.index for s in changes.detect(step)] == [39]


# ---- the series --------------------------------------------------------------------------------------------


def run(i: int, value: float, valid: bool | None = True, throttled: float | None = None, device: str = "H100",
        node: str = "n1") -> SeriesRun:
    return SeriesRun(run_id=f"r{i}", at=T0 + timedelta(hours=i), node=node, device=device, valid=valid,
                     throttled_fraction=throttled, figures={"output_tokens_per_s": value})


def test_series_keep_gpu_models_and_nodes_apart_and_list_what_they_leave_out():
    runs = [run(0, 100, throttled=0.0), run(1, 100, valid=False, throttled=0.0), run(2, 100, throttled=0.9),
            run(3, 100, throttled=0.1), run(4, 100, device="A100"), run(5, 100, node="n2", throttled=1.0),
            run(6, 100, node="n2", throttled=0.8)]
    found = {(s.device, s.node): s for s in series_of("w", runs)}
    assert set(found) == {("H100", "n1"), ("A100", "n1"), ("H100", "n2")}
    h100 = found[("H100", "n1")]
    assert [r.run_id for r in h100.runs] == ["r0", "r3"] and h100.clock == "nominal"
    assert [(e.run_id, e.reason) for e in h100.excluded] == [
        ("r1", "invalid"), ("r2", "clock state slowed (a GPU slowed in 90% of its samples), the series' is nominal")]
    assert found[("H100", "n2")].clock == "slowed" and not found[("H100", "n2")].excluded  # its usual state
    assert found[("A100", "n1")].clock == "unknown"


def test_the_stack_between_two_segments_names_what_most_runs_of_each_side_ran():
    def meta(transformers: str, environment: str, blocks: int) -> dict:
        return {"benchd_version": "0.1.0", "transformers_version": transformers, "environment": environment,
                "commit": {"commit": "abc"}, "engine_settings": {"continuous_batching": {"num_blocks": blocks},
                                                                 "memory_plan": {"total": blocks}}}

    hardware = {"gpus": [{"uuid": "GPU-1"}]}
    before = [stack_of(meta("5.17.0", "current", 64), hardware, "transformers") for _ in range(3)]
    after = [stack_of(meta("5.18.0", "next", 64), hardware, "transformers"),
             stack_of(meta("5.18.0", "next", 128), hardware, "transformers")]
    assert before[0]["gpus"] == "GPU-1" and before[0]["commit"] == "abc" and before[0]["engine"] == "transformers"
    assert "engine_settings.memory_plan.total" not in before[0]
    assert stack_difference(before, after) == [
        StackShift(field="transformers_version", before="5.17.0", after="5.18.0"),
        StackShift(field="environment", before="current", after="next")]


def change_point(figure: FigureName = "itl_s.p50", relative_change: float = 0.081) -> ChangePoint:
    segment = SegmentView(runs=10, first_run="a", last_run="b", start=T0, end=T0, mean=0.01, ci_low=0.0099,
                          ci_high=0.0101)
    return ChangePoint(id="c1", workload="w", device="H100", node="n1", figure=figure, run_id="r10", at=T0,
                       direction="worse", relative_change=relative_change, ci_low=0.06, ci_high=0.102,
                       p_value=0.00001, confidence=0.95, before=segment, after=segment, detected_at=T0,
                       stack=[StackShift(field="transformers_version", before="5.17.0", after="5.18.0")],
                       confirmation=Confirmation(status="scheduled", matrix_id="m1", environments=["a", "b"],
                                                 requested_at=T0))


def test_a_change_point_says_itself_in_one_sentence():
    assert change_point().sentence() == ("ITL p50 +8.1 % [+6.0, +10.2] at 2026-11-20 14:00 (p < 0.001); between the "
                                         "segments: transformers 5.17.0 → 5.18.0")
    assert set(FIGURES) == set(FigureName.__args__)


@pytest.mark.parametrize("low, high, verdict", [(0.05, 0.11, "confirmed"), (-0.02, 0.03, "not reproduced"),
                                                (-0.11, -0.05, "not reproduced"), (None, None, "inconclusive")])
def test_a_matrix_confirms_a_change_only_when_its_interval_lies_on_the_change_side(low, high, verdict):
    metric = MetricChange(metric="itl_s.p50", a=0.01, b=0.0108, relative_change=0.08, ci_low=low, ci_high=high,
                          samples_a=500, samples_b=500,
                          verdict="inconclusive" if low is None else "no significant change",
                          reason="too few samples" if low is None else None)
    comparison = MatrixComparison.model_validate({
        "baseline": 0, "threshold": 0.05, "confidence": 0.95, "variants": [
            VariantComparison.model_validate({
                "index": i, "label": f"environment={e}", "values": {"environment": e}, "baseline": i == 0,
                "run_ids": [], "statuses": [], "output_tokens_per_s": None, "ttft_p50_s": None, "itl_p50_s": None,
                "tpot_p50_s": None, "weight_bytes": None, "peak_memory_bytes": None, "model_load_s": None,
                "stack": {}, "tokens": None, "metrics": [] if i == 0 else [metric.model_dump()]}).model_dump()
            for i, e in enumerate(("a", "b"))]})
    found = judge(change_point(), "succeeded", None, comparison)
    assert found.status == verdict and found.matrix_id == "m1" and found.environments == ["a", "b"]
    assert judge(change_point(), "failed", "1 of 4 runs did not succeed", comparison).status == "failed"


# ---- the daemon's analysis over a store -------------------------------------------------------------------


def write_run(store, i: int, environment: str, itl: float) -> str:
    """A run as the daemon stores one: its spec, its first stage's figures, its stack and hardware summary."""
    from benchd.store.database import now
    from benchd.store.operations import FinishRun
    from tests.helpers import make_spec

    run_id = f"run{i:03d}"
    store.create_run(run_id, {**make_spec(name="w").model_dump(mode="json"), "environment": environment})
    stage = {"stage": "concurrent=4", "status": "succeeded", "requests": 12, "errors": 0, "duration_s": 1.0,
             "output_tokens_per_s": 4 / itl, "requests_per_s": 12.0, "ttft_s": {"p50": 5 * itl, "p99": 9 * itl},
             "itl_s": {"p50": itl, "p99": 2 * itl}, "tpot_s": {"p50": itl}, "e2e_s": {"p99": 20 * itl},
             "kv_cache_occupancy_peak": 0.1}
    metadata = {"device_name": "NVIDIA H100 80GB HBM3", "device": "cuda:1", "environment": environment,
                "transformers_version": "5.17.0" if environment == "current" else "5.18.0"}
    row = {"stage_index": 0, "gpu": "", **{k: stage[k] for k in ("stage", "status", "requests", "errors", "duration_s",
                                                                  "output_tokens_per_s", "requests_per_s",
                                                                  "kv_cache_occupancy_peak")},
           "ttft_p50_s": 5 * itl, "ttft_p99_s": 9 * itl, "itl_p50_s": itl, "itl_p99_s": 2 * itl, "tpot_p50_s": itl,
           "e2e_p99_s": 20 * itl}
    store.spool.submit(FinishRun(run_id, {
        "status": "succeeded", "error": None, "error_stage": None, "finished_at": now().isoformat(),
        "summary": [stage], "run_metadata": metadata, "timeline": None, "valid": True, "model": "tiny", "label": None,
        "hardware": {"throttled_fraction": 0.0, "gpus": [{"uuid": "GPU-1"}],
                     "energy_per_output_token_joules": 0.5 * itl},
        "energy_per_token_j": 0.5 * itl, "parts": None, "capacity_requests_per_s": None}, [row], []).as_json())
    return run_id


def test_the_daemon_confirms_a_switch_by_itself_once_and_withdraws_what_it_no_longer_finds(tmp_path):
    from prometheus_client import CollectorRegistry, generate_latest

    from benchd.daemon.history import History
    from benchd.measure.history import HistorySettings
    from benchd.store.database import Store
    from benchd.telemetry.metrics import Metrics

    store = Store(f"sqlite:///{tmp_path}/benchd.db", spool_dir=tmp_path / "spool", node="n1")
    store.start()
    assert store.wait_ready(30)
    itl = [float(v) for v in 0.010 * noise(16, 0.02, 5)]
    for i, value in enumerate(itl):
        write_run(store, i, "current" if i < 10 else "next", value * (1.08 if i >= 10 else 1.0))
    asked: list = []

    def submit(matrix):  # the daemon's Daemon.submit_internal_matrix, which tests/test_history.py runs end to end
        asked.append(matrix)
        return f"m{len(asked)}", []

    metrics = Metrics(CollectorRegistry())
    settings = HistorySettings(confirm=True)
    history = History(settings, store, metrics, "n1", {"next"}, submit)
    found = history.analyse("w")
    assert {c.figure for c in found} == set(FIGURES) and {c.run_id for c in found} == {"run010"}
    assert all(c.direction == "worse" and c.before.runs == 10 and c.after.runs == 6 for c in found)
    assert [c.says() for c in found[0].stack] == ["transformers 5.17.0 → 5.18.0", "environment current → next"]
    (matrix,) = asked  # one matrix for the switch's seven figures
    assert matrix.matrix == {"environment": ["current", "next"]} and matrix.repeats == settings.confirm_repeats
    assert [v.spec.device for v in matrix.variants()] == ["cuda:1", "cuda:1"]  # the GPU the series ran on
    stored = history_page(store, active=True)
    assert {c.confirmation.matrix_id for c in stored} == {"m1"} and len(stored) == len(FIGURES)
    page = generate_latest(metrics.registry).decode()
    assert 'benchd_change_points_total{direction="worse",figure="itl_s.p50",workload="w"} 1.0' in page
    assert 'benchd_change_point_direction{device="NVIDIA H100 80GB HBM3",figure="itl_s.p50",workload="w"} 1.0' in page

    # An operator asks for larger changes only: the next analysis finds none, and withdraws them (kept, not active).
    history.settings = HistorySettings(confirm=True, min_relative_change=0.5)
    assert history.analyse("w") == []
    assert history_page(store, active=True) == [] and len(history_page(store, active=False)) == len(FIGURES)
    assert all(c.withdrawn_at is not None for c in history_page(store, active=False))
    assert "benchd_change_point_direction{" not in generate_latest(metrics.registry).decode()
    # Found again, they are the same change points, active again, counted again, their confirmation kept.
    history.settings = settings
    again = history.analyse("w")
    assert {c.id for c in again} == {c.id for c in stored} and len(asked) == 1
    assert all(c.active and c.withdrawn_at is None for c in history_page(store, active=True))
    page = generate_latest(metrics.registry).decode()
    assert 'benchd_change_points_total{direction="worse",figure="itl_s.p50",workload="w"} 2.0' in page
    # One run more moves none of them.
    write_run(store, 16, "next", 0.0108)
    assert {c.id for c in history.analyse("w")} == {c.id for c in stored}
    store.close()


def history_page(store, active: bool) -> list[ChangePoint]:
    from benchd.store import history

    store.flush(10)
    return history.list_change_points(store, "w", active=active).items


# ---- end to end --------------------------------------------------------------------------------------------

# An environment whose interpreter holds the GIL for 20 ms of every 21 in a thread of its own once its worker has an
# engine (a PyDLL call keeps the GIL while it sleeps, so it burns no core; the worker starts at its usual pace): its
# worker generates several times slower, a real change of the stack.
HOLDER = """import ctypes, sys, threading, time
_libc = ctypes.PyDLL(None)
def _hold():
    while "benchd.engines.transformers.engine" not in sys.modules:
        time.sleep(0.05)
    while True:
        _libc.usleep(20000)
        time.sleep(0.001)
threading.Thread(target=_hold, name="gil-holder", daemon=True).start()
"""


def held_python(where: Path) -> Path:
    site = where / "held-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HOLDER)
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


def fresh_postgres(server_url: str, name: str) -> str:
    import sqlalchemy as sa

    admin = sa.create_engine(f"{server_url}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as db:
        db.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        db.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return f"{server_url}/{name}"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def switched(request, tmp_path_factory):
    """Five runs of a schedule in the daemon's environment and one invalid run, then the schedule's spec names
    `held` until change points in ITL p50 and output tok/s are found."""
    where = tmp_path_factory.mktemp(f"history-{request.param}")
    postgres = request.param == "postgresql"
    url = (fresh_postgres(request.getfixturevalue("postgres_server"), "t_history") if postgres
           else f"sqlite:///{where}/benchd.db")
    with daemon(where, database_url=url, environments={"held": str(held_python(where))},
                history={"confirm_repeats": 2}) as server:
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
        server.postgres, server.invalid, server.found = postgres, invalid, found
        yield server


@pytest.mark.engine
def test_a_switch_of_environment_is_found_where_it_happened_and_named(switched):
    itl = next(c for c in switched.found if c["figure"] == "itl_s.p50")
    assert itl["direction"] == "worse" and itl["relative_change"] > 0.5 and itl["p_value"] < changes.ALPHA
    assert itl["ci_low"] > 0.3 and itl["active"]
    assert {"field": "environment", "before": "current", "after": "held", "mixed": False} in itl["stack"]
    assert itl["before"]["runs"] >= 5 and itl["after"]["runs"] >= changes.MIN_RUNS
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
    assert [(e["run_id"], e["reason"]) for e in series["excluded"]] == [(switched.invalid, "invalid")]
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
    relative = next(x for x in metrics.splitlines() if x.startswith(f"benchd_change_point_relative_change{{{labels}"))
    assert float(relative.split()[-1]) == pytest.approx(itl["change_points"][0]["relative_change"])


def verdict(server, change_id: str) -> dict:
    found = server.http.get(f"/changes/{change_id}").json()["confirmation"]
    return found if found and found["status"] != "scheduled" else {}


@pytest.mark.engine
def test_an_interleaved_matrix_between_the_two_environments_confirms_it(switched):
    if switched.postgres:
        pytest.skip("with SQLite: asked for, run and judged (with PostgreSQL: cancelled)")
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
    assert [(r["round"], r["variant"]) for r in matrix["runs"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    tokens = next(c for c in switched.found if c["figure"] == "output_tokens_per_s")
    wait_for(lambda: verdict(switched, tokens["id"]), 30, "the sibling's verdict")
    sibling = verdict(switched, tokens["id"])
    assert sibling["matrix_id"] == confirmation["matrix_id"] and sibling["status"] == "confirmed"
    p99 = next((c for c in switched.found if c["figure"] == "ttft_s.p99"), None)
    if p99 is not None:  # 24 requests a side: too few for a p99's interval
        wait_for(lambda: verdict(switched, p99["id"]), 30, "the p99's verdict")
        found = verdict(switched, p99["id"])
        assert found["status"] == "inconclusive" and "too few samples" in found["reason"]
    # The matrix's runs are its experiment: the history holds none of them.
    points = {p["run_id"] for s in switched.http.get(f"/history/{WORKLOAD}").json()["series"]
              for f in s["figures"] for p in f["points"]}
    assert not points & {r["run_id"] for r in matrix["runs"]}


@pytest.mark.engine
def test_a_cancelled_confirmation_fails_with_the_reason(switched):
    if not switched.postgres:
        pytest.skip("with PostgreSQL (with SQLite the matrix runs to its verdict)")
    itl = next(c for c in switched.found if c["figure"] == "itl_s.p50")
    asked = switched.http.post(f"/changes/{itl['id']}/confirm")
    assert asked.status_code == 202, asked.text
    matrix_id = asked.json()["confirmation"]["matrix_id"]
    others = [switched.http.get(f"/changes/{c['id']}").json()["confirmation"] for c in switched.found]
    assert {o["matrix_id"] for o in others} == {matrix_id}  # one matrix for the switch's figures
    assert switched.http.delete(f"/matrices/{matrix_id}").status_code == 200
    wait_for(lambda: verdict(switched, itl["id"]), 120, "the confirmation's verdict")
    found = verdict(switched, itl["id"])
    assert found["status"] == "failed" and "the matrix cancelled" in found["reason"], found


@pytest.mark.engine
def test_the_pages_in_a_real_browser_and_the_command_line(switched):
    if switched.postgres:
        pytest.skip("once, with SQLite")
    from tests.browser import Chromium
    from tests.test_pages import clean, well_formed

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
    if switched.postgres:
        pytest.skip("once, with SQLite")
    import json
    import shutil

    import httpx
    import yaml

    from tests.helpers import free_port

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
        try:
            response = httpx.get(f"{api}/query", params={"query": expr}, timeout=10)
        except httpx.TransportError:
            return []
        if response.status_code == 503:
            return []
        body = response.json()
        assert body["status"] == "success", (expr, body)
        return body["data"]["result"]

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
