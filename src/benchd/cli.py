"""The benchd command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from benchd.spec import SpecError, load_spec, parse_spec

EXIT_OK, EXIT_FAILED, EXIT_BAD_SPEC, EXIT_INTERRUPTED = 0, 1, 2, 130
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
        spec = load_spec(args.spec)
        data = spec.model_dump(exclude_unset=True)
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


def cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console(stderr=True)
    try:
        spec = _spec(args)
    except SpecError as error:
        console.print(f"[red]invalid spec[/red]\n{error}", highlight=False)
        return EXIT_BAD_SPEC
    if args.server is not None:
        return _run_on_server(args, spec, console)

    return _run_here(args, spec, console)


def _run_here(args: argparse.Namespace, spec, console) -> int:
    """The run on a worker process of its own, through the daemon's lifecycle: the CLI measures as the daemon does."""
    import os
    import signal
    import tempfile
    import uuid

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from benchd.devices import DeviceError, pick, resolve
    from benchd.hardware import HardwareReader
    from benchd.lifecycle import Lifecycle
    from benchd.report import print_summary, write_outputs
    from benchd.sampler import HardwareSampler
    from benchd.stopping import StopSignal
    from benchd.telemetry import Telemetry
    from benchd.tracing import build_tracer_provider
    from benchd.workers.handle import WorkerSettings
    from benchd.workers.pool import WorkerPool

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=console, transient=True)
    tasks: dict[int, int] = {}

    def on_progress(p) -> None:
        if p.stage_index not in tasks:
            if not console.is_terminal:  # logs get a line where a terminal gets the bar
                console.print(f"measuring {p.stage} ({p.stage_index + 1}/{p.stages})", highlight=False)
            tasks[p.stage_index] = bar.add_task(f"{p.stage} ({p.stage_index + 1}/{p.stages})", total=p.expected)
        bar.update(tasks[p.stage_index], completed=p.completed)

    sampler = HardwareSampler(HardwareReader.default())
    sampler.start()
    try:
        slots = resolve(os.environ.get("BENCHD_DEVICES", "all") if not spec.device.startswith("cpu") else [spec.device],
                        sampler.reader.nvml.devices, os.environ.get("CUDA_VISIBLE_DEVICES"))
        if spec.placement != "every_gpu":  # one worker, where the spec runs
            slots = [s for s in [pick(slots, spec.device)] if s is not None]
        if not slots:
            raise DeviceError(f"device: {spec.device} is not here")
    except DeviceError as error:
        sampler.stop()
        console.print(f"[red]invalid spec[/red]\n{error}", highlight=False)
        return EXIT_BAD_SPEC
    pool = WorkerPool(slots, WorkerSettings(log_dir=Path(tempfile.gettempdir()) / "benchd-workers"))
    pool.start()
    dropped = {"spans": 0}
    telemetry = Telemetry(tracer_provider=build_tracer_provider(
        on_drop=lambda reason, n: dropped.__setitem__("spans", dropped["spans"] + n)))
    stop = StopSignal()
    signal.signal(signal.SIGINT, lambda *_: stop.set("interrupted"))  # the worker ignores Ctrl-C: it is told
    console.print(f"loading {spec.subject} for {spec.runner} …", highlight=False)
    try:
        with bar:
            outcome = Lifecycle(pool, telemetry, sampler).execute(uuid.uuid4().hex, spec, slots[0].key, stop,
                                                                  on_progress)
    finally:
        pool.stop()
        telemetry.shutdown()
        sampler.stop()
    if outcome.error and outcome.error.startswith("SpecError"):
        console.print(f"[red]invalid spec[/red]\n{outcome.error.removeprefix('SpecError: ')}", highlight=False)
        return EXIT_BAD_SPEC
    if dropped["spans"]:
        console.print(f"{dropped['spans']} spans could not be delivered to the OTLP collector")
    print_summary(outcome, Console(width=None if sys.stdout.isatty() else 200))  # piped: no 80-column crop
    out_dir = Path(args.out) if args.out else None
    if out_dir is not None:
        written = write_outputs(outcome, out_dir)
        console.print(f"wrote {', '.join(str(path) for path in written)}", highlight=False)
    if outcome.status == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_OK if outcome.status == "succeeded" else EXIT_FAILED


