"""The comparisons' gauges, which the alert rules watch: a scheduled run against its workload's baseline, a matrix's
variants (and a scheduled matrix against its baseline variant), and the latest change point in each workload's
history."""

from __future__ import annotations

from benchd.measure.comparison import Comparison
from benchd.measure.history import ChangePoint
from benchd.measure.matrix import MatrixComparison
from benchd.telemetry.metrics import Metrics


def regression(m: Metrics, workload: str, comparison: Comparison) -> None:
    """A scheduled run against its baseline: benchd_regression_detected per metric with data on both sides (1
    slower; 0 otherwise, an inconclusive verdict too: a regression not detected, so an alert clears when the data
    no longer carries it), its relative change, and whether the two ran under other clock states."""
    m.regression_clocks.labels(workload).set(float(comparison.clock_states is not None))
    if comparison.quality is not None and comparison.quality.verdict != "unknown":
        m.quality_different.labels(workload).set(float(comparison.quality.verdict == "different"))
    for change in comparison.metrics:
        if change.verdict == "n/a":  # no data on a side, or no verdict given
            continue
        m.regression.labels(workload, change.metric).set(float(change.verdict == "slower"))
        if change.relative_change is not None:
            m.regression_change.labels(workload, change.metric).set(change.relative_change)


def matrix(m: Metrics, workload: str, comparison: MatrixComparison) -> None:
    """The latest matrix of a workload, a series per variant (and metric): the workload's earlier variants are
    removed first, so its series stay within one matrix's size."""
    m.touch(workload)
    for family in m.matrix_families:
        family.forget("workload", workload)
    baseline = next((v.label for v in comparison.variants if v.baseline), "")
    for v in comparison.variants:
        if v.output_tokens_per_s is not None:
            m.variant_throughput.labels(workload, v.label).set(v.output_tokens_per_s)
        if v.weight_bytes is not None:
            m.variant_weight_bytes.labels(workload, v.label).set(v.weight_bytes)
        if v.tokens is not None and v.tokens.ratio is not None:
            m.variant_token_agreement.labels(workload, v.label).set(v.tokens.ratio)
        if (q := v.quality) is not None:
            if q.verdict != "unknown":
                m.variant_different.labels(workload, v.label).set(float(q.verdict == "different"))
            for family, value in ((m.variant_exact_match, q.exact_match), (m.variant_kl, q.kl),
                                  (m.variant_logprob_diff, q.logprob_diff)):
                if value is not None:
                    family.labels(workload, v.label).set(value)
        for change in v.metrics:
            if change.relative_change is not None:
                m.variant_change.labels(workload, v.label, change.metric).set(change.relative_change)
            if change.verdict != "n/a" and not v.baseline:
                m.variant_regression.labels(workload, v.label, baseline, change.metric).set(
                    float(change.verdict == "slower"))


def matrix_regression(m: Metrics, workload: str, comparison: MatrixComparison) -> None:
    """A scheduled matrix (a candidate against the daemon's environment, say) as a scheduled run against its
    baseline: benchd_regression_detected per metric, 1 when any variant is slower than the matrix's baseline (the
    rule BenchdRegression fires on it), the relative change of the first variant that set it, and whether any
    variant ran under other clock states than the baseline."""
    verdicts: dict[str, tuple[float, float | None]] = {}
    for v in comparison.variants:
        for change in v.metrics:
            if change.verdict == "n/a" or v.baseline:
                continue
            found = (float(change.verdict == "slower"), change.relative_change)
            if change.metric not in verdicts or found[0] > verdicts[change.metric][0]:
                verdicts[change.metric] = found
    for metric, (slower, relative_change) in verdicts.items():
        m.regression.labels(workload, metric).set(slower)
        if relative_change is not None:
            m.regression_change.labels(workload, metric).set(relative_change)
    differ = any(v.clock_states is not None for v in comparison.variants if not v.baseline)
    m.regression_clocks.labels(workload).set(float(differ))


def change_points(m: Metrics, workload: str, found: list[ChangePoint], new: list[ChangePoint]) -> None:
    """A workload's analysis: its new change points counted, the latest of each figure as gauges."""
    for change in new:
        m.change_points.labels(workload, change.figure, change.direction).inc()
    latest_changes(m, workload, found)


def latest_changes(m: Metrics, workload: str, changes: list[ChangePoint]) -> None:
    """The latest change point of each figure and GPU model as gauges (changes: oldest first, in the series' order,
    which no clock moves); the workload's others are removed."""
    m.touch(workload)
    for family in m.change_families:
        family.forget("workload", workload)
    latest: dict[tuple[str, str], ChangePoint] = {}
    for change in changes:
        latest[(change.figure, change.device)] = change
    for (figure, device), change in latest.items():
        m.change_relative.labels(workload, figure, device).set(change.relative_change)
        m.change_direction.labels(workload, figure, device).set(1.0 if change.direction == "worse" else -1.0)
        m.change_time.labels(workload, figure, device).set(change.at.timestamp())
