"""A comparison's page: what was compared (each side's runs, workloads, labels, dates and the stack entries that
differ), B against A a figure a row with its interval and coloured verdict (and why, where it is weak), how far from
the hardware each side ran, and each latency's distributions side by side."""

from __future__ import annotations

from benchd.measure.catalog import FIGURES
from benchd.measure.comparison import Comparison
from benchd.measure.sides import LATENCIES, Side
from benchd.report import charts
from benchd.report.html import charts as grid
from benchd.report.html import esc, notes, section, shell, table, verdict_pill
from benchd.report.tables import (
    COMPARISON_HEAD,
    comparison_rows,
    context_rows,
    quality_verdict_line,
    roofline_rows,
    same_stack,
    when,
)


def _runs(ids: list[str], reports: list[str]) -> str:
    """The runs' ids, each a link to its report."""
    return ", ".join(f'<a href="{esc(report)}">{esc(run_id)}</a>' if report else esc(run_id)
                     for run_id, report in zip(ids, reports or [""] * len(ids)))


def _side(name: str, ids: list[str], context) -> str:
    if context is None:
        return f"{name}: {esc(', '.join(ids))}"
    label = ", ".join(x for x in context.labels if x) or "no label"
    return (f"{name}: {esc(', '.join(context.workloads))} · {esc(label)} · {context.runs} "
            f"run{'s' if context.runs != 1 else ''} · {esc(when(context.first, context.last))}")


def comparison_page(result: Comparison, a: Side, b: Side) -> str:
    """B against A: what each side is, the table of changes with their intervals, and each latency's
    distributions side by side."""
    sections = []
    if result.warnings:
        sections.append(section("Read this first", notes(result.warnings, "note error"), anchor="warnings",
                                kind="warning"))
    if rows := context_rows(result):
        ca, cb = result.context_a, result.context_b
        assert ca is not None and cb is not None  # context_rows() has rows only with both (report/tables.py)
        cells = [["runs", _runs(result.a, ca.reports), _runs(result.b, cb.reports)],
                 *[[esc(x) for x in row] for row in rows[1:]]]
        cells[0][1] = f"{ca.runs}: {cells[0][1]}"
        cells[0][2] = f"{cb.runs}: {cells[0][2]}"
        shared = same_stack(result)
        sections.append(section(
            "What was compared",
            table(("", "A", "B"), cells, text_columns=3, raw=True,
                  row_class=["differs" if row[0].startswith("≠") else "" for row in rows]),
            notes([f"both: {shared}"] if shared else []), anchor="context",
            about="each side's runs (linked to their reports), workloads, labels, when they ran; ≠: a stack entry "
                  "that differs"))
    metrics, reasons = comparison_rows(result)
    cells = []
    for m, row in zip(result.metrics, metrics):
        mark = row[-1][len(m.verdict):]
        cells.append([*(esc(c) for c in row[:-1]), verdict_pill(m.verdict, mark)])
    cells += [[esc(c) for c in row] for row in roofline_rows(result)]
    about = (f"the change B / A − 1, its interval at {result.confidence:.0%}; slower or faster when the "
             f"whole interval lies beyond ±{result.threshold:.0%}, equivalent when it lies within")
    sections.append(section("B against A", table(COMPARISON_HEAD, cells, raw=True, text_columns=1, kind="verdicts"),
                            notes(reasons), anchor="changes", about=about))
    if result.quality is not None:
        kind = "note error" if result.quality.verdict == "different" else "note"
        sections.append(section("Quality", notes([quality_verdict_line(result.quality)], kind), anchor="quality",
                                about="B's outputs and quality probe against A's, beside the speed, judged against "
                                      "A's own noise between its runs"))

    def pooled(side: Side, name: str) -> list[float]:
        return [x for run in side.samples.get(name, []) for x in run]

    figures = [charts.cdf(name.removesuffix("_s"), FIGURES[name].title,
                          [("A", pooled(a, name)), ("B", pooled(b, name))])
               for name in LATENCIES if pooled(a, name) or pooled(b, name)]
    if figures:
        sections.append(section("Distributions", grid(*figures), anchor="distributions",
                                about="the measured requests of each side's first stage, its runs pooled"))
    workloads = sorted({w for c in (result.context_a, result.context_b) if c for w in c.workloads})
    heading = "benchd · comparison" + (f" · {esc(', '.join(workloads))}" if workloads else "")
    meta = "<br>".join((_side("A", result.a, result.context_a), _side("B", result.b, result.context_b)))
    return shell(f"benchd comparison {' '.join(workloads)}".strip(), heading, meta, sections)
