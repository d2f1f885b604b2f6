"""`benchd history WORKLOAD`: a workload's series and their change points, each with what explains it, through a
daemon; --confirm runs the two sides of one against each other."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchd.cli import EXIT_OK
from benchd.cli.client import Client, DaemonError
from benchd.cli.listing import nearest, workloads
from benchd.cli.terminal import echo, out


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
    from rich.table import Table
    from rich.text import Text

    from benchd.measure.history import ChangePoint
    from benchd.measure.history_view import HistoryView
    from benchd.report.history import value
    from benchd.report.tables import count

    client = Client(args.server)
    console = out()
    if args.confirm:
        change = ChangePoint.model_validate(client.post(f"/changes/{args.confirm}/confirm", {}))
        confirmation = change.confirmation
        assert confirmation is not None  # the daemon answers a confirmation with it (daemon/history.py, confirm)
        console.print(Text(f"{change.sentence()}\nconfirmation: matrix {confirmation.matrix_id} between "
                           f"{' and '.join(confirmation.environments)}, {confirmation.status}; its "
                           f"verdict is attached when it ends (benchd history {change.workload})"))
        return EXIT_OK
    params = {"limit": args.limit}
    try:
        found = client.get(f"/history/{args.workload}", params=params, raw=args.json)
    except DaemonError as error:
        if error.status != 404:
            raise
        known = [w["workload"] for w in workloads(client)]
        hint = nearest(args.workload, known) or ("" if args.workload in known else " (benchd workloads lists them)")
        raise DaemonError(f"{error}{hint}", 404) from None
    if args.html:
        Path(args.html).write_text(client.text(f"/history/{args.workload}", params={**params, "format": "html"}))
        print(f"wrote {args.html}", file=sys.stderr)
    if args.json:
        echo(json.dumps(found, indent=2))
        return EXIT_OK
    history = HistoryView.model_validate(found)
    for series in history.series:
        table = Table(title=Text(f"{history.workload} on {series.device} ({series.node}): "
                                 f"{count(series.runs, 'run')}, {series.clock} clocks"
                                 + (f", {len(series.excluded)} left out" if series.excluded else "")))
        table.add_column("figure", no_wrap=True)
        table.add_column("runs", justify="right")
        table.add_column("segments (geometric means, oldest first)", overflow="fold")
        table.add_column("change points", justify="right")
        for f in series.figures:
            table.add_row(Text(f.label), str(len(f.points)), Text(" → ".join(value(f.unit, s.mean)
                                                                             for s in f.segments)),
                          str(len(f.change_points)))
        console.print(table)
        for change in sorted((c for f in series.figures for c in f.change_points), key=lambda c: (c.at, c.figure)):
            verdict = f" — {change.confirmation.status}" if change.confirmation else ""
            # a line each, whole (one change a line in a log, its id with it), as the terminal wraps it
            console.print(Text.assemble(f"  {change.sentence()}{verdict}  ", (f"({change.id})", "dim")),
                          soft_wrap=True)
        for excluded in series.excluded:
            console.print(Text(f"  left out: {excluded.run_id} ({excluded.at:%Y-%m-%d %H:%M}): {excluded.reason}",
                               style="dim"))
    if args.withdrawn:
        gone = client.get("/changes", params={"workload": args.workload, "active": "false", "limit": 100})
        for item in gone["items"]:
            change = ChangePoint.model_validate(item)
            console.print(Text(f"  withdrawn {change.withdrawn_at:%Y-%m-%d %H:%M}: {change.sentence()}",
                               style="dim"), soft_wrap=True)
    return EXIT_OK
