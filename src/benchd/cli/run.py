"""`benchd run` of one spec: on a worker process of its own here (after what the daemon's admission would refuse,
unless --force), or on a daemon; and one line for a run whose model, tokenizer or server could not be had."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchd import heap
from benchd.cli import EXIT_BAD_SPEC, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK
from benchd.cli.client import CommandError


def load_failure(spec, error: str | None) -> str:
    """One line for a run whose model (or what its engine prepares: a served model's tokenizer, its server) could
    not be had: the error's first line, and what to give instead."""
    from benchd.spec import GenerateSpec

    first = (error or "unknown error").strip().splitlines()[0].rstrip(".")
    if isinstance(spec, GenerateSpec) and (line := spec.load_problem(first)) is not None:
        return line
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
    import uuid

    from benchd.cli.local import WORKER_LOG, Local, Refused
    from benchd.cli.terminal import out, refused
    from benchd.report.outputs import print_summary, write_outputs

    try:
        with Local([spec], args.force) as local, Progress(console) as progress:
            console.print(f"loading {spec.subject} for {spec.runner} …")
            if spec.kind == "generate":
                from benchd.models.duration import run_bound_s

                console.print(ends_within(run_bound_s(spec)), soft_wrap=True)
            heap.settle()  # this process ingests every record of the run: its collections walk only what it makes
            assert local.lifecycle is not None  # Local.__enter__ made it
            outcome = local.lifecycle.execute(uuid.uuid4().hex, spec, spec.device, local.stop, progress.update)
    except Refused as refusal:
        refused(console, "\n".join(refusal.lines))
        return EXIT_BAD_SPEC
    if outcome.error and outcome.error.startswith("SpecError"):
        refused(console, outcome.error.removeprefix("SpecError: "))
        return EXIT_BAD_SPEC
    if local.dropped_spans:
        console.print(f"{local.dropped_spans} spans could not be delivered to the OTLP collector")
    loading = outcome.status == "failed" and outcome.error_stage == "load"
    if not loading:  # nothing was measured: no table of dashes
        print_summary(outcome, out())
    out_dir = Path(args.out) if args.out else None
    if out_dir is not None:
        written = write_outputs(outcome, out_dir)
        # Whole paths, never wrapped at the console's width (a log line a user copies them from).
        console.print(f"wrote {', '.join(str(path) for path in written)}", soft_wrap=True)
    if loading:
        raise CommandError(load_failure(spec, outcome.error), outcome.error + f"\n(worker logs: {WORKER_LOG})")
    if outcome.status == "interrupted":
        return EXIT_INTERRUPTED
    if outcome.status != "succeeded":
        return EXIT_FAILED
    return EXIT_INVALID if args.fail_on_invalid and outcome.valid() is False else EXIT_OK


def ends_within(bound_s: float | None, deadline_s: float | None = None) -> str:
    """How long a run's stages take at most once its first request leaves (models/duration.py, run_bound_s: each
    stage's sending to its stop, then its drain), and when the daemon stops it."""
    from benchd.models.duration import span

    text = (f"its stages end within {span(bound_s)} of its first request (each stage's sending and drain)"
            if bound_s is not None else "its stages end at the engine's pace (a closed loop stopped by requests alone)")
    return text + (f"; the daemon stops it at {span(deadline_s)}" if deadline_s is not None else "")


def describe(stage: str, index: int, stages: int, elapsed_s: float, bound_s: float | None, draining: bool) -> str:
    """A stage's progress line: its label, its place, and once it stops sending, how soon its drain ends it."""
    text = f"{stage} ({index + 1}/{stages})"
    if draining:
        text += " draining" + (f", ends within {max(0.0, bound_s - elapsed_s):.0f} s" if bound_s is not None else "")
    return text


class Progress:
    """A bar a stage while requests are in flight (a line a stage where the output is no terminal)."""

    def __init__(self, console) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console
        self.bar = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=console, transient=True)
        self.tasks: dict[int, int] = {}
        self.draining = False  # the current stage has stopped sending

    def __enter__(self) -> Progress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def update(self, p) -> None:
        if p.stage_index not in self.tasks:
            if not self.console.is_terminal:  # logs get a line where a terminal gets the bar
                self.console.print(f"measuring {p.stage} ({p.stage_index + 1}/{p.stages})", highlight=False)
            self.tasks[p.stage_index] = self.bar.add_task(f"{p.stage} ({p.stage_index + 1}/{p.stages})",
                                                          total=p.expected)
            self.draining = False
        if p.draining and not self.draining and not self.console.is_terminal:
            self.console.print(describe(p.stage, p.stage_index, p.stages, p.elapsed_s, p.bound_s, True),
                               highlight=False, soft_wrap=True)
        self.draining = p.draining
        self.bar.update(self.tasks[p.stage_index], completed=p.completed,
                        description=describe(p.stage, p.stage_index, p.stages, p.elapsed_s, p.bound_s, p.draining))


def on_server(args: argparse.Namespace, spec, console) -> int:
    """Submit to a running daemon and follow its events; the daemon fills in what the spec leaves unset."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.text import Text

    from benchd.cli.client import Client, DaemonError
    from benchd.cli.terminal import out
    from benchd.report.outputs import print_stored

    client = Client(args.server)
    created: dict = {}
    try:
        created = client.submit(spec.model_dump(mode="json", exclude_unset=True))
        console.print(Text(f"run {created['id']} queued on {client.server}"))
        if "bound_s" in created and spec.kind == "generate":  # a daemon that says it
            console.print(ends_within(created["bound_s"], created.get("deadline_s")), soft_wrap=True)
        if getattr(args, "quick", None):
            console.print(args.quick, soft_wrap=True)
        final: dict = {}
        # the stage's name is the server's: a description that is text, never markup
        with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=True) as bar:
            task = bar.add_task("queued", total=None)

            def on_event(kind: str, data: dict) -> None:
                if kind == "status":
                    bar.update(task, description=str(data.get("status")))
                elif kind == "progress":
                    bar.update(task, description=describe(data["stage"], data["stage_index"], data["stages"],
                                                          data.get("elapsed_s", 0.0), data.get("bound_s"),
                                                          bool(data.get("draining"))),
                               completed=data["completed"], total=data["expected"])
                elif kind == "summary":
                    final.update(data)

            client.events(created["id"], on_event)
        run = client.run(created["id"])
    except DaemonError as error:
        if error.status != 422:
            raise
        from benchd.cli.terminal import refused

        refused(console, str(error).removeprefix("422: "))
        return EXIT_BAD_SPEC
    except KeyboardInterrupt:
        if created:
            client.cancel(created["id"])
            console.print(Text(f"cancelled run {created['id']}"))
        return EXIT_INTERRUPTED
    status, failure = final.get("status", run["status"]), final.get("error")
    if status == "failed" and run.get("error_stage") == "load":
        raise CommandError(f"run {run['id']}: {load_failure(spec, failure)}", failure)
    if final.get("stages"):  # the summaries as the run ended (the stored run has them too, once written)
        run = {**run, "status": status, "summary": final["stages"]}
    print_stored(run, out())
    if run["status"] != "succeeded":
        return EXIT_FAILED
    invalid = run.get("valid") is False or any(s.get("valid") is False for s in run.get("summary") or [])
    return EXIT_INVALID if args.fail_on_invalid and invalid else EXIT_OK
