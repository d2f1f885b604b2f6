"""The command line's results: a daemon's runs (list, show, baseline), and comparisons of run ids through a daemon
or of result directories written by `benchd run --out`, with no daemon."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchd.cli import EXIT_OK
from benchd.cli.client import Client, CommandError, DaemonError


def cmd_runs(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    client = Client(args.server)
    console = Console(width=None if sys.stdout.isatty() else 200)  # piped: no 80-column crop of run ids
    if args.runs_command == "show":
        import json

        console.print_json(json.dumps(client.run(args.id)))
        return EXIT_OK
    page = client.runs(status=args.status, model=args.model, workload=args.workload, limit=args.limit)
    table = Table(title=f"runs on {client.server} ({page['total']} in all)")
    for column in ("id", "status", "workload", "model", "engine", "created", "out tok/s", "TTFT p99 ms"):
        table.add_column(column)
    for run in page["items"]:
        stage = (run["summary"] or [{}])[0]
        ttft = (stage.get("ttft_s") or {}).get("p99")
        throughput = stage.get("output_tokens_per_s")  # generation runs only
        table.add_row(run["id"], run["status"], run["workload"], run["model"], run["engine"], run["created_at"][:19],
                      f"{throughput:.1f}" if throughput is not None else "–",
                      f"{ttft * 1e3:.2f}" if ttft is not None else "–")
    console.print(table)
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    """B against A: run ids through a daemon's store, or directories written by `benchd run --out` (no daemon)."""
    from rich.console import Console

    from benchd.report.outputs import comparison_table

    sides = [[item for item in side.split(",") if item] for side in (args.a, args.b)]
    directories = [[_is_result_path(item) for item in side] for side in sides]
    if any(all(side) for side in directories) and not all(all(side) for side in directories):
        raise CommandError("compare: give result directories (from `benchd run --out`) on both sides, or run ids "
                           "on both sides")
    if all(all(side) for side in directories):
        result, page = _compare_directories(args, sides)
    else:
        result, page = _compare_on_daemon(args)
    if args.html:
        Path(args.html).write_text(page())
        print(f"wrote {args.html}", file=sys.stderr)
    if args.json:
        import json

        print(json.dumps(result.model_dump(mode="json"), indent=2))
    else:
        Console(width=None if sys.stdout.isatty() else 160).print(comparison_table(result))
    return EXIT_OK


def _is_result_path(item: str) -> bool:
    """A directory, or what can only be a path (a run id has no slash nor dot): it must be a result directory."""
    return Path(item).is_dir() or "/" in item or item.startswith(".")


def _compare_directories(args: argparse.Namespace, sides: list[list[str]]):
    from benchd.measure.compare import CONFIDENCE, THRESHOLD, NotAResult, compare, side_from_directories
    from benchd.report.pages import comparison_page

    try:
        a, b = (side_from_directories([Path(item) for item in side]) for side in sides)
    except NotAResult as error:
        raise CommandError(str(error)) from None
    threshold = THRESHOLD if args.threshold is None else args.threshold
    confidence = CONFIDENCE if args.confidence is None else args.confidence
    result = compare(a, b, threshold=threshold, confidence=confidence)
    return result, lambda: comparison_page(result, a, b)


def _compare_on_daemon(args: argparse.Namespace):
    from benchd.measure.compare import Comparison

    client = Client(args.server)
    params = {"a": args.a, "b": args.b, "threshold": args.threshold, "confidence": args.confidence}
    try:
        result = Comparison.model_validate(client.get("/compare", params=params))
    except DaemonError as error:
        if error.unreachable:
            raise CommandError(f"{error}; or compare result directories written by `benchd run --out`, which "
                               "need no daemon") from None
        raise
    return result, lambda: client.get("/compare", params={**params, "format": "html"}, text=True)


def cmd_baseline(args: argparse.Namespace) -> int:
    Client(args.server).put(f"/baselines/{args.workload}", {"run_id": args.run_id})
    print(f"run {args.run_id} is the baseline of {args.workload}")
    return EXIT_OK
