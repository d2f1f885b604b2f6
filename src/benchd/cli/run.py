"""`benchd run` of one spec: on a worker process of its own here (after what the daemon's admission would refuse,
unless --force), or on a daemon; and one line for a run whose model, tokenizer or server could not be had."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchd import heap
from benchd.cli import EXIT_BAD_SPEC, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from benchd.cli.client import CommandError

UNANSWERED = "openai.base_url: nothing answers at"  # how the openai engine says its server did not answer


def load_failure(spec, error: str | None) -> str:
    """One line for a run whose model (or an openai run's tokenizer) could not be loaded: the error's first line,
    and what to give instead."""
    from benchd.spec import OpenAISpec

    first = (error or "unknown error").strip().splitlines()[0].rstrip(".")
    if isinstance(spec, OpenAISpec):
        if UNANSWERED in first:  # engines/openai/engine.py: the server was asked before any request
            why = first.split(UNANSWERED, 1)[1].split(": ", 1)[-1]
            return (f"the server at {spec.openai.base_url} (openai.base_url) did not answer: {why}; start it, or "
                    "give the URL it serves at")
        if spec.openai.tokenizer is None:
            return (f"could not prepare the run: {first} (openai.tokenizer is unset: prompts come from "
                    "workload.dataset and are counted in characters)")
        return (f"could not load the tokenizer {spec.openai.tokenizer!r}: {first}; give a local directory holding "
                "the served model's tokenizer (tokenizer.json or its files)")
    if "out of memory" in first.lower():
        return (f"could not load model {spec.model!r}: {first}; choose a smaller model or dtype, or another device")
    if Path(spec.model).is_dir():
        return (f"could not load model {spec.model!r}: {first}; the directory must hold a transformers model "
                "(config.json and its weights)")
    from benchd.models.presets import PRESETS

    return (f"could not load model {spec.model!r}: {first}; give a preset ({', '.join(PRESETS)}), a local directory "
            "holding the model, or a hub id with network access or already in the Hugging Face cache")


def here(args: argparse.Namespace, spec, console) -> int:
    """The run on a worker process of its own, through the daemon's lifecycle: the CLI measures as the daemon does."""
    import signal
    import tempfile
    import uuid

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from benchd.daemon.lifecycle import Lifecycle
    from benchd.hardware.devices import DeviceError, local, targets
    from benchd.hardware.reader import HardwareReader
    from benchd.hardware.sampler import HardwareSampler
    from benchd.report.outputs import print_summary, write_outputs
    from benchd.stopping import StopSignal
    from benchd.supervisor.handle import WorkerSettings
    from benchd.supervisor.pool import WorkerPool
    from benchd.telemetry.genai import build_genai_metrics
    from benchd.telemetry.run import Telemetry
    from benchd.telemetry.tracing import build_tracer_provider

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=console, transient=True)
    tasks: dict[int, int] = {}

    def on_progress(p) -> None:
        if p.stage_index not in tasks:
            if not console.is_terminal:  # logs get a line where a terminal gets the bar
                console.print(f"measuring {p.stage} ({p.stage_index + 1}/{p.stages})", highlight=False)
            tasks[p.stage_index] = bar.add_task(f"{p.stage} ({p.stage_index + 1}/{p.stages})", total=p.expected)
        bar.update(tasks[p.stage_index], completed=p.completed)

    # OTEL_* variables are read first: a bad one stops the command before anything starts.
    dropped = {"spans": 0}
    telemetry = Telemetry(tracer_provider=build_tracer_provider(
        on_drop=lambda reason, n: dropped.__setitem__("spans", dropped["spans"] + n)), genai=build_genai_metrics())
    sampler = HardwareSampler(HardwareReader.default())
    sampler.start()
    try:
        slots = local([spec.device], sampler.reader.nvml.devices)
        # the devices the run takes, their workers started by the run (one each, or a tensor-parallel group's)
        chosen = targets(slots, spec.device, spec.placement, spec.tensor_parallel)
        slots = [s for s in slots if any(s.key in c.devices for c in chosen)]
    except DeviceError as error:
        sampler.stop()
        console.print(f"[red]invalid spec[/red]\n{error}", highlight=False)
        return EXIT_BAD_SPEC
    worker_log = Path(tempfile.gettempdir()) / "benchd-workers"
    pool = WorkerPool(slots, WorkerSettings(log_dir=worker_log))  # the run starts the workers it takes
    if not args.force and (found := refused(spec, pool)):
        pool.stop()
        telemetry.shutdown()
        sampler.stop()
        console.print("[red]invalid spec[/red]\n" + "\n".join(found) + "\n(--force runs it anyway)", highlight=False,
                      soft_wrap=True)
        return EXIT_BAD_SPEC
    stop = StopSignal()
    signal.signal(signal.SIGINT, lambda *_: stop.set("interrupted"))  # the worker ignores Ctrl-C: it is told
    console.print(f"loading {spec.subject} for {spec.runner} …", highlight=False)
    heap.settle()  # this process ingests every record of the run: its collections walk only what the run makes
    try:
        with bar:
            outcome = Lifecycle(pool, telemetry, sampler).execute(uuid.uuid4().hex, spec, spec.device, stop,
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
    loading = outcome.status == "failed" and outcome.error_stage == "load"
    if not loading:  # nothing was measured: no table of dashes
        print_summary(outcome, Console(width=None if sys.stdout.isatty() else 200))  # piped: no 80-column crop
    out_dir = Path(args.out) if args.out else None
    if out_dir is not None:
        written = write_outputs(outcome, out_dir)
        # Whole paths, never wrapped at the console's width (a log line a user copies them from).
        console.print(f"wrote {', '.join(str(path) for path in written)}", highlight=False, soft_wrap=True)
    if loading:
        raise CommandError(load_failure(spec, outcome.error), outcome.error + f"\n(worker logs: {worker_log})")
    if outcome.status == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_OK if outcome.status == "succeeded" else EXIT_FAILED


def refused(spec, pool) -> list[str]:
    """What the daemon's admission refuses of a run's requests and time (benchd.models.duration.run_problems), judged at the
    speed of the devices its workers measured and against BENCHD_LIMITS__MAX_DURATION_S."""
    from pydantic import ValidationError

    from benchd.daemon.settings import Settings
    from benchd.models.duration import run_problems
    from benchd.spec import format_validation_error

    try:
        limit_s = Settings().limits.max_duration_s
    except ValidationError as error:
        return [f"settings (BENCHD_*): {format_validation_error(error)}"]
    found: list[str] = []
    for slot, speed in pool.measured(spec.device, spec.placement, spec.tensor_parallel):
        for loc, why in run_problems(spec, speed, limit_s, slot.local):
            if (line := f"{'.'.join(map(str, loc))}: {why}") not in found:
                found.append(line)
    return found


def on_server(args: argparse.Namespace, spec, console) -> int:
    """Submit to a running daemon and follow its events; the daemon fills in what the spec leaves unset."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from benchd.cli.client import Client, DaemonError
    from benchd.report.outputs import parse_summaries, summary_table, timed_table

    client = Client(args.server)
    created: dict = {}
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
        if error.status != 422:
            raise
        console.print(f"[red]{error}[/red]", highlight=False)
        return EXIT_BAD_SPEC
    except KeyboardInterrupt:
        if created:
            client.cancel(created["id"])
            console.print(f"cancelled run {created['id']}")
        return EXIT_INTERRUPTED
    status, error = final.get("status", run["status"]), final.get("error")
    if status == "failed" and run.get("error_stage") == "load":
        raise CommandError(f"run {run['id']}: {load_failure(spec, error)}", error)
    summaries = parse_summaries(spec.kind, final.get("stages", []))
    title = f"benchd · {run['workload']} · {run['model']} · {run['engine']} · run {run['id']}"
    table = (summary_table(title, status, error, summaries) if spec.kind == "generate"
             else timed_table(title, status, error, spec.kind, summaries))
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    return EXIT_OK if run["status"] == "succeeded" else EXIT_FAILED
