"""`benchd run` of a spec with `matrix:` (here, on a worker process, or on a daemon) and `benchd matrices show`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from benchd.cli import EXIT_BAD_SPEC, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK
from benchd.cli.client import CommandError
from benchd.cli.terminal import echo, out
from benchd.measure.matrix import MatrixComparison
from benchd.report.matrix import (
    QUALITY_HEAD,
    STACK_HEAD,
    SUMMARY_HEAD,
    legend,
    matrix_page,
    quality_rows,
    stack_rows,
    summary_rows,
)
from benchd.spec.matrix import MatrixSpec, parse_matrix

POLL_S = 1.0
STYLES = {"slower": "red", "larger": "red", "faster": "green", "smaller": "green", "inconclusive": "yellow"}


def comparison_table(title: str, comparison: MatrixComparison, status: str, error: str | None = None) -> Group:
    """The variants (their values and runs), then their figures by index, each with its change against the baseline
    and a verdict mark (coloured), then what each ran with: narrow columns, so that 80 fit; the intervals are in
    --json and on the page."""
    rows = summary_rows(comparison)
    key = Table(title=escape(title), title_justify="left", caption_justify="left",
                caption=escape(f"status: {status}" + (f" — {error}" if error else "")))
    key.add_column("#", justify="right", no_wrap=True)
    key.add_column("variant", overflow="fold")
    key.add_column("runs", overflow="fold")
    figures = Table(title="each against the baseline", title_justify="left")
    figures.add_column("#", justify="right", no_wrap=True)
    for column in SUMMARY_HEAD[2:]:
        figures.add_column(column, justify="right", overflow="fold")
    for v, row in zip(comparison.variants, rows):
        name, runs, *cells = row
        key.add_row(str(v.index), escape(name.split(": ", 1)[-1] + (" (baseline)" if v.baseline else "")),
                    escape(runs))
        figures.add_row(str(v.index), *(escape(c) if isinstance(c, str) else
                                        Text(c.terminal(), style=STYLES.get(c.verdict, "")) for c in cells))
    stack = Table(title="what each variant ran with", title_justify="left")
    for column in ("#", *STACK_HEAD[1:]):
        stack.add_column(column, justify="right", overflow="fold", no_wrap=column == "#")
    for v, row in zip(comparison.variants, stack_rows(comparison)):
        stack.add_row(str(v.index), *map(escape, row[1:]))
    rows, reasons = quality_rows(comparison)
    quality = Table(title="quality: each against the baseline's outputs and probe, and the baseline's own noise",
                    title_justify="left", caption=escape("\n".join(reasons)), caption_justify="left")
    for column in ("#", *QUALITY_HEAD[1:]):
        quality.add_column(column, justify="right", overflow="fold", no_wrap=column == "#")
    for v, row in zip(comparison.variants, rows):
        quality.add_row(str(v.index), *map(escape, row[1:]))
    return Group(key, figures, Text(legend(comparison)), quality, stack)


def run(data: dict[str, Any], args, console: Console, settings=None) -> int:
    """settings: the BENCHD_* settings that fill in each variant's spec here (None on a daemon: the daemon's)."""
    try:
        matrix = parse_matrix(data)
    except ValueError as error:
        console.print(f"[red]invalid spec[/red]\n{escape(str(error))}", highlight=False, soft_wrap=True)
        return EXIT_BAD_SPEC
    if args.server is not None:
        return _on_server(matrix, args, console)
    return _here(matrix, args, console, settings)


def _here(matrix: MatrixSpec, args, console: Console, settings) -> int:
    """Every run on a worker process of its own, through the daemon's lifecycle, in the matrix's order."""
    from benchd.cli.local import Local, Refused
    from benchd.daemon.matrices import run_matrix, stored_variants
    from benchd.daemon.settings import resolve
    from benchd.models.sources import loads_model, source_problem

    variants = matrix.variants()
    specs = {v.index: resolve(v.spec, settings) for v in variants}
    problems = sorted({f"model: {problem}" for spec in specs.values()
                       if loads_model(spec) and (problem := source_problem(spec.model))})
    if problems:
        console.print("[red]invalid spec[/red]\n" + escape("\n".join(problems)), highlight=False, soft_wrap=True)
        return EXIT_BAD_SPEC
    total = len(variants) * matrix.repeats
    done = [0]

    def on_run(round_: int, variant, result) -> None:
        done[0] += 1
        figure = result.stages[0].summary().output_tokens_per_s if result.stages else None
        console.print(f"  {result.status}" + (f", {figure:,.1f} output tok/s" if figure is not None else "") +
                      (f" — {result.error}" if result.error else ""), highlight=False)

    try:
        with Local(list(specs.values()), args.force, labels=[v.label for v in variants]) as local:
            def execute(run_id: str, variant):
                console.print(f"run {done[0] + 1}/{total}: variant {variant.index}: {variant.label}",
                              highlight=False)
                spec = specs[variant.index]
                return local.lifecycle.execute(run_id, spec, spec.device, local.stop)

            outcome = run_matrix(matrix, execute, local.stop, on_run, local.lifecycle.threshold,
                                 local.lifecycle.confidence)
    except Refused as refused:
        console.print("[red]invalid spec[/red]\n" + escape("\n".join(refused.lines)), highlight=False,
                      soft_wrap=True)
        return EXIT_BAD_SPEC
    title = f"benchd · matrix · {variants[0].spec.name} · {len(variants)} variants × {matrix.repeats} rounds"
    out().print(comparison_table(title, outcome.comparison, outcome.status))
    if args.out:
        where = Path(args.out)
        where.mkdir(parents=True, exist_ok=True)
        row = {"id": None, "status": outcome.status, "document": matrix.document(),
               "variants": stored_variants(variants), "baseline": outcome.baseline,
               "runs": [{"run_id": run_id, "round": r, "variant": v} for r, v, run_id, _ in outcome.runs],
               "comparison": outcome.comparison.model_dump(mode="json")}
        (where / "matrix.json").write_text(json.dumps(row, indent=2) + "\n")
        records = {run_id: result.stages[0].records if result.stages else [] for *_, run_id, result in outcome.runs}
        (where / "matrix.html").write_text(matrix_page(row, records))
        console.print(f"wrote {where / 'matrix.json'}, {where / 'matrix.html'}", highlight=False)
    if outcome.status == "interrupted":
        return EXIT_INTERRUPTED
    return _exit(outcome.status, outcome.comparison, args)


def _exit(status: str, comparison: MatrixComparison | None, args) -> int:
    if status != "succeeded":
        return EXIT_FAILED
    invalid = comparison is not None and any(v.invalid for v in comparison.variants)
    return EXIT_INVALID if getattr(args, "fail_on_invalid", False) and invalid else EXIT_OK


def _on_server(matrix: MatrixSpec, args, console: Console) -> int:
    from benchd.cli.client import Client, DaemonError

    client = Client(args.server)
    try:
        created = client.post("/matrices", matrix.document())
        console.print(f"matrix {created['id']} queued on {client.server}: {len(created['runs'])} runs", highlight=False)
        while (row := client.get(f"/matrices/{created['id']}"))["status"] in ("queued", "running"):
            time.sleep(POLL_S)
    except DaemonError as error:
        if error.status != 422:
            raise
        console.print(f"[red]invalid spec[/red]\n{escape(str(error))}", highlight=False)
        return EXIT_BAD_SPEC
    return _show(row, args)


def _show(row: dict, args) -> int:
    if row.get("comparison") is None:
        raise CommandError(f"matrix {row['id']}: {row['status']}" + (f" — {row['error']}" if row.get("error") else "")
                           + ": not compared (a matrix is compared once every run has ended)")
    comparison = MatrixComparison.model_validate(row["comparison"])
    title = f"benchd · matrix {row['id']} · {row['workload']} · {len(row['variants'])} variants"
    out().print(comparison_table(title, comparison, row["status"], row.get("error")))
    return _exit(row["status"], comparison, args)


def show(args) -> int:
    from benchd.cli.client import Client

    row = Client(args.server).get(f"/matrices/{args.id}")
    if args.json:
        echo(json.dumps(row, indent=2))
        return EXIT_OK if row["status"] == "succeeded" else EXIT_FAILED
    return _show(row, args)
