"""`benchd changes` (every change point the daemon's histories found, filtered) and `benchd workloads` (the
workloads it holds)."""

from __future__ import annotations

import argparse
import json

from benchd.cli import EXIT_OK
from benchd.cli.client import Client
from benchd.cli.listing import choice, nearest, nothing, show, workloads
from benchd.cli.terminal import echo
from benchd.measure.history import FIGURES

CHANGES = ("when", "workload", "figure", "change [interval]", "direction", "stack between", "id", "series",
           "confirmation")
WORKLOADS = ("workload", "runs", "succeeded", "last run", "change points", "baseline", "schedules", "models")


def add_parser(commands, command) -> None:
    changes = command(commands, "changes", help="every change point the workloads' histories found, newest first")
    changes.add_argument("--workload", help="only this workload's")
    changes.add_argument("--figure", type=choice("figure", list(FIGURES)), help=f"only this figure's: "
                                                                                f"{', '.join(FIGURES)}")
    changes.add_argument("--node", help="only this node's series")
    changes.add_argument("--withdrawn", action="store_true", help="those later runs made noise instead")
    changes.add_argument("--limit", type=int, default=50, help="change points listed at most (default 50, at most "
                                                               "500)")
    changes.add_argument("--json", action="store_true", help="print GET /changes as JSON")
    changes.set_defaults(handler=cmd_changes)
    listing = command(commands, "workloads", help="the workloads the daemon holds runs of: their runs, change "
                                                  "points, baseline and schedules")
    listing.add_argument("--json", action="store_true", help="print GET /workloads as JSON")
    listing.set_defaults(handler=cmd_workloads)


def cmd_changes(args: argparse.Namespace) -> int:
    from benchd.measure.history import ChangePoint
    from benchd.report.history import change_cells

    client = Client(args.server)
    filters = {"workload": args.workload, "figure": args.figure, "node": args.node}
    page = client.get("/changes", params={**filters, "active": str(not args.withdrawn).lower(), "limit": args.limit},
                      raw=args.json)
    if args.json:
        echo(json.dumps(page, indent=2))
        return EXIT_OK
    what = "withdrawn change points" if args.withdrawn else "change points"
    if not page["items"]:
        hint = ""
        if args.workload is not None:
            known = [w["workload"] for w in workloads(client)]
            if args.workload not in known:
                hint = nearest(args.workload, known) or " (benchd workloads lists them)"
        nothing(what, filters, client.server, hint)
        return EXIT_OK
    rows = []
    for item in page["items"]:
        change = ChangePoint.model_validate(item)
        when, figure, interval, _, direction, _, stack, confirmation = change_cells(change)
        rows.append({"when": when, "workload": change.workload, "figure": figure, "change [interval]": interval,
                     "direction": direction, "stack between": stack, "id": change.id,
                     "series": f"{change.device} on {change.node}", "confirmation": confirmation})
    show(f"{what} on {client.server} ({len(rows)} of {page['total']}, newest first)", CHANGES, rows, keep=4,
         wrap=("stack between",))
    return EXIT_OK


def cmd_workloads(args: argparse.Namespace) -> int:
    client = Client(args.server)
    page = client.get("/workloads", params={"limit": 1000}, raw=args.json)
    if args.json:
        echo(json.dumps(page, indent=2))
        return EXIT_OK
    if not page["items"]:
        nothing("workloads", {}, client.server, ": no run is stored yet")
        return EXIT_OK
    rows = [{"workload": w["workload"], "runs": f"{w['runs']:,}", "succeeded": f"{w['succeeded']:,}",
             "last run": w["last_run_at"][:16].replace("T", " "), "change points": str(w["change_points"]),
             "baseline": w["baseline"] or "–", "schedules": ", ".join(w["schedules"]) or "–",
             "models": ", ".join(w["models"])} for w in page["items"]]
    shown = f"{len(rows)} of {page['total']}" if page["total"] > len(rows) else str(len(rows))
    show(f"workloads on {client.server} ({shown}, by name)", WORKLOADS, rows, keep=3,
         right=("runs", "succeeded", "change points"))
    return EXIT_OK
