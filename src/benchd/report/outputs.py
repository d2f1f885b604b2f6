"""A run's outputs: summary.json, requests.csv and .jsonl, report.html and the terminal's tables."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchd.measure.compare import LATENCIES, REQUESTS_FILE, Comparison
from benchd.measure.records import StageSummary
from benchd.measure.result import RunResult
from benchd.measure.timings import CSV_COLUMNS as KERNEL_CSV_COLUMNS
from benchd.measure.timings import KernelResult, TrainStepSummary
from benchd.protocol.metadata import RunMetadata
from benchd.report.pages import run_page
from benchd.report.tables import (  # noqa: F401
    GPU_COLUMNS,
    KERNEL_COLUMNS,
    capacity_line,
    gpu_rows,
    hardware_line,
    stack_line,
    kernel_rows,
    parse_summaries,
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


def csv_row(row: dict[str, object]) -> dict[str, object]:
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


def write_outputs(outcome: RunResult, out_dir: Path) -> list[Path]:
    """summary.json, requests.csv and requests.jsonl (generation) or timings.csv (+ kernels.csv), and
    report.html; the paths written. requests.jsonl holds each request as the store keeps it (RequestRecord.to_row),
    so that `benchd compare` reads a directory's records exactly as a daemon reads its own."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps(outcome.to_json(), indent=2) + "\n")
    written = [out_dir / "summary.json"]
    if outcome.spec.kind != "generate":
        results = outcome.summaries()
        stages = [r.stage for r in results]
        rows = [{"stage_index": t.stage_index, "series": t.series, "index": t.index, "warmup": t.warmup,
                 "seconds": t.seconds} for t in outcome.timings]  # as the store keeps them
        with (out_dir / "timings.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=TIMING_COLUMNS)
            writer.writeheader()
            writer.writerows({**row, "warmup": int(row["warmup"]),
                              "stage": stages[row["stage_index"]] if row["stage_index"] < len(stages) else ""}
                             for row in rows)
        written.append(out_dir / "timings.csv")
        if outcome.spec.kind == "kernel":
            with (out_dir / "kernels.csv").open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=KERNEL_CSV_COLUMNS)
                writer.writeheader()
                writer.writerows(r.csv_row() for r in results)
            written.append(out_dir / "kernels.csv")
    else:
        rows = [{**record.to_row(stage.label, stage.start_s), "stage_index": stage.index}
                for stage in outcome.stages for record in sorted(stage.records, key=lambda r: r.index)]
        with (out_dir / "requests.csv").open("w", newline="") as f:
            write_csv(rows, f)
        with (out_dir / REQUESTS_FILE).open("w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)  # floats as repr: read back bit for bit
        written += [out_dir / "requests.csv", out_dir / REQUESTS_FILE]
    # The page the daemon serves at /runs/{id}/report, from the same run and rows.
    run = {**outcome.to_json(), "timeline": getattr(outcome, "timeline", None)}
    (out_dir / "report.html").write_text(run_page(run, rows))
    return [*written, out_dir / "report.html"]


def run_title(spec: RunSpec, metadata: RunMetadata | None) -> str:
    title = f"benchd · {spec.name} · {spec.subject} · {spec.runner}"
    return title + (f" · {metadata.device_name}" if metadata is not None else "")


def summary_table(title: str, status: str, error: str | None, summaries: list[StageSummary]) -> Table:
    """One column per stage (load level), one row per figure."""
    caption = f"status: {status}" + (f" — {error}" if error else "")
    table = Table(title=title, caption=caption)
    table.add_column("")
    for s in summaries:
        table.add_column(s.stage, justify="right")
    for name, cells in summary_rows(summaries):
        table.add_row(name, *cells)
    return table


def train_step_table(title: str, status: str, error: str | None, summaries: list[TrainStepSummary]) -> Table:
    """One column per warm-up level, one row per figure; times are mean ± std over the measured steps."""
    table = Table(title=title, caption=f"status: {status}" + (f" — {error}" if error else ""))
    table.add_column("")
    for s in summaries:
        table.add_column(s.stage, justify="right")
    for name, cells in train_step_rows(summaries):
        table.add_row(name, *cells)
    if summaries:
        table.title = f"{title}\n{train_step_subject(summaries[0])}"
    return table


def kernel_table(title: str, status: str, error: str | None, results: list[KernelResult]) -> Table:
    table = Table(title=title, caption=f"status: {status}" + (f" — {error}" if error else "")
                  + "; TFLOP/s at the median time")
    for column in KERNEL_COLUMNS:
        table.add_column(column, justify="left" if column in ("kernel", "shape", "dtype", "implementation")
                         else "right")
    for row in kernel_rows(results):
        table.add_row(*row)
    return table


def timed_table(title: str, status: str, error: str | None, kind: str, summaries: list) -> Table:
    if kind == "kernel":
        return kernel_table(title, status, error, summaries)
    return train_step_table(title, status, error, summaries)


def print_summary(outcome: RunResult, console: Console | None = None) -> None:
    console = console or Console()
    title = run_title(outcome.spec, outcome.metadata)
    if outcome.spec.kind != "generate":
        table = timed_table(title, outcome.status, outcome.error, outcome.spec.kind, outcome.summaries())
    else:
        table = summary_table(title, outcome.status, outcome.error, outcome.summaries())
    console.print(table)
    for summary in outcome.summaries() if outcome.spec.kind == "generate" else []:
        for why in summary.invalid:  # the verdict row names the checks; here each one's figures
            console.print(f"{summary.stage}: invalid: {why.message}", highlight=False)
    if (found := outcome.capacity()) is not None:
        console.print(capacity_line(found), highlight=False)
    if outcome.parts is not None:
        gpus = Table(title="every GPU: the first stage, each against the median of its siblings")
        for column in GPU_COLUMNS:
            gpus.add_column(column, justify="left" if column in ("GPU", "status", "verdict") else "right")
        for row in gpu_rows(outcome.parts):
            gpus.add_row(*row)
        console.print(gpus)
    if outcome.metadata is not None and (line := stack_line(outcome.metadata)):
        console.print(line, highlight=False)
    if outcome.hardware is not None:
        console.print(hardware_line(outcome.hardware), highlight=False)
    server = (outcome.timeline or {}).get("server")
    if server is not None and server.get("warning"):
        console.print(f"warning: {server['warning']}", highlight=False)


# ---- comparisons -----------------------------------------------------------------------------------


def comparison_table(result: Comparison) -> Table:
    table = Table(title=f"A: {', '.join(result.a)}  →  B: {', '.join(result.b)}",
                  caption=f"significant at {result.confidence:.0%}, beyond ±{result.threshold:.0%}"
                  + (f"; INVALID runs: {', '.join(result.invalid)}" if result.invalid else "")
                  + (f"; {result.clock_states}" if result.clock_states else ""))
    for column in ("metric", "A", "B", "change", "interval", "verdict"):
        table.add_column(column, justify="left" if column in ("metric", "verdict") else "right")
    for m in result.metrics:
        unit = 1e3 if m.metric.split(".")[0] in LATENCIES else 1.0  # latencies in ms; output_tokens_per_s is not one
        fmt = (lambda v: "–" if v is None else f"{v * unit:.3f}")  # noqa: E731
        interval = "–" if m.ci_low is None else f"[{m.ci_low:+.1%}, {m.ci_high:+.1%}]"
        change = "–" if m.relative_change is None else f"{m.relative_change:+.1%}"
        name = m.metric.replace("_s.", " ms ") if unit == 1e3 else m.metric
        table.add_row(name, fmt(m.a), fmt(m.b), change, interval, m.verdict)
    if result.roofline_a and result.roofline_b:  # how far from the hardware (measure/roofline.py)
        for name in ("mbu", "mfu", "of_bound"):
            a, b = result.roofline_a[name], result.roofline_b[name]
            table.add_row(name if name != "of_bound" else "of roofline bound", f"{a:.1%}", f"{b:.1%}",
                          f"{b - a:+.1%} pts", "–", "–" if name != "of_bound" else
                          f"toward the {result.moved_toward} ceiling" if result.moved_toward else "no ceiling nearer")
    return table
