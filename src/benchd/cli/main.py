"""The command line's arguments, and which module carries out each command."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import benchd
from benchd import heap
from benchd.cli import EXIT_BAD_SPEC, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from benchd.cli.client import DEFAULT_SERVER, CommandError
from benchd.cli.terminal import visible
from benchd.spec import SpecError, parse_spec, read_document

WARMUP_STUDY = (0, 1, 2, 5)  # --warmup-study: the train_step run repeated with these warm-up step counts
# A quick workload's flags and their defaults. Given no spec file and no flag at all, `benchd run` refuses (it ran a
# default workload, unasked); given flags but no spec, it says what it runs.
QUICK = {"requests": None, "duration": None, "rate": None, "concurrency": None, "prompt_tokens": 128,
         "output_tokens": 128, "warmup_requests": 0}
QUICK_REQUESTS = 16  # a quick workload's requests when neither --requests nor --duration is given
OVERRIDES = ("model", "engine", "device", "dtype", "seed", "label")  # flags that replace a spec's fields


def _quick_spec(args: argparse.Namespace) -> dict[str, Any]:
    """A spec from flags: synchronous unless a rate or a concurrency is given."""
    quick = {key: default if (given := getattr(args, key)) is None else given for key, default in QUICK.items()}
    if quick["rate"] is not None:
        arrivals: dict[str, Any] = {"profile": "poisson", "rate": quick["rate"]}
    elif quick["concurrency"] is not None:
        arrivals = {"profile": "concurrent", "concurrency": quick["concurrency"]}
    else:
        arrivals = {"profile": "synchronous"}
    stop: dict[str, Any] = {}
    if quick["requests"] is not None:
        stop["requests"] = quick["requests"]
    if quick["duration"] is not None:
        stop["duration_s"] = quick["duration"]
    return {
        "name": "quick",
        "workload": {
            "arrivals": arrivals,
            "stop": stop or {"requests": QUICK_REQUESTS},
            "warmup": {"requests": quick["warmup_requests"]},
            "prompt_tokens": {"dist": "fixed", "value": quick["prompt_tokens"]},
            "output_tokens": {"dist": "fixed", "value": quick["output_tokens"]},
        },
    }


def _document(args: argparse.Namespace) -> Any:
    """The spec file's document (checked as it stands first: its errors name its fields), or the quick workload's,
    with the flags applied."""
    if args.spec is not None:
        document = read_document(args.spec)
        if not (isinstance(document, dict) and "matrix" in document):
            parse_spec(document)
        # flags apply to the document, not to its spec: the section of an engine --engine chooses is the file's own,
        # where the file's spec (of another engine) holds none
        data = dict(document or {})
    else:
        data = _quick_spec(args)
    for key in OVERRIDES:
        if (value := getattr(args, key)) is not None:
            data[key] = value
    if args.warmup_study:
        if data.get("kind") != "train_step":
            raise SpecError("--warmup-study: applies to train_step specs (kind: train_step)")
        data.setdefault("train_step", {})["warmup_study"] = list(WARMUP_STUDY)
    return data


def _spec(args: argparse.Namespace):
    """The RunSpec the file and the flags make, before the settings fill in what it leaves unset."""
    return parse_spec(_document(args))


def cmd_run(args: argparse.Namespace) -> int:
    """Here (no --server), what the spec leaves unset comes from the BENCHD_* settings as the daemon fills in a spec
    it is given, and a model that is not to be had is refused before anything loads."""
    from benchd.cli.local import SettingsError, daemon_settings
    from benchd.cli.terminal import err, refused

    console = err()
    if args.spec is None and not args.warmup_study and all(getattr(args, k) is None for k in (*QUICK, *OVERRIDES)):
        raise CommandError("run: nothing to run: give a spec file (benchd run examples/tiny-poisson.yaml) or a "
                           "quick workload's flags (--requests, --duration, --rate, --concurrency, --prompt-tokens, "
                           "--output-tokens; benchd run --help lists them)", exit_code=EXIT_BAD_SPEC)
    try:
        data = _document(args)
        settings = None if args.server is not None else daemon_settings()
        if "matrix" in data:
            from benchd.cli import matrix as matrix_cli

            return matrix_cli.run(data, args, console, settings)
        spec = parse_spec(data)
        if settings is not None:
            from benchd.daemon.settings import resolve
            from benchd.models.sources import loads_model, source_problem

            spec = resolve(spec, settings)
            if loads_model(spec) and (problem := source_problem(spec.model)):
                raise SpecError(f"model: {problem}")
    except (SpecError, SettingsError) as error:
        refused(console, str(error), "invalid settings" if isinstance(error, SettingsError) else "invalid spec")
        return EXIT_BAD_SPEC
    # No spec file: what the flags make is said, where a daemon queues it or before it runs here.
    args.quick = f"quick workload: {_described(spec)}" if args.spec is None else None
    if args.quick and args.server is None:
        console.print(args.quick, soft_wrap=True)
    from benchd.cli import run as run_cli

    if args.server is not None:
        return run_cli.on_server(args, spec, console)
    return run_cli.here(args, spec, console)


def _described(spec) -> str:
    from benchd.spec import describe_profile

    workload = spec.workload
    stop = ", ".join(f"{k} {v:g}" for k, v in workload.stop.model_dump(exclude_none=True).items())
    return (f"{describe_profile(workload.arrivals)}, stop at {stop}; {workload.prompt_tokens.value} prompt and "
            f"{workload.output_tokens.value} output tokens a request, {workload.warmup.requests} warm-up requests; "
            f"{spec.model} on {spec.device}")


def cmd_serve(args: argparse.Namespace) -> int:
    import logging

    import uvicorn
    from pydantic import ValidationError

    from benchd.api import create_app
    from benchd.api.connections import main_listener
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
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info", **main_listener(settings.http))
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


def _options(top: bool) -> argparse.ArgumentParser:
    """The options every command takes, before or after its name (benchd runs list --server URL); below the top
    they are SUPPRESSed, so that a command's parser never resets what was given before it."""
    options = argparse.ArgumentParser(add_help=False)
    unset: dict[str, Any] = {} if top else {"default": argparse.SUPPRESS}
    options.add_argument("--server", metavar="URL", help=f"the daemon's URL (default: BENCHD_SERVER, else "
                         f"{DEFAULT_SERVER}); `benchd run` submits to it instead of running here", **unset)
    options.add_argument("--debug", action="store_true", help="show the traceback of a failure", **unset)
    return options


