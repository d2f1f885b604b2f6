"""The command line's arguments, and which module carries out each command."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from benchd import heap
from benchd.cli import EXIT_BAD_SPEC, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from benchd.cli.client import CommandError
from benchd.spec import SpecError, parse_spec, read_document

WARMUP_STUDY = (0, 1, 2, 5)  # --warmup-study: the train_step run repeated with these warm-up step counts


def _quick_spec(args: argparse.Namespace) -> dict[str, Any]:
    """A spec from flags: synchronous unless a rate or a concurrency is given."""
    if args.rate is not None:
        arrivals: dict[str, Any] = {"profile": "poisson", "rate": args.rate}
    elif args.concurrency is not None:
        arrivals = {"profile": "concurrent", "concurrency": args.concurrency}
    else:
        arrivals = {"profile": "synchronous"}
    stop: dict[str, Any] = {}
    if args.requests is not None:
        stop["requests"] = args.requests
    if args.duration is not None:
        stop["duration_s"] = args.duration
    return {
        "name": "quick",
        "workload": {
            "arrivals": arrivals,
            "stop": stop or {"requests": 16},
            "warmup": {"requests": args.warmup_requests},
            "prompt_tokens": {"dist": "fixed", "value": args.prompt_tokens},
            "output_tokens": {"dist": "fixed", "value": args.output_tokens},
        },
    }


def _spec(args: argparse.Namespace):
    if args.spec is not None:
        document = read_document(args.spec)
        parse_spec(document)  # the file as it stands first: its errors name its fields
        # flags apply to the document, not to its spec: the section of an engine --engine chooses is the file's own,
        # where the file's spec (of another engine) holds none
        data = dict(document or {})
    else:
        data = _quick_spec(args)
    for key in ("model", "engine", "device", "dtype", "seed", "label"):
        value = getattr(args, key)
        if value is not None:
            data[key] = value
    if args.warmup_study:
        if data.get("kind") != "train_step":
            raise SpecError("--warmup-study: applies to train_step specs (kind: train_step)")
        data.setdefault("train_step", {})["warmup_study"] = list(WARMUP_STUDY)
    return parse_spec(data)


def _matrix_document(args: argparse.Namespace, console) -> dict[str, Any] | int | None:
    """A spec file with `matrix:` (benchd.spec.matrix), flags applied to its spec; None for a plain spec; an exit code
    when the file cannot be read."""
    try:
        data = read_document(args.spec)
    except SpecError as error:
        console.print(f"[red]invalid spec[/red]\n{error}", highlight=False, soft_wrap=True)
        return EXIT_BAD_SPEC
    if not isinstance(data, dict) or "matrix" not in data:
        return None
    for key in ("model", "engine", "device", "dtype", "seed", "label"):
        if getattr(args, key) is not None:
            data[key] = getattr(args, key)
    return data


def cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console(stderr=True)
    if args.spec is not None and (matrix := _matrix_document(args, console)) is not None:
        if isinstance(matrix, int):
            return matrix
        from benchd.cli import matrix as matrix_cli

        return matrix_cli.run(matrix, args, console)
    try:
        spec = _spec(args)
    except SpecError as error:
        console.print(f"[red]invalid spec[/red]\n{error}", highlight=False, soft_wrap=True)
        return EXIT_BAD_SPEC
    from benchd.cli import run as run_cli

    if args.server is not None:
        return run_cli.on_server(args, spec, console)
    return run_cli.here(args, spec, console)


def cmd_serve(args: argparse.Namespace) -> int:
    import logging

    import uvicorn
    from pydantic import ValidationError

    from benchd.api import create_app
    from benchd.daemon.settings import Settings

    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    try:
        settings = Settings(**overrides)
    except ValidationError as error:
        from benchd.spec import format_validation_error

        print(f"invalid settings\n{format_validation_error(error)}", file=sys.stderr)
        return EXIT_BAD_SPEC
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings)
    # The daemon's threads (HTTP, ingestion, store, spans, hardware) trade CPU-bound throughput for latency: a
    # scrape waiting for the GIL waits one switch interval per hand-off (5 ms by default, 1 ms here). And what
    # the imports left (FastAPI, pydantic, SQLAlchemy, OpenTelemetry: most of the process's objects) is never
    # garbage: frozen, a full collection (tens of milliseconds with every thread stopped) no longer walks it.
    sys.setswitchinterval(0.001)
    heap.settle()
    # uvicorn turns SIGTERM and Ctrl-C into a clean shutdown: the lifespan marks the current run interrupted.
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info")
    return EXIT_OK


def _fraction(low: float, high: float | None, says: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if (value <= low if high is not None else value < low) or (high is not None and value >= high):
            raise argparse.ArgumentTypeError(f"{text} must be {says}")
        return value

    return parse


def cmd_matrices(args: argparse.Namespace) -> int:
    from benchd.cli import matrix as matrix_cli

    return matrix_cli.show(args)


def build_parser() -> argparse.ArgumentParser:
    from benchd.cli import results

    parser = argparse.ArgumentParser(prog="benchd", description="Measure LLM generation speed exactly.")
    parser.add_argument("--debug", action="store_true", help="show the traceback of a failure")
    # Also after the command (benchd runs list --debug); SUPPRESS keeps a subcommand from resetting it.
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", parents=[debug],
                              help="run a workload, training step or kernel spec and print its summary")
    run.add_argument("spec", nargs="?", help="a RunSpec file (YAML or JSON); flags below override it. With `matrix:` "
                                             "its variants run interleaved and are compared with the baseline")
    run.add_argument("--out", help="write summary.json, requests.csv (timed runs: timings.csv, kernels.csv) and "
                                   "report.html into this directory (a matrix: matrix.json and matrix.html)")
    run.add_argument("--model", help="preset name, local directory or hub id")
    run.add_argument("--engine", help="transformers (continuous batching) or static")
    run.add_argument("--device", help="auto, cpu, cuda or cuda:N")
    run.add_argument("--dtype", help="auto, float32, bfloat16 or float16")
    run.add_argument("--seed", type=int)
    run.add_argument("--label", help="a commit or label stored with the run")
    run.add_argument("--server", help="submit to the daemon at this URL and follow its events")
    run.add_argument("--force", action="store_true", help="run even what the daemon would refuse: a run that cannot "
                     "end within BENCHD_LIMITS__MAX_DURATION_S at this device's speed, or whose requests the model or "
                     "its cache cannot hold")
    run.add_argument("--warmup-study", action="store_true",
                     help="train_step specs: repeat the run with 0, 1, 2 and 5 warm-up steps")
    quick = run.add_argument_group("quick workload (without a spec file)")
    quick.add_argument("--requests", type=int)
    quick.add_argument("--duration", type=float, help="seconds")
    quick.add_argument("--rate", type=float, help="Poisson arrivals, requests per second")
    quick.add_argument("--concurrency", type=int, help="closed loop with this many requests in flight")
    quick.add_argument("--prompt-tokens", type=int, default=128)
    quick.add_argument("--output-tokens", type=int, default=128)
    quick.add_argument("--warmup-requests", type=int, default=0)
    run.set_defaults(handler=cmd_run)

    serve = commands.add_parser("serve", parents=[debug], help="start the daemon (settings: BENCHD_* variables, BENCHD_CONFIG file)")
    serve.add_argument("--host", help="bind address (default 127.0.0.1, BENCHD_HOST)")
    serve.add_argument("--port", type=int, help="port (default 8000, BENCHD_PORT)")
    serve.set_defaults(handler=cmd_serve)

    runs = commands.add_parser("runs", parents=[debug], help="list or show runs stored by a daemon")
    runs.add_argument("--server", help=f"daemon URL (BENCHD_SERVER, default {'http://127.0.0.1:8000'})")
    runs_commands = runs.add_subparsers(dest="runs_command", required=True)
    listing = runs_commands.add_parser("list", parents=[debug])
    listing.add_argument("--status")
    listing.add_argument("--model")
    listing.add_argument("--workload")
    listing.add_argument("--limit", type=int, default=20)
    show = runs_commands.add_parser("show", parents=[debug])
    show.add_argument("id")
    runs.set_defaults(handler=results.cmd_runs)

    comparison = commands.add_parser("compare", parents=[debug], help="is B slower than A? (run ids through a daemon, "
                                     "or directories written by `benchd run --out`; comma-separated for several)")
    comparison.add_argument("a", help="run ids, or result directories")
    comparison.add_argument("b", help="run ids, or result directories")
    comparison.add_argument("--server", help="daemon URL (BENCHD_SERVER), for run ids")
    comparison.add_argument("--threshold", type=_fraction(0, None, "at least 0"),
                            help="relative change below which nothing is flagged (default: as the daemon's "
                                 "BENCHD_COMPARE_THRESHOLD defaults)")
    comparison.add_argument("--confidence", type=_fraction(0.5, 1, "between 0.5 and 1, exclusive"),
                            help="of the bootstrap intervals (default: as BENCHD_COMPARE_CONFIDENCE defaults)")
    comparison.add_argument("--json", action="store_true", help="print JSON instead of a table")
    comparison.add_argument("--html", help="also write an HTML report with the distributions side by side")
    comparison.set_defaults(handler=results.cmd_compare)

    matrices = commands.add_parser("matrices", parents=[debug], help="a matrix stored by a daemon: its variants against the baseline")
    matrices.add_argument("--server", help="daemon URL (BENCHD_SERVER)")
    matrices_commands = matrices.add_subparsers(dest="matrices_command", required=True)
    matrix_show = matrices_commands.add_parser("show")
    matrix_show.add_argument("id")
    matrix_show.add_argument("--json", action="store_true", help="print the stored matrix as JSON")
    matrices.set_defaults(handler=cmd_matrices)

    baseline = commands.add_parser("baseline", parents=[debug], help="mark a run as its workload's baseline")
    baseline.add_argument("workload")
    baseline.add_argument("run_id")
    baseline.add_argument("--server", help="daemon URL (BENCHD_SERVER)")
    baseline.set_defaults(handler=results.cmd_baseline)

    from benchd.cli import history

    history.add_parser(commands, [debug])
    return parser


def main(argv: list[str] | None = None) -> int:
    """Every failure ends in one line on stderr and exit status 1; --debug shows the traceback as well."""
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except CommandError as error:
        if args.debug:
            import traceback

            traceback.print_exc()
            if getattr(error, "detail", None):
                print(error.detail, file=sys.stderr)
        print(f"benchd: {error}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as error:  # the command line's edge: anything else is one line too, the traceback on request
        if args.debug:
            raise
        first = (str(error).strip().splitlines() or [""])[0]
        print(f"benchd: {args.command} failed: {type(error).__name__}: {first} (--debug shows where)", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
