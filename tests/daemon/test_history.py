"""The daemon's analysis of a workload's history over a store: a switch confirmed by itself once, and change points
it no longer finds withdrawn."""

from __future__ import annotations

import pytest

from benchd.measure.history import (
    FIGURES,
    ChangePoint,
)
from tests.measure.helpers import noise

# ---- the daemon's analysis over a store -------------------------------------------------------------------


def write_run(store, i: int, environment: str, itl: float, perplexity: float | None = None,
              quantization: str = "none") -> str:
    """A run as the daemon stores one: its spec, its first stage's figures, its stack and hardware summary, and its
    quality probe's perplexity when given."""
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
                "transformers_version": "5.17.0" if environment == "current" else "5.18.0",
                "quantization": quantization}
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
        "energy_per_token_j": 0.5 * itl, "parts": None, "capacity_requests_per_s": None,
        "quality": None if perplexity is None else {"prompts": "real", "requests": 12, "ended_at_eos": 3,
                                                    "perplexity": perplexity}}, [row], []).as_json())
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

    # the daemon's Daemon.submit_internal_matrix, which tests/daemon/test_history_live.py runs end to end
    def submit(matrix):
        asked.append(matrix)
        return f"m{len(asked)}", []

    metrics = Metrics(CollectorRegistry())
    settings = HistorySettings(confirm=True)
    history = History(settings, store, metrics, "n1", {"next"}, submit)
    found = history.analyse("w")
    timed = set(FIGURES) - {"perplexity"}  # the runs written here have no quality probe
    assert {c.figure for c in found} == timed and {c.run_id for c in found} == {"run010"}
    assert all(c.direction == "worse" and c.before.runs == 10 and c.after.runs == 6 for c in found)
    assert [c.says() for c in found[0].stack] == ["environment current → next", "transformers 5.17.0 → 5.18.0"]
    (matrix,) = asked  # one matrix for the switch's seven figures
    assert matrix.matrix == {"environment": ["current", "next"]} and matrix.repeats == settings.confirm_repeats
    assert [v.spec.device for v in matrix.variants()] == ["cuda:1", "cuda:1"]  # the GPU the series ran on
    stored = history_page(store, active=True)
    assert {c.confirmation.matrix_id for c in stored} == {"m1"} and len(stored) == len(timed)
    page = generate_latest(metrics.registry).decode()
    assert 'benchd_change_points_total{direction="worse",figure="itl_s.p50",workload="w"} 1.0' in page
    assert 'benchd_change_point_direction{device="NVIDIA H100 80GB HBM3",figure="itl_s.p50",workload="w"} 1.0' in page

    # An operator asks for larger changes only: the next analysis finds none, and withdraws them (kept, not active).
    history.settings = HistorySettings(confirm=True, min_relative_change=0.5)
    assert history.analyse("w") == []
    assert history_page(store, active=True) == [] and len(history_page(store, active=False)) == len(timed)
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


def test_a_clock_jump_moves_no_runs_place_and_no_change_points_direction(tmp_path, monkeypatch):
    """Ten runs stamped a year ahead (a clock corrected after), then six real ones, slower: the store's sequence
    keeps them in the order they ran, so the listing is newest first and the change point says worse."""
    from datetime import timedelta

    from benchd.daemon.history import History
    from benchd.measure.history import HistorySettings
    from benchd.store import database
    from benchd.store.database import Store

    store = Store(f"sqlite:///{tmp_path}/benchd.db", spool_dir=tmp_path / "spool", node="n1")
    store.start()
    assert store.wait_ready(30)
    real = database.now
    itl = [float(v) for v in 0.010 * noise(16, 0.02, 5)]
    for i, value in enumerate(itl):
        monkeypatch.setattr(database, "now", (lambda: real() + timedelta(days=365)) if i < 10 else real)
        write_run(store, i, "current", value * (1.08 if i >= 10 else 1.0))
    assert store.flush(10)
    assert [r["id"] for r in store.list_runs(limit=3).items] == ["run015", "run014", "run013"]
    found = History(HistorySettings(confirm=False), store, None, "n1", set()).analyse("w")
    assert found and {c.run_id for c in found} == {"run010"} and {c.direction for c in found} == {"worse"}
    store.close()


def test_a_change_of_the_probes_perplexity_is_a_change_point_the_stack_explains(tmp_path):
    """Speed steady, the model's answers less likely from the switch on (int8 weights, say): the history finds the
    perplexity's change point alone, worse, and the stack between the segments says what changed."""
    from prometheus_client import CollectorRegistry

    from benchd.daemon.history import History
    from benchd.measure.history import HistorySettings
    from benchd.store.database import Store
    from benchd.telemetry.metrics import Metrics

    store = Store(f"sqlite:///{tmp_path}/benchd.db", spool_dir=tmp_path / "spool", node="n1")
    store.start()
    assert store.wait_ready(30)
    itl = [float(v) for v in 0.010 * noise(16, 0.02, 7)]
    for i, value in enumerate(itl):
        switched = i >= 10
        write_run(store, i, "current", value, perplexity=13.40 if switched else 12.93,
                  quantization="int8_weight_only" if switched else "none")
    history = History(HistorySettings(), store, Metrics(CollectorRegistry()), "n1", set(), lambda m: ("m", []))
    (found,) = history.analyse("w")
    assert (found.figure, found.run_id, found.direction) == ("perplexity", "run010", "worse")
    assert found.relative_change == pytest.approx(13.40 / 12.93 - 1, abs=1e-6)
    assert [c.says() for c in found.stack] == ["quantization none → int8_weight_only"]
    assert found.sentence().startswith("probe perplexity +3.6% [")