def _run_on_server(args: argparse.Namespace, spec, console) -> int:
    """Submit to a running daemon and follow its events; the daemon fills in what the spec leaves unset."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from benchd.client import Client, DaemonError
    from benchd.report import parse_summaries, summary_table, timed_table

    client = Client(args.server)
    try:
        created = client.submit(spec.model_dump(mode="json", exclude_unset=True))
        console.print(f"run {created['id']} queued on {client.server}", highlight=False)
        final: dict = {}
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=True) as bar:
            task = bar.add_task("queued", total=None)
            for kind, data in client.events(created["id"]):
                if kind == "status":
                    bar.update(task, description=data["status"])
                elif kind == "progress":
                    bar.update(task, description=f"{data['stage']} ({data['stage_index'] + 1}/{data['stages']})",
                               completed=data["completed"], total=data["expected"])
                elif kind == "summary":
                    final = data
        run = client.run(created["id"])
    except DaemonError as error:
        console.print(f"[red]{error}[/red]", highlight=False)
        return EXIT_BAD_SPEC if str(error).startswith("422") else EXIT_FAILED
    except KeyboardInterrupt:
        client.cancel(created["id"])
        console.print(f"cancelled run {created['id']}")
        return EXIT_INTERRUPTED
    summaries = parse_summaries(spec.kind, final.get("stages", []))
    title = f"benchd · {run['workload']} · {run['model']} · {run['engine']} · run {run['id']}"
    status, error = final.get("status", run["status"]), final.get("error")
    table = (summary_table(title, status, error, summaries) if spec.kind == "generate"
             else timed_table(title, status, error, spec.kind, summaries))
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    return EXIT_OK if run["status"] == "succeeded" else EXIT_FAILED


def cmd_serve(args: argparse.Namespace) -> int:
    import logging

    import uvicorn
    from pydantic import ValidationError

    from benchd.api import create_app
    from benchd.config import Settings

    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    try:
        settings = Settings(**overrides)
    except ValidationError as error:
        from benchd.spec import format_validation_error

        print(f"invalid settings\n{format_validation_error(error)}", file=sys.stderr)
        return EXIT_BAD_SPEC
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # uvicorn turns SIGTERM and Ctrl-C into a clean shutdown: the lifespan marks the current run interrupted.
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from benchd.client import Client, DaemonError

    client = Client(args.server)
    console = Console(width=None if sys.stdout.isatty() else 200)  # piped: no 80-column crop of run ids
    try:
        if args.runs_command == "show":
            import json

            console.print_json(json.dumps(client.run(args.id)))
            return EXIT_OK
        page = client.runs(status=args.status, model=args.model, workload=args.workload, limit=args.limit)
    except DaemonError as error:
        print(error, file=sys.stderr)
        return EXIT_FAILED
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
    """B against A through a daemon's store: a table, JSON, or an HTML report."""
    from rich.console import Console

    from benchd.client import Client, DaemonError
    from benchd.compare import Comparison
    from benchd.report import comparison_table

    client = Client(args.server)
    params = {"a": args.a, "b": args.b, "threshold": args.threshold, "confidence": args.confidence}
    try:
        if args.html:
            Path(args.html).write_text(client.get("/compare", params={**params, "format": "html"}, text=True))
            print(f"wrote {args.html}", file=sys.stderr)
        result = client.get("/compare", params=params)
    except DaemonError as error:
        print(error, file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        import json

        print(json.dumps(result, indent=2))
    else:
        Console(width=None if sys.stdout.isatty() else 160).print(comparison_table(Comparison.model_validate(result)))
    return EXIT_OK


def cmd_baseline(args: argparse.Namespace) -> int:
    from benchd.client import Client, DaemonError

    try:
        Client(args.server).put(f"/baselines/{args.workload}", {"run_id": args.run_id})
    except DaemonError as error:
        print(error, file=sys.stderr)
        return EXIT_FAILED
    print(f"run {args.run_id} is the baseline of {args.workload}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchd", description="Measure LLM generation speed exactly.")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run a workload, training step or kernel spec and print its summary")
    run.add_argument("spec", nargs="?", help="a RunSpec file (YAML or JSON); flags below override it")
    run.add_argument("--out", help="write summary.json, requests.csv (timed runs: timings.csv, kernels.csv) and "
                                   "report.html into this directory")
    run.add_argument("--model", help="preset name, local directory or hub id")
    run.add_argument("--engine", help="transformers (continuous batching) or static")
    run.add_argument("--device", help="auto, cpu, cuda or cuda:N")
    run.add_argument("--dtype", help="auto, float32, bfloat16 or float16")
    run.add_argument("--seed", type=int)
    run.add_argument("--label", help="a commit or label stored with the run")
    run.add_argument("--server", help="submit to the daemon at this URL and follow its events")
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

    serve = commands.add_parser("serve", help="start the daemon (settings: BENCHD_* variables, BENCHD_CONFIG file)")
    serve.add_argument("--host", help="bind address (default 127.0.0.1, BENCHD_HOST)")
    serve.add_argument("--port", type=int, help="port (default 8000, BENCHD_PORT)")
    serve.set_defaults(handler=cmd_serve)

    runs = commands.add_parser("runs", help="list or show runs stored by a daemon")
    runs.add_argument("--server", help=f"daemon URL (BENCHD_SERVER, default {'http://127.0.0.1:8000'})")
    runs_commands = runs.add_subparsers(dest="runs_command", required=True)
    listing = runs_commands.add_parser("list")
    listing.add_argument("--status")
    listing.add_argument("--model")
    listing.add_argument("--workload")
    listing.add_argument("--limit", type=int, default=20)
    show = runs_commands.add_parser("show")
    show.add_argument("id")
    runs.set_defaults(handler=cmd_runs)

    comparison = commands.add_parser("compare", help="is B slower than A? (run ids, comma-separated)")
    comparison.add_argument("a")
    comparison.add_argument("b")
    comparison.add_argument("--server", help="daemon URL (BENCHD_SERVER)")
    comparison.add_argument("--threshold", type=float, help="relative change below which nothing is flagged")
    comparison.add_argument("--confidence", type=float, help="of the bootstrap intervals, e.g. 0.95")
    comparison.add_argument("--json", action="store_true", help="print JSON instead of a table")
    comparison.add_argument("--html", help="also write an HTML report with the distributions side by side")
    comparison.set_defaults(handler=cmd_compare)

    baseline = commands.add_parser("baseline", help="mark a run as its workload's baseline")
    baseline.add_argument("workload")
    baseline.add_argument("run_id")
    baseline.add_argument("--server", help="daemon URL (BENCHD_SERVER)")
    baseline.set_defaults(handler=cmd_baseline)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
