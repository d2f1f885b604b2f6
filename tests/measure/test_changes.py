"""A workload's history: change points found by ruptures and a t-test on synthetic series, the series' runs and
what it leaves out, the stack between two segments, a matrix's verdict on a change point."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from benchd.daemon.history import judge
from benchd.measure import changes
from benchd.measure.comparison import MetricChange
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
)
from benchd.measure.matrix import MatrixComparison, VariantComparison
from benchd.measure.stack import stack_of
from tests.measure.helpers import noise

T0 = datetime(2026, 11, 20, 14, 0, tzinfo=UTC)


# ---- the detector ------------------------------------------------------------------------------------------


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


def test_a_cold_run_is_left_out_beside_warm_ones_and_a_series_of_cold_runs_holds_those():
    """Issue 53: on an H100 the first run on each freshly started engine was 1.5 × its segment's TTFT p50, and
    widened both segments' spread until a clear +25 % step went unflagged. A cold run (its engine's first) is left
    out of a series of warm runs, with the reason; a series whose runs are mostly cold (each of a freshly started
    engine: two schedules taking turns on one worker) holds those, and leaves out its few warm ones."""
    def cold(i, node="n1"):
        found = run(i, 150, node=node)
        found.cold = True
        return found

    runs = [cold(0), run(1, 100), run(2, 100), cold(3), run(4, 100), cold(5, "n2"), cold(6, "n2"),
            run(7, 100, node="n2")]
    found = {s.node: s for s in series_of("w", runs)}
    assert [r.run_id for r in found["n1"].runs] == ["r1", "r2", "r4"] and not found["n1"].cold
    assert [(e.run_id, e.reason) for e in found["n1"].excluded] == [
        (f"r{i}", "cold: the first run after its engine started, the engine's own warm-up in its figures")
        for i in (0, 3)]
    assert [r.run_id for r in found["n2"].runs] == ["r5", "r6"] and found["n2"].cold
    assert [e.reason for e in found["n2"].excluded] == [
        "warm: most of the series' runs are each the first of a freshly started engine"]


def test_the_stack_between_two_segments_names_what_most_runs_of_each_side_ran():
    def meta(transformers: str, environment: str, blocks: int) -> dict:
        return {"benchd_version": "0.1.0", "transformers_version": transformers, "environment": environment,
                "commit": {"commit": "abc"}, "engine_settings": {"continuous_batching": {"num_blocks": blocks},
                                                                 "memory_plan": {"total": blocks}}}

    hardware, spec = {"gpus": [{"uuid": "GPU-1"}]}, {"engine": "transformers"}
    before = [stack_of(spec, meta("5.17.0", "current", 64), hardware, "n1") for _ in range(3)]
    after = [stack_of(spec, meta("5.18.0", "next", 64), hardware, "n1"),
             stack_of(spec, meta("5.18.0", "next", 128), hardware, "n1")]
    assert before[0]["gpu_uuids"] == "GPU-1" and before[0]["commit"] == "abc" and before[0]["engine"] == "transformers"
    assert "engine_settings.memory_plan.total" not in before[0]
    assert stack_difference(before, after) == [
        StackShift(field="environment", before="current", after="next"),
        StackShift(field="transformers_version", before="5.17.0", after="5.18.0")]


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
    assert change_point().sentence() == ("ITL p50 +8.1% [+6.0%, +10.2%] at 2026-11-20 14:00 (p < 0.001); between "
                                         "the segments: transformers 5.17.0 → 5.18.0")
    assert set(FIGURES) == set(FigureName.__args__)


@pytest.mark.parametrize("low, high, decided, verdict", [
    (0.05, 0.11, "slower", "confirmed"), (-0.02, 0.03, "equivalent", "not reproduced"),
    (-0.11, -0.05, "faster", "not reproduced"), (None, None, "inconclusive", "inconclusive"),
    # Two rounds at the verdicts' confidence: an interval that holds no change and reaches far past it says neither.
    (-0.60, 2.50, "inconclusive", "inconclusive")])
def test_a_matrix_confirms_a_change_only_when_its_interval_lies_on_the_change_side(low, high, decided, verdict):
    metric = MetricChange(metric="itl_s.p50", a=0.01, b=0.0108, relative_change=0.08, ci_low=low, ci_high=high,
                          samples_a=500, samples_b=500, verdict=decided,
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


def test_a_history_view_past_its_deadline_stops_with_over_budget():
    # Issue 48: /history?limit=10000 had no time bound (3.6 s a read, 11.7 s with 798 change points).
    import time

    from benchd.measure.deadline import OverBudget
    from benchd.measure.history_view import view

    at = datetime(2026, 1, 1, tzinfo=UTC)
    runs = [SeriesRun(f"r{i}", at + timedelta(minutes=i), "n", "H100", True, None, {"itl_s.p50": 0.01})
            for i in range(20)]
    assert view("w", runs, [], 20, deadline=time.monotonic() + 60).series[0].runs == 20
    with pytest.raises(OverBudget):
        view("w", runs, [], 20, deadline=time.monotonic() - 1)
