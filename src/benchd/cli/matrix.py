"""`benchd run` of a spec with `matrix:` (here, on a worker process, or on a daemon), `benchd matrices list` and
`benchd matrices show`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from benchd.cli import EXIT_BAD_SPEC, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK, listing
from benchd.cli.client import CommandError
from benchd.cli.terminal import echo, out, refused
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
from benchd.report.tables import count
from benchd.spec.matrix import MatrixSpec, parse_matrix

POLL_S = 1.0
STYLES = {"slower": "red", "larger": "red", "faster": "green", "smaller": "green", "inconclusive": "yellow"}


def comparison_table(title: str, comparison: MatrixComparison, status: str, error: str | None = None) -> Group:
    """The variants (their values and runs), then their figures by index, each with its change against the baseline
    and a verdict mark (coloured), then what each ran with: narrow columns, so that 80 fit; the intervals are in
    --json and on the page. Every cell is text, never markup."""
    rows = summary_rows(comparison)
    key = Table(title=Text(title), title_justify="left", caption_justify="left",
                caption=Text(f"status: {status}" + (f" — {error}" if error else "")))
    key.add_column("#", justify="right", no_wrap=True)
    key.add_column("variant", overflow="fold")
    key.add_column("runs", overflow="fold")
    figures = Table(title="each against the baseline", title_justify="left")
    figures.add_column("#", justify="right", no_wrap=True)
    for column in SUMMARY_HEAD[2:]:
        figures.add_column(column, justify="right", overflow="fold")
    for v, row in zip(comparison.variants, rows):
        name, runs, *cells = row
        key.add_row(str(v.index), Text(name.split(": ", 1)[-1] + (" (baseline)" if v.baseline else "")), Text(runs))
        figures.add_row(str(v.index), *(Text(c) if isinstance(c, str) else
                                        Text(c.terminal(), style=STYLES.get(c.verdict, "")) for c in cells))
    stack = Table(title="what each variant ran with", title_justify="left")
    for column in ("#", *STACK_HEAD[1:]):
        stack.add_column(column, justify="right", overflow="fold", no_wrap=column == "#")
    for v, ran in zip(comparison.variants, stack_rows(comparison)):
        stack.add_row(str(v.index), *map(Text, ran[1:]))
    judged, reasons = quality_rows(comparison)
    quality = Table(title="quality: each against the baseline's outputs and probe, and the baseline's own noise",
                    title_justify="left", caption=Text("\n".join(reasons)), caption_justify="left")
    for column in ("#", *QUALITY_HEAD[1:]):
        quality.add_column(column, justify="right", overflow="fold", no_wrap=column == "#")
    for v, outputs in zip(comparison.variants, judged):
        quality.add_row(str(v.index), *map(Text, outputs[1:]))
    return Group(key, figures, Text(legend(comparison)), quality, stack)


def run(data: dict[str, Any], args, console: Console, settings=None) -> int:
    """settings: the BENCHD_* settings that fill in each variant's spec here (None on a daemon: the daemon's)."""
    try:
        matrix = parse_matrix(data)
    except ValueError as error:
        refused(console, str(error))
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
        refused(console, "\n".join(problems))
        return EXIT_BAD_SPEC
    total = len(variants) * matrix.repeats
    done = [0]

    def on_run(round_: int, variant, result) -> None:
        done[0] += 1
        figure = result.stages[0].summary().output_tokens_per_s if result.stages else None
        console.print(Text(f"  {result.status}" + (f", {figure:,.1f} output tok/s" if figure is not None else "")
                           + (f" — {result.error}" if result.error else "")))

    try:
        with Local(list(specs.values()), args.force, labels=[v.label for v in variants]) as local:
            lifecycle = local.lifecycle
            assert lifecycle is not None  # Local.__enter__ made it

            def execute(run_id: str, variant):
                console.print(Text(f"run {done[0] + 1}/{total}: variant {variant.index}: {variant.label}"))
                spec = specs[variant.index]
                return lifecycle.execute(run_id, spec, spec.device, local.stop)

            outcome = run_matrix(matrix, execute, local.stop, on_run, lifecycle.threshold, lifecycle.confidence)
    except Refused as refusal:
        refused(console, "\n".join(refusal.lines))
        return EXIT_BAD_SPEC
    title = f"benchd · matrix · {variants[0].spec.name} · {len(variants)} variants × {count(matrix.repeats, 'round')}"
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
        console.print(Text(f"wrote {where / 'matrix.json'}, {where / 'matrix.html'}"))
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
        console.print(Text(f"matrix {created['id']} queued on {client.server}: {len(created['runs'])} runs"))
        while (row := client.get(f"/matrices/{created['id']}"))["status"] in ("queued", "running"):
            time.sleep(POLL_S)
    except DaemonError as error:
        if error.status != 422:
            raise
        refused(console, str(error).removeprefix("422: "))
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

    client = Client(args.server)
    if args.matrices_command == "list":
        return _list(client, args)
    if args.json:
        row = client.get(f"/matrices/{args.id}", raw=True)
        echo(json.dumps(row, indent=2))
        return EXIT_OK if row["status"] == "succeeded" else EXIT_FAILED
    return _show(client.get(f"/matrices/{args.id}"), args)


LISTED = ("id", "status", "workload", "created", "variants", "rounds", "varied", "error")


def _list(client, args) -> int:
    matrices = client.get("/matrices", params={"workload": args.workload, "limit": args.limit}, raw=args.json)
    if args.json:
        echo(json.dumps(matrices, indent=2))
        return EXIT_OK
    if not matrices:
        listing.nothing("matrices", {"workload": args.workload}, client.server)
        return EXIT_OK
    rows = []
    for m in matrices:
        document = m.get("document") or {}
        variants, runs = m.get("variants"), m.get("runs")
        rows.append({"id": m["id"], "status": m["status"], "workload": m["workload"],
                     "created": m["created_at"][:16].replace("T", " "),
                     "variants": "–" if variants is None else str(len(variants)),
                     "rounds": str(len(runs) // len(variants)) if variants and runs else "–",
                     "varied": ", ".join(document.get("matrix") or {}) or "–", "error": m.get("error") or "–"})
    listing.show(f"matrices on {client.server} (newest first)", LISTED, rows, keep=4, right=("variants", "rounds"))
    return EXIT_OK
