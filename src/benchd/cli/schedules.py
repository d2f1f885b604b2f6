"""`benchd schedules list|add|remove`: the daemon's schedules, each a spec queued every interval."""

from __future__ import annotations

import argparse
import json
import re

from benchd.cli import EXIT_BAD_SPEC, EXIT_OK
from benchd.cli.client import Client, CommandError, DaemonError
from benchd.cli.listing import nearest, nothing, show
from benchd.cli.terminal import echo
from benchd.models.duration import span

UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
PAGE = 500  # schedules asked for a page (the most GET /schedules gives)
LISTED = ("name", "every", "next due", "enabled", "workload", "last run", "skipped", "model")


def interval(text: str) -> float:
    """Seconds from 90, 90s, 15m, 1.5h or 1d."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if found is None or float(found[1]) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an interval: seconds, or a number with s, m, h or d "
                                         "(90, 15m, 1h)")
    return float(found[1]) * UNITS[found[2]]


def every(seconds: float) -> str:
    """An interval as it was likely given: 3600 → 1 h, 90 → 90 s, 5400 → 1.5 h."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and (seconds / size) * 10 == round(seconds / size * 10):
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


def add_parser(commands, command) -> None:
    schedules = command(commands, "schedules", help="the daemon's schedules: list them, add or replace one, remove "
                                                    "one")
    verbs = schedules.add_subparsers(dest="schedules_command", required=True, metavar="list|add|remove",
                                     help="one of:")
    listing = command(verbs, "list", help="every schedule, by name")
    listing.add_argument("--json", action="store_true", help="print them as JSON")
    add = command(verbs, "add", help="add a schedule, or replace the one of that name: its first run is due at once")
    add.add_argument("name", help="the schedule's name")
    add.add_argument("spec", help="a RunSpec file (YAML or JSON), checked by the daemon as a run's")
    add.add_argument("--every", type=interval, required=True, metavar="INTERVAL",
                     help="time between its runs: seconds, or with s, m, h or d (15m, 1h)")
    add.add_argument("--disabled", action="store_true", help="store it without running it")
    remove = command(verbs, "remove", help="remove a schedule (its runs stay stored)")
    remove.add_argument("name", help="the schedule's name")
    schedules.set_defaults(handler=cmd_schedules)


def cmd_schedules(args: argparse.Namespace) -> int:
    client = Client(args.server)
    return {"list": _list, "add": _add, "remove": _remove}[args.schedules_command](client, args)


def listed(client: Client, raw: bool = False) -> list[dict]:
    """Every schedule: GET /schedules answers a page of the list at a time (by name, within its byte cap), so ask for
    the next until one comes back empty."""
    found: list[dict] = []
    while True:
        page = client.get("/schedules", params={"limit": PAGE, "offset": len(found)}, raw=raw)
        if not page:
            return found
        found += page


def _list(client: Client, args: argparse.Namespace) -> int:
    schedules = listed(client, raw=args.json)
    if args.json:
        echo(json.dumps(schedules, indent=2))
        return EXIT_OK
    if not schedules:
        nothing("schedules", {}, client.server, " (benchd schedules add NAME SPEC --every 1h adds one)")
        return EXIT_OK
    rows = [{"name": s["name"], "every": every(s["interval_s"]),
             "next due": (f"in {span(s['next_due_in_s'])}" if s["next_due_in_s"] >= 1 else "now")
             if s["enabled"] else "–",
             "enabled": "yes" if s["enabled"] else "no", "workload": s["spec"].get("name", "default"),
             "last run": s.get("last_run_id") or "–", "skipped": str(s.get("skipped", 0)),
             "model": str(s["spec"].get("model", "the daemon's"))} for s in schedules]
    show(f"schedules on {client.server} ({len(rows)})", LISTED, rows, keep=3, right=("skipped",))
    return EXIT_OK


def _add(client: Client, args: argparse.Namespace) -> int:
    from benchd.spec import SpecError, read_document

    try:
        document = read_document(args.spec)
    except SpecError as error:
        raise CommandError(f"invalid spec\n{error}", exit_code=EXIT_BAD_SPEC) from None
    if isinstance(document, dict) and "matrix" in document:
        raise CommandError("schedules add: a schedule runs one spec; a matrix is scheduled in the daemon's settings "
                           "(BENCHD_SCHEDULES, docs/guides/matrices.md)", exit_code=EXIT_BAD_SPEC)
    try:
        made = client.post("/schedules", {"name": args.name, "spec": document, "interval_s": args.every,
                                          "enabled": not args.disabled})
    except DaemonError as error:
        if error.status != 422:
            raise
        raise CommandError(f"invalid schedule\n{str(error).removeprefix('422: ')}", exit_code=EXIT_BAD_SPEC) from None
    echo(f"schedule {made['name']}: {made['spec'].get('name', 'default')} every {every(made['interval_s'])}"
         + ("; its first run is due now" if made["enabled"] else "; disabled"))
    return EXIT_OK


def _remove(client: Client, args: argparse.Namespace) -> int:
    try:
        client.delete(f"/schedules/{args.name}")
    except DaemonError as error:
        if error.status != 404:
            raise
        raise DaemonError(f"{error}{nearest(args.name, (s['name'] for s in listed(client)))}", 404) from None
    echo(f"schedule {args.name} removed (its runs stay stored)")
    return EXIT_OK
