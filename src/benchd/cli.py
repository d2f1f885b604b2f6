"""The benchd command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from benchd.spec import SpecError, load_spec, parse_spec

EXIT_OK, EXIT_FAILED, EXIT_BAD_SPEC, EXIT_INTERRUPTED = 0, 1, 2, 130


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
    return parse_spec(data)


def cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console(stderr=True)
    try:
        spec = _spec(args)
    except SpecError as error:
        console.print(f"[red]invalid spec[/red]\n{error}", highlight=False)
        return EXIT_BAD_SPEC

    # torch and transformers load only once the spec is known to be good.
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from benchd.report import print_summary, write_outputs
    from benchd.runner import run

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=console, transient=True)
    tasks: dict[int, int] = {}

    def on_progress(p) -> None:
        if p.stage_index not in tasks:
            tasks[p.stage_index] = bar.add_task(f"{p.stage} ({p.stage_index + 1}/{p.stages})", total=p.expected)
        bar.update(tasks[p.stage_index], completed=p.completed)

    console.print(f"loading {spec.model} for {spec.engine} …", highlight=False)
    try:
        with bar:
            outcome = run(spec, on_progress=on_progress)
    except SpecError as error:
        console.print(f"[red]invalid spec[/red]\n{error}", highlight=False)
        return EXIT_BAD_SPEC
    except KeyboardInterrupt:
        console.print("interrupted before the first request: nothing was measured")
        return EXIT_INTERRUPTED

    print_summary(outcome, Console())
    out_dir = Path(args.out) if args.out else None
    if out_dir is not None:
        write_outputs(outcome, out_dir)
        console.print(f"wrote {out_dir / 'summary.json'} and {out_dir / 'requests.csv'}", highlight=False)
    if outcome.status == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_OK if outcome.status == "completed" else EXIT_FAILED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchd", description="Measure LLM generation speed exactly.")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run a workload and print its summary")
    run.add_argument("spec", nargs="?", help="a RunSpec file (YAML or JSON); flags below override it")
    run.add_argument("--out", help="write summary.json and requests.csv into this directory")
    run.add_argument("--model", help="preset name, local directory or hub id")
    run.add_argument("--engine", help="transformers (continuous batching) or static")
    run.add_argument("--device", help="auto, cpu, cuda or cuda:N")
    run.add_argument("--dtype", help="auto, float32, bfloat16 or float16")
    run.add_argument("--seed", type=int)
    run.add_argument("--label", help="a commit or label stored with the run")
    quick = run.add_argument_group("quick workload (without a spec file)")
    quick.add_argument("--requests", type=int)
    quick.add_argument("--duration", type=float, help="seconds")
    quick.add_argument("--rate", type=float, help="Poisson arrivals, requests per second")
    quick.add_argument("--concurrency", type=int, help="closed loop with this many requests in flight")
    quick.add_argument("--prompt-tokens", type=int, default=128)
    quick.add_argument("--output-tokens", type=int, default=128)
    quick.add_argument("--warmup-requests", type=int, default=0)
    run.set_defaults(handler=cmd_run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
