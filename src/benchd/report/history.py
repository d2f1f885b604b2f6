"""A workload's history page (each series' figures run by run, its segments shaded and each change point with what
explains it) and the change points' page, in the report pages' look."""

from __future__ import annotations

import re
from collections.abc import Sequence

from benchd.measure.history import FIGURES, ChangePoint
from benchd.measure.history_view import FigureSeries, HistoryView, SeriesView
from benchd.report import charts
from benchd.report.charts import Line
from benchd.report.html import charts as grid
from benchd.report.html import esc, section, shell, table
from benchd.report.tables import count

MEAN_COLOR = "#222222"


def value(unit: str, v: float | None) -> str:
    if v is None:
        return "–"
    if unit == "s":
        return charts.seconds(v)
    if unit == "J":
        return f"{v:.3g} J"
    return f"{v:,.1f}" if v >= 100 else f"{v:.3g}"


def _format(unit: str) -> charts.Format:
    return charts.seconds if unit == "s" else charts.unit("J") if unit == "J" else charts.number


def change_cells(c: ChangePoint) -> list[str]:
    """A change point as a table row: when, what, how much, how sure, the two segments, the stack between them,
    and its confirmation."""
    unit = FIGURES[c.figure].unit
    confirmation = "–"
    if c.confirmation is not None:
        confirmation = c.confirmation.status + (f" (matrix {c.confirmation.matrix_id})" if c.confirmation.matrix_id
                                                else "") + (f": {c.confirmation.reason}" if c.confirmation.reason
                                                            else "")
    return [f"{c.at:%Y-%m-%d %H:%M}", FIGURES[c.figure].name,
            f"{c.relative_change:+.1%} [{c.ci_low:+.1%}, {c.ci_high:+.1%}]",
            "p < 0.001" if c.p_value < 0.001 else f"p = {c.p_value:.3f}", c.direction,
            f"{value(unit, c.before.mean)} ({count(c.before.runs, 'run')}) → {value(unit, c.after.mean)} "
            f"({count(c.after.runs, 'run')})",
            "; ".join(s.says() for s in c.stack) or "the same stack", confirmation]


CHANGE_HEAD = ["when", "figure", "change [interval]", "significance", "direction", "before → after", "stack between",
               "confirmation"]
SHOWN = 6  # the columns of a change's row on a page; the stack between and the confirmation go on a line under it


def change_table(changes: Sequence[ChangePoint], lead: Sequence[str] = (), lead_cells=lambda c: []) -> str:
    """A row a change point, the stack between its segments and its confirmation on a line under it: as columns they
    took the page's width and ran off it at 800 px. lead: columns before (the workload and series, on /changes)."""
    cells = [change_cells(c) for c in changes]
    details = [f"stack between: {c[6]}" + ("" if c[7] == "–" else f" · confirmation: {c[7]}") for c in cells]
    rows = [[*lead_cells(change), *c[:SHOWN]] for change, c in zip(changes, cells)]
    return table([*lead, *CHANGE_HEAD[:SHOWN]], rows, text_columns=len(lead) + SHOWN, details=details)


def _chart(series: SeriesView, f: FigureSeries) -> str:
    """The figure run by run (markers), each segment's geometric mean (dashed), segments shaded in turn."""
    t = list(range(len(f.points)))
    mean: list[float | None] = [None] * len(t)
    for s in f.segments:
        start = next(i for i, p in enumerate(f.points) if p.run_id == s.first_run)
        for i in range(start, start + s.runs):
            mean[i] = s.mean
    bands = [(i - 0.5, i - 0.5 + s.runs, f"{value(f.unit, s.mean)}")
             for s, i in ((s, next(k for k, p in enumerate(f.points) if p.run_id == s.first_run))
                          for s in f.segments)] if f.change_points else []
    name = re.sub(r"\W", "-", f"{series.device}-{series.node}-{f.figure}")
    note = "; ".join(f"{c.at:%Y-%m-%d %H:%M}: {c.relative_change:+.1%} ({c.direction})" for c in f.change_points)
    return charts.lines(name, f.label, [Line(f.label, t, [p.value for p in f.points]),
                                        Line("segment mean", t, mean, MEAN_COLOR, dashed=True)],
                        _format(f.unit), bands, y_min=None, x_label="runs, oldest first", fx=lambda v: f"{v:g}",
                        markers=True, note=f"change points: {note}" if note else "no change point")


def _series(series: SeriesView) -> str:
    changes = sorted((c for f in series.figures for c in f.change_points), key=lambda c: (c.at, c.figure))
    parts = [grid(*(_chart(series, f) for f in series.figures))]
    if changes:
        parts.append(change_table(changes))
    if series.excluded:
        parts.append('<p class="note">left out of the series: ' + esc("; ".join(
            f"{e.run_id} ({e.at:%Y-%m-%d %H:%M}): {e.reason}" for e in series.excluded)) + "</p>")
    left_out = f", {count(len(series.excluded), 'run')} left out" if series.excluded else ""
    about = (f"{count(series.runs, 'run')} under the {series.clock} clock state; "
             f"{count(len(changes), 'change point')}{left_out}")
    anchor = "s" + re.sub(r"\W", "_", f"{series.device}_{series.node}")
    return section(f"{series.device} on {series.node}", *parts, anchor=anchor, about=about)


def history_page(history: HistoryView) -> str:
    """GET /history/{workload}?format=html."""
    meta = esc(f"the newest {history.limit:,} runs at most, first stage; geometric means of each segment, change "
                "points by ruptures' PELT and Student's t-test (docs/guides/history.md)")
    meta += '<nav><a href="/changes?format=html&workload=' + esc(history.workload) + '">its change points</a></nav>'
    sections = [_series(s) for s in history.series] or [section("No runs", '<p class="note">no series</p>')]
    return shell(f"benchd · history of {history.workload}", f"benchd · history of {esc(history.workload)}", meta,
                  sections)


def changes_page(changes: Sequence[ChangePoint], total: int, workload: str | None = None,
                 workloads: Sequence[tuple[str, int]] = ()) -> str:
    """GET /changes?format=html: newest first, each with the stack between its segments and its confirmation; its
    header links every workload's history (workloads: each with its change points still found), not only those
    with a change point on this page."""
    listed = change_table(changes, ["workload", "series"], lambda c: [c.workload, f"{c.device} on {c.node}"]) \
        if changes else '<p class="note">no change point</p>'
    known = list(workloads) or [(w, 0) for w in sorted({c.workload for c in changes})]
    links = " ".join(f'<a href="/history/{esc(w)}?format=html">{esc(w)}</a>' + (f" ({n})" if n else "")
                     for w, n in known)
    about = f"{len(changes)} of {total}, newest first" + (f", of {workload}" if workload else "")
    return shell("benchd · change points", "benchd · change points",
                 esc("each workload's series, analysed after every run") + (f" · histories: {links}" if links else ""),
                 [section("Change points", listed, anchor="changes", about=about)])
