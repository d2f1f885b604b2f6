"""The command line's results: baselines (show, set, clear), and comparisons of run ids through a daemon or of result
directories written by `benchd run --out`, with no daemon."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchd.cli import EXIT_BAD_SPEC, EXIT_FAILED, EXIT_OK
from benchd.cli.client import Client, CommandError, DaemonError
from benchd.cli.listing import nothing, show
from benchd.cli.terminal import cleaned, echo, out


def cmd_compare(args: argparse.Namespace) -> int:
    """B against A: run ids through a daemon's store, or directories written by `benchd run --out` (no daemon);
    the threshold and confidence: the flags, else BENCHD_COMPARE_THRESHOLD and BENCHD_COMPARE_CONFIDENCE, else the
    daemon's (run ids) or the defaults (directories)."""
    from benchd.report.outputs import comparison_table

    sides = [[item for item in side.split(",") if item] for side in (args.a, args.b)]
    directories = [[_is_result_path(item) for item in side] for side in sides]
    if any(all(side) for side in directories) and not all(all(side) for side in directories):
        raise CommandError("compare: give result directories (from `benchd run --out`) on both sides, or run ids "
                           "on both sides")
    threshold, confidence = _settings(args)
    raw = None  # the daemon's answer as sent, for --json
    if all(all(side) for side in directories):
        result, page = _compare_directories(sides, threshold, confidence)
    else:
        result, page, raw = _compare_on_daemon(args, threshold, confidence)
    if args.html:
        Path(args.html).write_text(page())
        print(f"wrote {args.html}", file=sys.stderr)
    if args.json:
        echo(json.dumps(raw if raw is not None else result.model_dump(mode="json"), indent=2))
    else:
        out().print(comparison_table(result))
    return EXIT_FAILED if args.fail_on_regression and result.regressions else EXIT_OK


def _settings(args: argparse.Namespace) -> tuple[float | None, float | None]:
    """The flags, else what BENCHD_COMPARE_THRESHOLD and BENCHD_COMPARE_CONFIDENCE set (None: neither)."""
    from benchd.cli.local import SettingsError, daemon_settings

    try:
        settings = daemon_settings()
    except SettingsError as error:
        raise CommandError(str(error), exit_code=EXIT_BAD_SPEC) from None
    chosen = settings.model_fields_set
    threshold = args.threshold if args.threshold is not None else (
        settings.compare_threshold if "compare_threshold" in chosen else None)
    confidence = args.confidence if args.confidence is not None else (
        settings.compare_confidence if "compare_confidence" in chosen else None)
    return threshold, confidence


def _is_result_path(item: str) -> bool:
    """A directory, or what can only be a path (a run id has no slash nor dot): it must be a result directory."""
    return Path(item).is_dir() or "/" in item or item.startswith(".")


def _compare_directories(sides: list[list[str]], threshold: float | None, confidence: float | None):
    from benchd.measure.compare import CONFIDENCE, THRESHOLD, compare
    from benchd.measure.sides import NotAResult, side_from_directories
    from benchd.report.comparison import comparison_page

    try:
        a, b = (side_from_directories([Path(item) for item in side]) for side in sides)
    except NotAResult as error:
        raise CommandError(str(error)) from None
    result = compare(a, b, threshold=THRESHOLD if threshold is None else threshold,
                     confidence=CONFIDENCE if confidence is None else confidence)
    return result, lambda: comparison_page(result, a, b)


def _compare_on_daemon(args: argparse.Namespace, threshold: float | None, confidence: float | None):
    from benchd.measure.comparison import Comparison

    client = Client(args.server)
    params = {"a": args.a, "b": args.b, "threshold": threshold, "confidence": confidence}
    try:
        raw = client.get("/compare", params=params, raw=True)
    except DaemonError as error:
        if error.unreachable:
            raise CommandError(f"{error}; or compare result directories written by `benchd run --out`, which "
                               "need no daemon") from None
        raise
    # the figures its own version of benchd compares, as the daemon gives them; the fields this one does not know
    # are left out of the table (--json has them)
    result = Comparison.model_validate(cleaned(raw))
    return result, lambda: client.text("/compare", params={**params, "format": "html"}), raw


def cmd_baseline(args: argparse.Namespace) -> int:
    """benchd baseline: every workload's; WORKLOAD: its baseline; WORKLOAD RUN_ID: set it; WORKLOAD --clear."""
    client = Client(args.server)
    if args.clear:
        if args.workload is None or args.run_id is not None:
            raise CommandError("baseline --clear: give the workload alone (benchd baseline WORKLOAD --clear)",
                               exit_code=EXIT_BAD_SPEC)
        client.delete(f"/baselines/{args.workload}")
        echo(f"{args.workload} has no baseline now")
        return EXIT_OK
    if args.run_id is not None:
        set_ = client.put(f"/baselines/{args.workload}", {"run_id": args.run_id})
        echo(f"run {set_['run_id']} is the baseline of {set_['workload']}")
        return EXIT_OK
    rows = ([client.get(f"/baselines/{args.workload}")] if args.workload is not None
            else client.get("/baselines"))
    if args.json:
        echo(json.dumps(rows if args.workload is None else rows[0], indent=2))
        return EXIT_OK
    if not rows:
        nothing("baselines", {}, client.server, " (benchd baseline WORKLOAD RUN_ID sets one)")
        return EXIT_OK
    show("baselines: each workload's scheduled runs are compared with its baseline run",
         ("workload", "run"), [{"workload": row["workload"], "run": row["run_id"]} for row in rows], keep=2)
    return EXIT_OK
