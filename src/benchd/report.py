"""A run's outputs: summary.json, requests.csv and the summary table."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchd.environment import RunMetadata
from benchd.records import LatencyStats, RequestRecord, StageSummary
from benchd.runner import RunOutcome
from benchd.sampler import HardwareSummary
from benchd.spec import RunSpec

CSV_COLUMNS = [
    "stage", "index", "request_id", "warmup", "prompt_tokens", "max_new_tokens", "output_tokens",
    "scheduled_s", "submitted_s", "admitted_s", "first_token_s", "last_token_s", "finished_s",
    "dispatch_lag_s", "queue_s", "ttft_s", "tpot_s", "e2e_s", "error", "trace_id", "token_times_s",
]


def _relative(t: float | None, origin: float) -> float | None:
    return None if t is None else t - origin


def request_row(stage: str, record: RequestRecord, origin: float) -> dict[str, object]:
    """One request, stamps relative to the stage's start (s); token_times_s repeats a stamp per token it carried."""
    stamps = record.arrival_s
    token_times = " ".join(
        f"{t - origin:.6f}" for t, n in zip(stamps, record.arrival_tokens) for _ in range(n)
    )
    return {
        "stage": stage,
        "index": record.index,
        "request_id": record.request_id,
        "warmup": int(record.warmup),
        "prompt_tokens": record.prompt_tokens,
        "max_new_tokens": record.max_new_tokens,
        "output_tokens": record.output_tokens,
        "scheduled_s": _relative(record.scheduled_s, origin),
        "submitted_s": _relative(record.submitted_s, origin),
        "admitted_s": _relative(record.admitted_s, origin),
        "first_token_s": _relative(stamps[0] if stamps else None, origin),
        "last_token_s": _relative(stamps[-1] if stamps else None, origin),
        "finished_s": _relative(record.finished_s, origin),
        "dispatch_lag_s": record.dispatch_lag_s,
        "queue_s": record.queue_s,
        "ttft_s": record.ttft_s,
        "tpot_s": record.tpot_s,
        "e2e_s": record.e2e_s,
        "error": record.error,
        "trace_id": record.trace_id,
        "token_times_s": token_times,
    }


def write_csv(rows, file) -> None:
    """None becomes an empty cell; floats keep full precision."""
    writer = csv.DictWriter(file, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    writer.writerows(rows)


def write_outputs(outcome: RunOutcome, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps(outcome.to_json(), indent=2) + "\n")
    rows = [request_row(stage.label, record, stage.start_s)
            for stage in outcome.stages for record in sorted(stage.records, key=lambda r: r.index)]
    with (out_dir / "requests.csv").open("w", newline="") as f:
        write_csv(rows, f)


def _ms(stats: LatencyStats, *keys: str) -> str:
    values = [getattr(stats, key) for key in keys]
    return " / ".join("–" if v is None else f"{v * 1e3:.2f}" for v in values)


def run_title(spec: RunSpec, metadata: RunMetadata | None) -> str:
    title = f"benchd · {spec.name} · {spec.model} · {spec.engine}"
    return title + (f" · {metadata.device_name}" if metadata is not None else "")


def summary_table(title: str, status: str, error: str | None, summaries: list[StageSummary]) -> Table:
    """One column per stage (load level), one row per figure."""
    caption = f"status: {status}" + (f" — {error}" if error else "")
    table = Table(title=title, caption=caption)
    table.add_column("")
    for s in summaries:
        table.add_column(s.stage, justify="right")
    rows: list[tuple[str, list[str]]] = [
        ("requests ok / failed / warm-up", [f"{s.requests} / {s.errors} / {s.warmup_requests}" for s in summaries]),
        ("output tok/s", [f"{s.output_tokens_per_s:.1f}" for s in summaries]),
        ("total tok/s", [f"{s.total_tokens_per_s:.1f}" for s in summaries]),
        ("requests/s", [f"{s.requests_per_s:.2f}" for s in summaries]),
        ("TTFT ms p50 / p90 / p99", [_ms(s.ttft_s, "p50", "p90", "p99") for s in summaries]),
        ("ITL ms p50 / p90 / p99", [_ms(s.itl_s, "p50", "p90", "p99") for s in summaries]),
        ("TPOT ms p50 / p90 / p99", [_ms(s.tpot_s, "p50", "p90", "p99") for s in summaries]),
        ("E2E ms p50 / p90 / p99", [_ms(s.e2e_s, "p50", "p90", "p99") for s in summaries]),
        ("queue ms p50 / p99", [_ms(s.queue_s, "p50", "p99") for s in summaries]),
        ("dispatch lag ms p99", [_ms(s.dispatch_lag_s, "p99") for s in summaries]),
        ("KV-cache peak", ["–" if s.kv_cache_occupancy_peak is None else f"{s.kv_cache_occupancy_peak:.0%}"
                           for s in summaries]),
    ]
    if any(s.goodput_requests_per_s is not None for s in summaries):
        rows.append(("goodput req/s (SLO met)", [
            "–" if s.goodput_requests_per_s is None else
            f"{s.goodput_requests_per_s:.2f} ({s.slo_attainment or 0:.0%})" for s in summaries
        ]))
    for name, cells in rows:
        table.add_row(name, *cells)
    return table


def hardware_line(hw: HardwareSummary) -> str:
    def pct(x: float | None) -> str:
        return "–" if x is None else f"{x:.0%}"

    parts = [f"CPU {pct(hw.cpu_utilization_mean)}"]
    if hw.gpus:
        memory = "–" if hw.gpu_memory_peak_bytes is None else f"{hw.gpu_memory_peak_bytes / 2**30:.2f} GiB"
        power = "–" if hw.power_mean_watts is None else f"{hw.power_mean_watts:.0f} W"
        energy = "–" if hw.energy_joules is None else f"{hw.energy_joules:.1f} J"
        per_token = ("–" if hw.energy_per_output_token_joules is None
                     else f"{hw.energy_per_output_token_joules * 1e3:.2f} mJ/token")
        parts = [f"GPU util {pct(hw.gpu_utilization_mean)} (max {pct(hw.gpu_utilization_max)})",
                 f"peak memory {memory}", f"power {power}", f"energy {energy} = {per_token}",
                 f"throttled {pct(hw.throttled_fraction)}", *parts]
    else:
        parts.append("no GPU gauges")
    return f"hardware ({hw.samples} samples over {hw.window_s:.1f} s): " + ", ".join(parts)


def print_summary(outcome: RunOutcome, console: Console | None = None) -> None:
    console = console or Console()
    table = summary_table(run_title(outcome.spec, outcome.metadata), outcome.status, outcome.error,
                          outcome.summaries())
    console.print(table)
    if outcome.hardware is not None:
        console.print(hardware_line(outcome.hardware), highlight=False)
