"""A run's outputs: summary.json, requests.csv and .jsonl, report.html and the terminal's tables."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from benchd.hardware.sampler import HardwareSummary
from benchd.measure.comparison import Comparison
from benchd.measure.quality import QualitySummary
from benchd.measure.result import RunResult
from benchd.measure.sides import REQUESTS_FILE
from benchd.measure.stack import device
from benchd.measure.summary import StageSummary
from benchd.measure.timings import CSV_COLUMNS as KERNEL_CSV_COLUMNS
from benchd.measure.timings import KernelResult, TrainStepSummary
from benchd.protocol.metadata import RunMetadata
from benchd.report.pages import run_page
from benchd.report.tables import (
    COMPARISON_HEAD,
    GPU_COLUMNS,
    KERNEL_COLUMNS,
    capacity_line,
    comparison_rows,
    context_rows,
    gpu_rows,
    hardware_line,
    kernel_rows,
    parse_summaries,
    quality_line,
    quality_verdict_line,
    roofline_rows,
    same_stack,
    stack_line,
    summary_rows,
    train_step_rows,
    train_step_subject,
)
from benchd.spec import RunSpec

CSV_COLUMNS = [
    "stage", "index", "request_id", "warmup", "prompt_tokens", "max_new_tokens", "output_tokens",
    "scheduled_s", "submitted_s", "admitted_s", "first_token_s", "last_token_s", "finished_s",
    "dispatch_lag_s", "queue_s", "ttft_s", "tpot_s", "e2e_s", "error", "trace_id", "token_times_s",
]


def csv_row(row: dict[str, Any]) -> dict[str, object]:
    """A request as a CSV row, from its stored form (RequestRecord.to_row): token_times_s repeats an arrival's
    stamp once per token it carried."""
    stamps, counts = row["arrival_s"] or [], row["arrival_tokens"] or []
    token_times = " ".join(f"{t:.6f}" for t, n in zip(stamps, counts) for _ in range(n))
    out = {key: row.get(key) for key in CSV_COLUMNS}
    out.update(warmup=int(bool(row["warmup"])), first_token_s=stamps[0] if stamps else None,
               last_token_s=stamps[-1] if stamps else None, token_times_s=token_times)
    return out


def write_csv(rows, file) -> None:
    """Stored request rows as CSV; None becomes an empty cell, floats keep full precision."""
    writer = csv.DictWriter(file, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    writer.writerows(csv_row(row) for row in rows)


TIMING_COLUMNS = ["stage_index", "stage", "series", "index", "warmup", "seconds"]


def write_outputs(result: RunResult, out_dir: Path) -> list[Path]:
    """summary.json, requests.csv and requests.jsonl (generation) or timings.csv (+ kernels.csv), and
    report.html; the paths written. requests.jsonl holds each request as the store keeps it (RequestRecord.to_row),
    so that `benchd compare` reads a directory's records exactly as a daemon reads its own."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps(result.to_json(), indent=2) + "\n")
    written = [out_dir / "summary.json"]
    if result.spec.kind != "generate":
        results = result.ended().summaries
        stages = [r.stage for r in results]
        rows: list[dict[str, Any]] = [{"stage_index": t.stage_index, "series": t.series, "index": t.index,
                                       "warmup": t.warmup, "seconds": t.seconds}
                                      for t in result.timings]  # as the store keeps them
        with (out_dir / "timings.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=TIMING_COLUMNS)
            writer.writeheader()
            writer.writerows({**row, "warmup": int(row["warmup"]),
                              "stage": stages[row["stage_index"]] if row["stage_index"] < len(stages) else ""}
                             for row in rows)
        written.append(out_dir / "timings.csv")
        if result.spec.kind == "kernel":
            with (out_dir / "kernels.csv").open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=KERNEL_CSV_COLUMNS)
                writer.writeheader()
                writer.writerows(r.csv_row() for r in results)
            written.append(out_dir / "kernels.csv")
    else:
        rows = [{**record.to_row(stage.label, stage.start_s), "stage_index": stage.index}
                for stage in result.stages for record in sorted(stage.records, key=lambda r: r.index)]
        with (out_dir / "requests.csv").open("w", newline="") as f:
            write_csv(rows, f)
        with (out_dir / REQUESTS_FILE).open("w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)  # floats as repr: read back bit for bit
        written += [out_dir / "requests.csv", out_dir / REQUESTS_FILE]
    # The page the daemon serves at /runs/{id}/report, from the same run and rows.
    run = {**result.to_json(), "timeline": getattr(result, "timeline", None)}
    (out_dir / "report.html").write_text(run_page(run, rows))
    return [*written, out_dir / "report.html"]


def run_title(spec: RunSpec, metadata: RunMetadata | None) -> str:
    title = f"benchd · {spec.name}" + (f" · {spec.label}" if spec.label else "") + f" · {spec.subject} · {spec.runner}"
    return title + (f" · {device(metadata.model_dump())}" if metadata is not None else "")


def _caption(status: str, error: str | None) -> str:
    return f"status: {status}" + (f" — {error}" if error else "")


def _by_width(first: int, cells: list[list[str]], width: int | None, most: int = 28) -> list[list[int]]:
    """Columns (each a list of its cells) in groups that fit width beside a first column of the given width: a
    column takes its widest cell (up to `most`; wider ones fold) and 3 for its padding and rule."""
    if width is None or not cells:
        return [list(range(len(cells)))]
    groups: list[list[int]] = [[]]
    used = first + 4
    for index, column in enumerate(cells):
        need = min(most, max(map(len, column))) + 3
        if groups[-1] and used + need > width:
            groups.append([])
            used = first + 4
        groups[-1].append(index)
        used += need
    return groups


def _stage_tables(title: str, caption: str, stages: list[str], rows: list[tuple[str, list[str]]],
                  width: int | None) -> list[Table]:
    """One column per stage, one row per figure, in as many tables as the width needs (a sweep of many levels)."""
    first = max((len(name) for name, _ in rows), default=0)
    groups = _by_width(first, [[stage, *(cells[i] for _, cells in rows)] for i, stage in enumerate(stages)], width)
    tables = []
    for number, group in enumerate(groups):
        part = f" ({number + 1}/{len(groups)})" if len(groups) > 1 else ""
        table = Table(title=Text(title + part), caption=Text(caption) if number == len(groups) - 1 else None)
        table.add_column("", no_wrap=True)
        for i in group:
            table.add_column(Text(stages[i]), justify="right", overflow="fold")
        for name, cells in rows:
            table.add_row(Text(name), *(Text(cells[i]) for i in group))
        tables.append(table)
    return tables


def summary_tables(title: str, status: str, error: str | None, summaries: list[StageSummary],
                   width: int | None = None) -> list[Table]:
    """One column per stage (load level), one row per figure; split across tables to fit width."""
    return _stage_tables(title, _caption(status, error), [s.stage for s in summaries], summary_rows(summaries),
                         width)


def train_step_tables(title: str, status: str, error: str | None, summaries: list[TrainStepSummary],
                      width: int | None = None) -> list[Table]:
    """One column per warm-up level, one row per figure; times are mean ± std over the measured steps."""
    if summaries:
        title = f"{title}\n{train_step_subject(summaries[0])}"
    return _stage_tables(title, _caption(status, error), [s.stage for s in summaries], train_step_rows(summaries),
                         width)


def kernel_table(title: str, status: str, error: str | None, results: list[KernelResult]) -> Table:
    """A row per implementation and shape; the kernel's column only where the rows name more than one (the title
    names it), so that the table fits 120 columns."""
    rows = kernel_rows(results)
    keep = [i for i, column in enumerate(KERNEL_COLUMNS)
            if column != "kernel" or len({row[0] for row in rows}) > 1]
    table = Table(title=Text(title), caption=Text(_caption(status, error) + "; TFLOP/s at the median time"))
    for i in keep:
        column = KERNEL_COLUMNS[i]
        text = column in ("kernel", "shape", "dtype", "implementation")
        table.add_column(column, justify="left" if text else "right", overflow="fold", no_wrap=column == "shape")
    for row in rows:
        table.add_row(*(Text(row[i]) for i in keep))
    return table


def timed_tables(title: str, status: str, error: str | None, kind: str, summaries: list,
                 width: int | None = None) -> list[Table]:
    if kind == "kernel":
        return [kernel_table(title, status, error, summaries)]
    return train_step_tables(title, status, error, summaries, width)


def print_summary(result: RunResult, console: Console | None = None) -> None:
    """The tables `benchd run` prints at a run's end."""
    outcome = result.ended()
    found = outcome.capacity
    print_run(console or Console(), run_title(result.spec, result.metadata), None, result.spec.kind,
              result.status, result.error, outcome.summaries,
              capacity_line(found) if found is not None else None, result.parts, result.hardware,
              (result.timeline or {}).get("server"),
              stack_line(result.metadata.model_dump()) if result.metadata is not None else None,
              quality_line(outcome.quality))


def print_stored(run: dict, console: Console) -> None:
    """A run as a daemon stores it (GET /runs/{id}): the tables `benchd run` printed, under what it was."""
    kind = (run.get("spec") or {}).get("kind", "generate")
    metadata = run.get("metadata") or {}
    title = f"benchd · {run['workload']} · {run['model']} · {run['engine']} · run {run['id']}"
    about = " · ".join(str(x) for x in (
        f"label {run['label']}" if run.get("label") else None, device(metadata), run.get("node"),
        f"created {str(run['created_at'])[:19].replace('T', ' ')}",
        f"finished {str(run['finished_at'])[:19].replace('T', ' ')}" if run.get("finished_at") else None,
        {True: "valid", False: "INVALID"}.get(run.get("valid"))) if x)
    capacity = run.get("capacity_requests_per_s")
    hardware = HardwareSummary.model_validate(run["hardware"]) if run.get("hardware") else None
    print_run(console, title, about, kind, run["status"], run.get("error"),
              parse_summaries(kind, run.get("summary") or []),
              None if capacity is None else f"capacity under SLO: {capacity:g} requests/s", run.get("parts"),
              hardware, None, stack_line(metadata),
              quality_line(QualitySummary.model_validate(run["quality"]) if run.get("quality") else None))


def print_run(console: Console, title: str, about: str | None, kind: str, status: str, error: str | None,
              summaries: list, capacity: str | None, parts: dict | None, hardware: HardwareSummary | None,
              server: dict | None, stack: str | None = None, quality: str | None = None) -> None:
    if about:
        console.print(Text(about))
    if not summaries and status != "succeeded":
        console.print(Text(f"{title}: {_caption(status, error)}"))
        return
    width = console.width
    tables = (summary_tables(title, status, error, summaries, width) if kind == "generate"
              else timed_tables(title, status, error, kind, summaries, width))
    for table in tables:
        console.print(table)
    for summary in summaries if kind == "generate" else []:
        for why in summary.invalid:  # the verdict row names the checks; here each one's figures
            console.print(Text(f"{summary.stage}: invalid: {why.message}"))
    if capacity is not None:
        console.print(Text(capacity))
    if parts is not None:
        gpus = Table(title="every GPU: the first stage, each against the median of its siblings")
        for column in GPU_COLUMNS:
            gpus.add_column(column, justify="left" if column in ("GPU", "status", "verdict") else "right",
                            overflow="fold")
        for row in gpu_rows(parts):
            gpus.add_row(*map(Text, row))
        console.print(gpus)
    if stack:
        console.print(Text(stack))
    if quality:
        console.print(Text(quality))
    if hardware is not None:
        console.print(Text(hardware_line(hardware)))
    if server is not None and server.get("warning"):
        console.print(Text(f"warning: {server['warning']}"))


# ---- comparisons -----------------------------------------------------------------------------------

VERDICT_STYLES = {"slower": "bold red", "faster": "bold green", "inconclusive": "yellow", "n/a": "dim"}


def comparison_table(result: Comparison) -> Group:
    """What was compared (each side's runs, workloads, labels, dates, and the stack entries that differ), then B
    against A a figure a row, its verdict coloured and marked where a note below says why."""
    parts: list = [Text(f"warning: {w}", style="bold yellow") for w in result.warnings]
    if result.clock_states:  # the GPU's state may be what changed (hardware/clocks.py)
        parts.append(Text(f"warning: {result.clock_states}", style="bold yellow"))
    if rows := context_rows(result):
        context = Table(title="what was compared (≠: a stack entry that differs)", title_justify="left")
        for column in ("", "A", "B"):
            context.add_column(column, overflow="fold")
        for row in rows:
            context.add_row(*map(Text, row), style="bold" if row[0].startswith("≠") else None)
        parts.append(context)
        if shared := same_stack(result):
            parts.append(Text(f"both: {shared}"))
    ids = f"A: {', '.join(result.a)}  →  B: {', '.join(result.b)}"
    table = Table(title=Text(ids), title_justify="left", caption_justify="left",
                  caption=f"verdicts: the change's interval at {result.confidence:.0%} wholly beyond ±"
                          f"{result.threshold:.0%} (slower, faster) or within it (equivalent)")
    for column in COMPARISON_HEAD:
        table.add_column(column, justify="left" if column in ("figure", "verdict") else "right",
                         overflow="fold", no_wrap=column in ("A", "B", "change"))
    metrics, notes = comparison_rows(result)
    for m, row in zip(result.metrics, metrics):
        table.add_row(*map(Text, row[:-1]), Text(row[-1], style=VERDICT_STYLES.get(m.verdict, "")))
    for row in roofline_rows(result):  # how far from the hardware (measure/roofline.py)
        table.add_row(*map(Text, row))
    parts.append(table)
    parts += [Text(note) for note in notes]
    if result.quality is not None:  # beside the speed: the same outputs, or different ones
        parts.append(Text(quality_verdict_line(result.quality),
                          style="bold red" if result.quality.verdict == "different" else ""))
    return Group(*parts)
