"""`benchd history WORKLOAD`: a workload's series and their change points, each with what explains it, through a
daemon; --confirm runs the two sides of one against each other."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchd.cli import EXIT_OK
from benchd.cli.client import Client


def add_parser(commands, command) -> None:
    """command: the CLI's maker of a command (its global options before or after the name: --server, --debug)."""
    history = command(commands, "history", help="a workload's series of runs and the change points found in them, "
                                                "each with the stack between its two sides")
    history.add_argument("workload", help="the workload (a spec's name)")
    history.add_argument("--limit", type=int, default=500, help="the newest runs read (default 500, at most 10,000)")
    history.add_argument("--withdrawn", action="store_true",
                         help="also the change points later runs made noise (withdrawn)")
    history.add_argument("--confirm", metavar="CHANGE_ID",
                         help="run the two sides' environments against each other, interleaved on the device the "
                              "series ran on, and attach the verdict to that change point")
    history.add_argument("--json", action="store_true", help="print GET /history/WORKLOAD as JSON")
    history.add_argument("--html", help="also write the history's page (its charts, segments, change points)")
    history.set_defaults(handler=cmd_history)


def cmd_history(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from benchd.measure.history import ChangePoint
    from benchd.measure.history_view import HistoryView
    from benchd.report.history import value

    client = Client(args.server)
    console = Console(width=None if sys.stdout.isatty() else 200)
    if args.confirm:
        change = ChangePoint.model_validate(client.post(f"/changes/{args.confirm}/confirm", {}))
        console.print(f"{change.sentence()}\nconfirmation: matrix {change.confirmation.matrix_id} between "
                      f"{' and '.join(change.confirmation.environments)}, {change.confirmation.status}; its verdict "
                      f"is attached when it ends (benchd history {change.workload})", highlight=False)
        return EXIT_OK
    params = {"limit": args.limit}
    found = client.get(f"/history/{args.workload}", params=params)
    if args.html:
        Path(args.html).write_text(client.get(f"/history/{args.workload}", params={**params, "format": "html"},
                                              text=True))
        print(f"wrote {args.html}", file=sys.stderr)
    if args.json:
        print(json.dumps(found, indent=2))
        return EXIT_OK
    history = HistoryView.model_validate(found)
    for series in history.series:
        table = Table(title=f"{history.workload} on {series.device} ({series.node}): {series.runs} runs, "
                            f"{series.clock} clocks" + (f", {len(series.excluded)} left out" if series.excluded
                                                        else ""))
        for column in ("figure", "runs", "segments (geometric means, oldest first)", "change points"):
            table.add_column(column)
        for f in series.figures:
            table.add_row(f.label, str(len(f.points)), " → ".join(value(f.unit, s.mean) for s in f.segments),
                          str(len(f.change_points)))
        console.print(table)
        for change in sorted((c for f in series.figures for c in f.change_points), key=lambda c: (c.at, c.figure)):
            verdict = f" — {change.confirmation.status}" if change.confirmation else ""
            console.print(f"  {change.sentence()}{verdict}  [dim]({change.id})[/dim]", highlight=False)
        for excluded in series.excluded:
            console.print(f"  left out: {excluded.run_id} ({excluded.at:%Y-%m-%d %H:%M}): {excluded.reason}",
                          highlight=False, style="dim")
    if args.withdrawn:
        gone = client.get("/changes", params={"workload": args.workload, "active": "false", "limit": 100})
        for item in gone["items"]:
            change = ChangePoint.model_validate(item)
            console.print(f"  withdrawn {change.withdrawn_at:%Y-%m-%d %H:%M}: {change.sentence()}", highlight=False,
                          style="dim")
    return EXIT_OK
