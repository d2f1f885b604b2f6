"""A workload's history as the API and its page show it: each series' figures, runs, segments and change points."""

from __future__ import annotations

from datetime import datetime

from benchd.measure import changes
from benchd.measure.deadline import in_time
from benchd.measure.history import FIGURES, ChangePoint, Excluded, SegmentView, SeriesRun, segment_view, series_of
from benchd.spec.fields import Documented


class Point(Documented):
    run_id: str
    """The run's id."""
    at: datetime
    """Its time."""
    value: float
    """The figure's value."""


class FigureSeries(Documented):
    figure: str
    """The figure (itl_s.p50, output_tokens_per_s, …)."""
    label: str
    """Its name on pages."""
    unit: str
    """Its unit."""
    higher_is_worse: bool
    """A rise is a regression (latencies, energy)."""
    points: list[Point]
    """Each run's value, oldest first."""
    segments: list[SegmentView]
    """The series cut at its change points."""
    change_points: list[ChangePoint]
    """Those the latest analysis found, oldest first."""


class SeriesView(Documented):
    workload: str
    """The workload."""
    device: str
    """The GPU model (or CPU) its runs ran on."""
    node: str
    """The node its runs ran on."""
    clock: str
    """The clock state of the runs it holds."""
    runs: int
    """The runs it holds."""
    figures: list[FigureSeries]
    """Each figure's series."""
    excluded: list[Excluded]
    """Runs left out: invalid, or under another clock state."""


class HistoryView(Documented):
    workload: str
    """The workload."""
    limit: int
    """The newest runs of the workload read."""
    series: list[SeriesView]
    """A series per GPU model and node."""


def view(workload: str, runs: list[SeriesRun], stored: list[ChangePoint], limit: int,
         confidence: float = changes.CONFIDENCE, deadline: float | None = None) -> HistoryView:
    """Each series' points, its segments between the active change points stored for it, and those change points.
    deadline: time.monotonic() past which OverBudget is raised (measure/deadline.py), looked at a figure each."""
    out = []
    for series in series_of(workload, runs):
        figures = []
        for name, figure in FIGURES.items():
            in_time(deadline)
            held, values = series.values(name)
            if not held:
                continue
            position = {run.run_id: i for i, run in enumerate(held)}
            found = sorted((c for c in stored if c.active and c.figure == name and c.device == series.device
                            and c.node == series.node and c.run_id in position), key=lambda c: position[c.run_id])
            cuts = changes.segments(values, [position[c.run_id] for c in found], confidence)
            figures.append(FigureSeries(
                figure=name, label=figure.name, unit=figure.unit, higher_is_worse=figure.higher_is_worse,
                points=[Point(run_id=r.run_id, at=r.at, value=float(v)) for r, v in zip(held, values)],
                segments=[segment_view(held, s) for s in cuts], change_points=found))
        out.append(SeriesView(workload=workload, device=series.device, node=series.node, clock=series.clock,
                              runs=len(series.runs), figures=figures, excluded=series.excluded))
    return HistoryView(workload=workload, limit=limit, series=out)
