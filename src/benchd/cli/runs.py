"""`benchd runs list|show|cancel|report`: a daemon's runs, one line each or one in full; stop one; save its report
page or its requests as a file."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchd.cli import EXIT_FAILED, EXIT_OK
from benchd.cli.client import Client, DaemonError
from benchd.cli.listing import choice, nearest, nothing, show, workloads
from benchd.cli.terminal import echo, out
from benchd.measure.catalog import figure

STATUSES = ("queued", "running", "succeeded", "failed", "cancelled", "interrupted")  # store/database.py's
# A run's line shows its first stage's output throughput and TTFT p99, named and written as the catalog says.
THROUGHPUT, TTFT = figure("output_tokens_per_s"), figure("ttft_s.p99")
LISTED = ("id", "status", "workload", "created", THROUGHPUT.name, TTFT.name, "model", "engine", "label")


def add_parser(commands, command) -> None:
    """command: the CLI's maker of a command (its global options before or after the name: --server, --debug)."""
    runs = command(commands, "runs", help="a daemon's runs: list them, show one, cancel one, save one's report")
    verbs = runs.add_subparsers(dest="runs_command", required=True, metavar="list|show|cancel|report",
                                help="one of:")
    listing = command(verbs, "list", help="the newest runs first, one line each")
    listing.add_argument("--status", type=choice("status", STATUSES), help=f"only runs in this status: "
                                                                           f"{', '.join(STATUSES)}")
    listing.add_argument("--model", help="only runs of this model")
    listing.add_argument("--workload", help="only runs of this workload (a spec's name)")
    listing.add_argument("--schedule", help="only runs this schedule queued")
    listing.add_argument("--limit", type=int, default=20, help="runs listed at most (default 20, at most 500)")
    listing.add_argument("--json", action="store_true", help="print the page of runs as JSON")
    one = command(verbs, "show", help="a run's summary: the table `benchd run` prints")
    one.add_argument("id", help="the run's id")
    one.add_argument("--json", action="store_true", help="print the stored run as JSON (every figure)")
    cancel = command(verbs, "cancel", help="cancel queued runs, or stop running ones (they keep what they measured)")
    cancel.add_argument("ids", nargs="+", metavar="id", help="the runs' ids")
    report = command(verbs, "report", help="save a stored run's report page (HTML, self-contained), or with --csv "
                                           "its requests (a timed run: its timings)")
    report.add_argument("id", help="the run's id")
    report.add_argument("--csv", action="store_true", help="its requests as CSV, one row a request (a timed run: "
                                                           "every timed repetition), instead of its page")
    report.add_argument("--out", metavar="FILE", help="where to write it (default: RUN_ID.html, or "
                                                      "RUN_ID-requests.csv / RUN_ID-timings.csv with --csv)")
    runs.set_defaults(handler=cmd_runs)


def cmd_runs(args: argparse.Namespace) -> int:
    client = Client(args.server)
    return {"list": _list, "show": _show, "cancel": _cancel, "report": _report}[args.runs_command](client, args)


def _show(client: Client, args: argparse.Namespace) -> int:
    if args.json:
        echo(json.dumps(client.run(args.id, raw=True), indent=2))
        return EXIT_OK
    from benchd.report.outputs import print_stored

    print_stored(client.run(args.id), out())
    return EXIT_OK


def _list(client: Client, args: argparse.Namespace) -> int:
    filters = {"status": args.status, "model": args.model, "workload": args.workload, "schedule": args.schedule}
    page = client.runs(raw=args.json, limit=args.limit, **filters)
    if args.json:
        echo(json.dumps(page, indent=2))
        return EXIT_OK
    if not page["items"]:
        nothing("runs", filters, client.server, _hint(client, args))
        return EXIT_OK
    rows = []
    for run in page["items"]:
        stage = (run["summary"] or [{}])[0]
        ttft = (stage.get("ttft_s") or {}).get("p99")
        throughput = stage.get("output_tokens_per_s")  # generation runs only
        rows.append({"id": run["id"], "status": run["status"] + (" INVALID" if run.get("valid") is False else ""),
                     "workload": run["workload"], "created": run["created_at"][:16].replace("T", " "),
                     THROUGHPUT.name: THROUGHPUT.text(throughput), TTFT.name: TTFT.text(ttft),
                     "model": run["model"], "engine": run["engine"], "label": run.get("label") or "–"})
    show(f"runs on {client.server} ({page['total']} in all, newest first)", LISTED, rows, keep=4,
         right=(THROUGHPUT.name, TTFT.name))
    return EXIT_OK


def _hint(client: Client, args: argparse.Namespace) -> str:
    """The workloads, models or schedules nearest to those asked for, among those the daemon holds."""
    if args.schedule is not None:
        from benchd.cli.schedules import listed

        names = [s["name"] for s in listed(client)]
        if args.schedule not in names:
            return nearest(args.schedule, names)
    if args.workload is None and args.model is None:
        return ""
    known = workloads(client)
    if args.workload is not None and args.workload not in {w["workload"] for w in known}:
        return nearest(args.workload, (w["workload"] for w in known)) or " (benchd workloads lists them)"
    if args.model is not None and args.model not in {m for w in known for m in w["models"]}:
        return nearest(args.model, (m for w in known for m in w["models"]))
    return ""


def _cancel(client: Client, args: argparse.Namespace) -> int:
    failed = False
    for run_id in args.ids:
        try:
            result = client.cancel(run_id)
        except DaemonError as error:
            if error.unreachable:
                raise
            print(f"benchd: run {run_id}: {error}", file=sys.stderr)
            failed = True
            continue
        echo(f"run {result['id']}: {result['status']}" + (" (it stops at its next request; what it measured is "
                                                          "kept)" if result["status"] == "cancelling" else ""))
    return EXIT_FAILED if failed else EXIT_OK


def _report(client: Client, args: argparse.Namespace) -> int:
    if args.csv:
        kind = (client.run(args.id).get("spec") or {}).get("kind", "generate")
        what = "requests" if kind == "generate" else "timings"
        path, params, default = f"/runs/{args.id}/{what}", {"format": "csv"}, f"{args.id}-{what}.csv"
    else:
        path, params, default = f"/runs/{args.id}/report", None, f"{args.id}.html"
    to = Path(args.out or default)
    size = client.download(path, params, to)
    print(f"wrote {to} ({size / 1024:,.0f} KiB)", file=sys.stderr)
    return EXIT_OK
