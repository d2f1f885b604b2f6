"""A run's outputs: summary.json, requests.csv and the summary table."""

from __future__ import annotations

import csv
import html
import json
from pathlib import Path

import numpy as np

from rich.console import Console
from rich.table import Table

from benchd.compare import Comparison, Side
from benchd.environment import RunMetadata
from benchd.outcome import RunResult
from benchd.records import LatencyStats, StageSummary
from benchd.sampler import HardwareSummary
from benchd.spec import RunSpec
from benchd.timings import CSV_COLUMNS as KERNEL_CSV_COLUMNS
from benchd.timings import KernelResult, TimingStats, TrainStepSummary

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
    """summary.json, and requests.csv (generation) or timings.csv (+ kernels.csv); the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps(outcome.to_json(), indent=2) + "\n")
    written = [out_dir / "summary.json"]
    if outcome.spec.kind != "generate":
        results = outcome.summaries()
        stages = [r.stage for r in results]
        with (out_dir / "timings.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=TIMING_COLUMNS)
            writer.writeheader()
            writer.writerows({"stage_index": t.stage_index, "series": t.series, "index": t.index,
                              "warmup": int(t.warmup), "seconds": t.seconds,
                              "stage": stages[t.stage_index] if t.stage_index < len(stages) else ""}
                             for t in outcome.timings)
        written.append(out_dir / "timings.csv")
        if outcome.spec.kind == "kernel":
            with (out_dir / "kernels.csv").open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=KERNEL_CSV_COLUMNS)
                writer.writeheader()
                writer.writerows(r.csv_row() for r in results)
            written.append(out_dir / "kernels.csv")
        return written
    rows = [record.to_row(stage.label, stage.start_s)
            for stage in outcome.stages for record in sorted(stage.records, key=lambda r: r.index)]
    with (out_dir / "requests.csv").open("w", newline="") as f:
        write_csv(rows, f)
    return [*written, out_dir / "requests.csv"]


def _ms(stats: LatencyStats, *keys: str) -> str:
    values = [getattr(stats, key) for key in keys]
    return " / ".join("–" if v is None else f"{v * 1e3:.2f}" for v in values)


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


def _gib(value: int | None) -> str:
    return "–" if value is None else f"{value / 2**30:.2f}"


def _mean_std_ms(stats: TimingStats) -> str:
    return "–" if stats.mean is None else f"{stats.mean * 1e3:.2f} ± {stats.std * 1e3:.2f}"


def train_step_table(title: str, status: str, error: str | None, summaries: list[TrainStepSummary]) -> Table:
    """One column per warm-up level, one row per figure; times are mean ± std over the measured steps."""
    table = Table(title=title, caption=f"status: {status}" + (f" — {error}" if error else ""))
    table.add_column("")
    for s in summaries:
        table.add_column(s.stage, justify="right")
    first = summaries[0] if summaries else None
    rows: list[tuple[str, list[str]]] = [
        ("measured steps", [str(s.steps) for s in summaries]),
        *[(f"{phase} ms", [_mean_std_ms(s.phases[phase]) if phase in s.phases else "–" for s in summaries])
          for phase in ("forward", "backward", "optimizer", "step")
          if any(phase in s.phases for s in summaries)],
        ("step ms min / median / max", [
            "–" if s.phases["step"].mean is None else
            " / ".join(f"{getattr(s.phases['step'], k) * 1e3:.2f}" for k in ("min", "median", "max"))
            for s in summaries]),
        ("tokens/s", ["–" if s.tokens_per_s is None else f"{s.tokens_per_s:,.0f}" for s in summaries]),
        ("TFLOP/s (model FLOPs)", ["–" if s.achieved_tflops is None else f"{s.achieved_tflops:.2f}"
                                   for s in summaries]),
        ("MFU", ["–" if s.mfu is None else f"{s.mfu:.1%} of {s.peak_tflops:g}" for s in summaries]),
        ("GiB weights / grads / AdamW", [f"{_gib(s.memory.parameters)} / {_gib(s.memory.gradients)} / "
                                         f"{_gib(s.memory.optimizer_states)}" for s in summaries]),
        ("GiB activations (est.) / total (est.)", [f"{_gib(s.memory.activations)} / {_gib(s.memory.total)}"
                                                   for s in summaries]),
        ("GiB peak allocated (measured)", [_gib(s.memory.peak_allocated) for s in summaries]),
    ]
    for name, cells in rows:
        table.add_row(name, *cells)
    if first is not None:
        table.title = (f"{title}\n{first.model}: {first.parameters:,} parameters, {first.mode}, batch "
                       f"{first.batch_size} × {first.context_length}, {first.dtype}"
                       + (f" (autocast {first.autocast})" if first.autocast else ""))
    return table


def kernel_table(title: str, status: str, error: str | None, results: list[KernelResult]) -> Table:
    table = Table(title=title, caption=f"status: {status}" + (f" — {error}" if error else "")
                  + "; TFLOP/s at the median time")
    for column in ("kernel", "shape", "dtype", "implementation", "median ms", "mean ± std ms", "min / max ms",
                   "TFLOP/s", "× reference"):
        table.add_column(column, justify="left" if column in ("kernel", "shape", "dtype", "implementation")
                         else "right")
    for r in results:
        t = r.timing
        if r.error is not None or t.median is None:
            table.add_row(r.kernel, r.shape, r.dtype, r.implementation, "–", "–", "–", "–", r.error or r.status)
            continue
        ratio = "–" if r.speedup_vs_reference is None else f"{r.speedup_vs_reference:.2f} (vs {r.reference})"
        table.add_row(r.kernel, r.shape, r.dtype, r.implementation, f"{t.median * 1e3:.4f}",
                      f"{t.mean * 1e3:.4f} ± {t.std * 1e3:.4f}", f"{t.min * 1e3:.4f} / {t.max * 1e3:.4f}",
                      "–" if r.tflops is None else f"{r.tflops:.2f}", ratio)
    return table


def timed_table(title: str, status: str, error: str | None, kind: str, summaries: list) -> Table:
    if kind == "kernel":
        return kernel_table(title, status, error, summaries)
    return train_step_table(title, status, error, summaries)


def parse_summaries(kind: str, stages: list[dict]) -> list:
    """A run's stored or streamed stage summaries as their models, by the spec's kind."""
    model = {"generate": StageSummary, "train_step": TrainStepSummary, "kernel": KernelResult}[kind]
    return [model.model_validate(s) for s in stages]


def print_summary(outcome: RunResult, console: Console | None = None) -> None:
    console = console or Console()
    title = run_title(outcome.spec, outcome.metadata)
    if outcome.spec.kind != "generate":
        table = timed_table(title, outcome.status, outcome.error, outcome.spec.kind, outcome.summaries())
    else:
        table = summary_table(title, outcome.status, outcome.error, outcome.summaries())
    console.print(table)
    if outcome.hardware is not None:
        console.print(hardware_line(outcome.hardware), highlight=False)


# ---- comparisons -----------------------------------------------------------------------------------


def comparison_table(result: Comparison) -> Table:
    table = Table(title=f"A: {', '.join(result.a)}  →  B: {', '.join(result.b)}",
                  caption=f"significant at {result.confidence:.0%}, beyond ±{result.threshold:.0%}")
    for column in ("metric", "A", "B", "change", "interval", "verdict"):
        table.add_column(column, justify="left" if column in ("metric", "verdict") else "right")
    for m in result.metrics:
        unit = 1e3 if m.metric.split(".")[0].endswith("_s") else 1.0
        fmt = (lambda v: "–" if v is None else f"{v * unit:.3f}")  # noqa: E731
        interval = "–" if m.ci_low is None else f"[{m.ci_low:+.1%}, {m.ci_high:+.1%}]"
        change = "–" if m.relative_change is None else f"{m.relative_change:+.1%}"
        name = m.metric.replace("_s.", " ms ") if unit == 1e3 else m.metric
        table.add_row(name, fmt(m.a), fmt(m.b), change, interval, m.verdict)
    return table


def _histogram_svg(a: list[float], b: list[float], title: str, width: int = 420, height: int = 160) -> str:
    """A and B's distributions on shared bins (values in ms), drawn side by side within each bin."""
    values = np.asarray(a + b, dtype=np.float64) * 1e3
    if not len(values):
        return ""
    low, high = np.percentile(values, 0.5), np.percentile(values, 99.5)
    edges = np.linspace(low, high if high > low else low + 1, 31)
    ca, _ = np.histogram(np.asarray(a) * 1e3, edges)
    cb, _ = np.histogram(np.asarray(b) * 1e3, edges)
    ca, cb = ca / max(1, len(a)), cb / max(1, len(b))
    peak = max(ca.max(initial=0), cb.max(initial=0)) or 1
    bar = width / len(ca) / 2
    bars = []
    for i, (fa, fb) in enumerate(zip(ca, cb)):
        for j, (f, color) in enumerate(((fa, "#4477aa"), (fb, "#ee6677"))):
            h = f / peak * (height - 30)
            bars.append(f'<rect x="{(2 * i + j) * bar:.1f}" y="{height - 20 - h:.1f}" width="{bar:.1f}" '
                        f'height="{h:.1f}" fill="{color}"/>')
    return (f'<figure><figcaption>{html.escape(title)} (ms; A blue, B red)</figcaption>'
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">{"".join(bars)}'
            f'<text x="0" y="{height - 4}" font-size="11">{edges[0]:.2f}</text>'
            f'<text x="{width - 40}" y="{height - 4}" font-size="11">{edges[-1]:.2f}</text></svg></figure>')