def _command(commands, name: str, **kwargs) -> argparse.ArgumentParser:
    return commands.add_parser(name, parents=[_options(top=False)], **kwargs)


def build_parser() -> argparse.ArgumentParser:
    from benchd.cli import results

    parser = argparse.ArgumentParser(prog="benchd", parents=[_options(top=True)],
                                     description="Measure LLM generation speed exactly.",
                                     epilog="exit codes: 0 done; 1 failed (or, with --fail-on-regression, slower); 2 "
                                            "bad spec, settings or arguments; 3 a stage INVALID (with "
                                            "--fail-on-invalid); 130 interrupted")
    parser.add_argument("--version", action="version", version=f"benchd {benchd.__version__}",
                        help="print benchd's version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="one of:")

    run = _command(commands, "run", help="run a workload, training step or kernel spec and print its summary")
    run.add_argument("spec", nargs="?", help="a RunSpec file (YAML or JSON); flags below override it. With `matrix:` "
                                             "its variants run interleaved and are compared with the baseline")
    run.add_argument("--out", metavar="DIR",
                     help="write summary.json, requests.csv (timed runs: timings.csv, kernels.csv) and "
                          "report.html into this directory (a matrix: matrix.json and matrix.html)")
    run.add_argument("--model", help="preset name, local directory or hub id (org/name)")
    run.add_argument("--engine", help="transformers (continuous batching), static or openai")
    run.add_argument("--device", help="auto, cpu, cuda or cuda:N")
    run.add_argument("--dtype", help="auto, float32, bfloat16 or float16")
    run.add_argument("--seed", type=int, help="seeds the prompts' and arrivals' random draws (and the weights of a "
                                              "preset): the same seed gives the same requests")
    run.add_argument("--label", help="a commit or label stored with the run")
    run.add_argument("--force", action="store_true", help="run even what the daemon would refuse: a run that cannot "
                     "end within BENCHD_LIMITS__MAX_DURATION_S at this device's speed, or whose requests the model or "
                     "its cache cannot hold")
    run.add_argument("--warmup-study", action="store_true",
                     help="train_step specs: repeat the run with 0, 1, 2 and 5 warm-up steps")
    run.add_argument("--fail-on-invalid", action="store_true",
                     help="exit 3 when the run succeeded but a stage's verdict is INVALID (a matrix: any run's)")
    quick = run.add_argument_group("quick workload (without a spec file)")
    quick.add_argument("--requests", type=int, help=f"measured requests (default {QUICK_REQUESTS} when no "
                                                    "--duration is given)")
    quick.add_argument("--duration", type=float, help="seconds of sending")
    quick.add_argument("--rate", type=float, help="Poisson arrivals, requests per second")
    quick.add_argument("--concurrency", type=int, help="closed loop with this many requests in flight")
    quick.add_argument("--prompt-tokens", type=int, help=f"tokens a prompt (default {QUICK['prompt_tokens']})")
    quick.add_argument("--output-tokens", type=int, help=f"tokens a request generates (default "
                                                         f"{QUICK['output_tokens']})")
    quick.add_argument("--warmup-requests", type=int, help="requests sent first and left out of the figures "
                                                           "(default 0)")
    run.set_defaults(handler=cmd_run)

    serve = _command(commands, "serve", help="start the daemon (settings: BENCHD_* variables, BENCHD_CONFIG file)")
    serve.add_argument("--host", help="bind address (default 127.0.0.1, BENCHD_HOST)")
    serve.add_argument("--port", type=int, help="port (default 8000, BENCHD_PORT)")
    serve.set_defaults(handler=cmd_serve)

    from benchd.cli import changes, fleet, history, runs, schedules

    runs.add_parser(commands, _command)
    comparison = _command(commands, "compare", help="is B slower than A? (run ids through a daemon, or directories "
                          "written by `benchd run --out`; comma-separated for several)")
    comparison.add_argument("a", help="run ids, or result directories")
    comparison.add_argument("b", help="run ids, or result directories")
    comparison.add_argument("--threshold", type=_fraction(0, None, "at least 0"),
                            help="relative change below which nothing is flagged (default: BENCHD_COMPARE_THRESHOLD, "
                                 "else the daemon's, 0.05)")
    comparison.add_argument("--confidence", type=_fraction(0.5, 1, "between 0.5 and 1, exclusive"),
                            help="of the intervals (default: BENCHD_COMPARE_CONFIDENCE, else the "
                                 "daemon's, 0.95)")
    comparison.add_argument("--json", action="store_true", help="print JSON instead of a table")
    comparison.add_argument("--html", metavar="FILE",
                            help="also write an HTML report with the distributions side by side")
    comparison.add_argument("--fail-on-regression", action="store_true",
                            help="exit 1 when a figure's verdict is slower")
    comparison.set_defaults(handler=results.cmd_compare)

    matrices = _command(commands, "matrices", help="a daemon's matrices: list them, or one's variants against its "
                                                "baseline")
    matrices_commands = matrices.add_subparsers(dest="matrices_command", required=True, metavar="list|show",
                                                help="one of:")
    matrix_list = _command(matrices_commands, "list", help="the newest matrices first, one line each")
    matrix_list.add_argument("--workload", help="only this workload's")
    matrix_list.add_argument("--limit", type=int, default=20, help="matrices listed at most (default 20, at most 100)")
    matrix_list.add_argument("--json", action="store_true", help="print them as JSON")
    matrix_show = _command(matrices_commands, "show", help="its variants' table")
    matrix_show.add_argument("id", help="the matrix's id")
    matrix_show.add_argument("--json", action="store_true", help="print the stored matrix as JSON (every metric)")
    matrices.set_defaults(handler=cmd_matrices)

    baseline = _command(commands, "baseline", help="a workload's baseline, which its scheduled runs are compared "
                        "with: show it (every workload's with no argument), set it, or clear it")
    baseline.add_argument("workload", nargs="?", help="the workload (a spec's name)")
    baseline.add_argument("run_id", nargs="?", help="the run to make its baseline (a succeeded, valid run of it)")
    baseline.add_argument("--clear", action="store_true", help="remove the workload's baseline")
    baseline.add_argument("--json", action="store_true", help="print JSON")
    baseline.set_defaults(handler=results.cmd_baseline)

    history.add_parser(commands, _command)
    changes.add_parser(commands, _command)
    schedules.add_parser(commands, _command)
    fleet.add_parser(commands, _command)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Every failure ends in one line on stderr and exit status 1; --debug shows the traceback as well."""
    args = build_parser().parse_args(argv)
    if not args.debug and args.command != "serve":
        import logging

        # The daemon's log lines (NVML absent on a CPU host, …) are for a daemon's log, not a command's output.
        logging.getLogger("benchd").setLevel(logging.ERROR)
    try:
        return args.handler(args)
    except CommandError as error:
        if args.debug:
            import traceback

            traceback.print_exc()
            if detail := getattr(error, "detail", None):
                print(visible(detail), file=sys.stderr)
        print(visible(f"benchd: {error}"), file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # what the terminal's stdout (cli/terminal.py) did not catch: stdout's reader went away
        from benchd.cli.terminal import STDOUT

        STDOUT.closed()
        return EXIT_OK
    except Exception as error:  # the command line's edge: anything else is one line too, the traceback on request
        if args.debug:
            raise
        first = (str(error).strip().splitlines() or [""])[0]
        print(visible(f"benchd: {args.command} failed: {type(error).__name__}: {first} (--debug shows where)"),
              file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
