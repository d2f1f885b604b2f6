"""`benchd run` of a spec with `matrix:` (here, on a worker process, or on a daemon) and `benchd matrices show`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from benchd.cli import EXIT_BAD_SPEC, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from benchd.measure.matrix import MatrixComparison
from benchd.report.matrix import SUMMARY_HEAD, matrix_page, summary_rows
from benchd.spec.matrix import MatrixSpec, parse_matrix

POLL_S = 1.0


def comparison_table(title: str, comparison: MatrixComparison, status: str, error: str | None = None) -> Table:
    caption = (f"status: {status}" + (f" — {error}" if error else "") + f"; (change against the baseline "
               f"[bootstrap interval at {comparison.confidence:.0%}] verdict beyond ±{comparison.threshold:.0%})")
    table = Table(title=escape(title), caption=escape(caption))
    for column in SUMMARY_HEAD:
        table.add_column(column, justify="left" if column in ("variant", "values", "attention") else "right",
                         overflow="fold")
    for row in summary_rows(comparison):
        table.add_row(*map(escape, row))
    return table


def _out() -> Console:
    return Console(width=None if sys.stdout.isatty() else 240)  # piped: no 80-column crop


def run(data: dict[str, Any], args, console: Console) -> int:
    try:
        matrix = parse_matrix(data)
    except ValueError as error:
        console.print(f"[red]invalid spec[/red]\n{error}", highlight=False, soft_wrap=True)
        return EXIT_BAD_SPEC
    if args.server is not None:
        return _on_server(matrix, args, console)
    return _here(matrix, args, console)


def _here(matrix: MatrixSpec, args, console: Console) -> int:
    """Every run on a worker process of its own, through the daemon's lifecycle, in the matrix's order."""
    from benchd.cli.local import Local, Refused
    from benchd.daemon.matrices import run_matrix, stored_variants

    variants = matrix.variants()
    total = len(variants) * matrix.repeats
    done = [0]

    def on_run(round_: int, variant, result) -> None:
        done[0] += 1
        figure = result.stages[0].summary().output_tokens_per_s if result.stages else None
        console.print(f"  {result.status}" + (f", {figure:,.1f} output tok/s" if figure is not None else "") +
                      (f" — {result.error}" if result.error else ""), highlight=False)

    try:
        with Local([v.spec for v in variants], args.force, labels=[v.label for v in variants]) as local:
            def execute(run_id: str, variant):
                console.print(f"run {done[0] + 1}/{total}: variant {variant.index}: {variant.label}",
                              highlight=False)
                return local.lifecycle.execute(run_id, variant.spec, variant.spec.device, local.stop)

            outcome = run_matrix(matrix, execute, local.stop, on_run, local.lifecycle.threshold,
                                 local.lifecycle.confidence)
    except Refused as refused:
        console.print("[red]invalid spec[/red]\n" + "\n".join(refused.lines), highlight=False, soft_wrap=True)
        return EXIT_BAD_SPEC
    title = f"benchd · matrix · {variants[0].spec.name} · {len(variants)} variants × {matrix.repeats} rounds"
    _out().print(comparison_table(title, outcome.comparison, outcome.status))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        row = {"id": None, "status": outcome.status, "document": matrix.document(),
               "variants": stored_variants(variants), "baseline": outcome.baseline,
               "runs": [{"run_id": run_id, "round": r, "variant": v} for r, v, run_id, _ in outcome.runs],
               "comparison": outcome.comparison.model_dump(mode="json")}
        (out / "matrix.json").write_text(json.dumps(row, indent=2) + "\n")
        records = {run_id: result.stages[0].records if result.stages else [] for *_, run_id, result in outcome.runs}
        (out / "matrix.html").write_text(matrix_page(row, records))
        console.print(f"wrote {out / 'matrix.json'}, {out / 'matrix.html'}", highlight=False)
    if outcome.status == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_OK if outcome.status == "succeeded" else EXIT_FAILED


def _on_server(matrix: MatrixSpec, args, console: Console) -> int:
    from benchd.cli.client import Client, DaemonError

    client = Client(args.server)
    try:
        created = client.post("/matrices", matrix.document())
        console.print(f"matrix {created['id']} queued on {client.server}: {len(created['runs'])} runs", highlight=False)
        while (row := client.get(f"/matrices/{created['id']}"))["status"] in ("queued", "running"):
            time.sleep(POLL_S)
    except DaemonError as error:
        console.print(f"[red]{error}[/red]", highlight=False)
        return EXIT_BAD_SPEC if str(error).startswith("422") else EXIT_FAILED
    return _show(row, console)


def _show(row: dict, console: Console) -> int:
    if row.get("comparison") is None:
        console.print(f"matrix {row['id']}: {row['status']}" + (f" — {row['error']}" if row.get("error") else ""))
        return EXIT_FAILED
    title = f"benchd · matrix {row['id']} · {row['workload']} · {len(row['variants'])} variants"
    _out().print(comparison_table(title, MatrixComparison.model_validate(row["comparison"]), row["status"],
                                  row.get("error")))
    return EXIT_OK if row["status"] == "succeeded" else EXIT_FAILED


def show(args) -> int:
    from benchd.cli.client import Client, DaemonError

    console = Console(stderr=True)
    try:
        row = Client(args.server).get(f"/matrices/{args.id}")
    except DaemonError as error:
        print(error, file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(json.dumps(row, indent=2))
        return EXIT_OK if row["status"] == "succeeded" else EXIT_FAILED
    return _show(row, console)