def comparison_html(result: Comparison, a: Side, b: Side) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(m.metric)}</td><td>{'' if m.a is None else f'{m.a:.6g}'}</td>"
        f"<td>{'' if m.b is None else f'{m.b:.6g}'}</td>"
        f"<td>{'' if m.relative_change is None else f'{m.relative_change:+.1%}'}</td>"
        f"<td>{'' if m.ci_low is None else f'[{m.ci_low:+.1%}, {m.ci_high:+.1%}]'}</td>"
        f"<td class='{m.verdict.replace(' ', '-')}'>{html.escape(m.verdict)}</td></tr>"
        for m in result.metrics)
    def pooled(side: Side, name: str) -> list[float]:
        return [x for run in side.samples.get(name, []) for x in run]

    figures = "".join(_histogram_svg(pooled(a, name), pooled(b, name), name)
                      for name in ("ttft_s", "itl_s", "tpot_s", "e2e_s"))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>benchd comparison</title><style>
body{{font-family:sans-serif;margin:2em}} td,th{{padding:2px 10px;text-align:right}} td:first-child{{text-align:left}}
.slower{{color:#b00;font-weight:bold}} .faster{{color:#070;font-weight:bold}} figure{{display:inline-block}}
</style></head><body><h1>benchd comparison</h1>
<p>A: {html.escape(', '.join(result.a))}<br>B: {html.escape(', '.join(result.b))}<br>
Bootstrap intervals at {result.confidence:.0%}; a change must also exceed ±{result.threshold:.0%}.</p>
<table><tr><th>metric</th><th>A</th><th>B</th><th>change</th><th>interval</th><th>verdict</th></tr>{rows}</table>
{figures}</body></html>"""
