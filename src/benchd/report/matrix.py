"""A matrix's HTML page: its variants side by side against the baseline, every metric's interval and verdict, the
latency distributions per variant, and each run's throughput in execution order."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from benchd.measure.compare import LATENCIES
from benchd.measure.matrix import MatrixComparison, VariantComparison
from benchd.measure.records import RequestRecord
from benchd.report import charts
from benchd.report.charts import Line
from benchd.report.pages import _charts, _esc, _section, _shell, _table

BYTES = ("weight_bytes", "peak_memory_bytes")


def gib(value: float | None) -> str:
    return "–" if value is None else f"{value / 2**30:.3g} GiB" if value >= 2**26 else f"{value / 2**20:.3g} MiB"


def verdict_word(metric: str, verdict: str) -> str:
    """compare's verdicts speak of speed; a byte count is larger or smaller."""
    if metric in BYTES:
        return {"slower": "larger", "faster": "smaller"}.get(verdict, verdict)
    return verdict


def figure(metric: str, value: float | None) -> str:
    if value is None:
        return "–"
    if metric in BYTES:
        return gib(value)
    if metric.split(".")[0] in LATENCIES:
        return charts.seconds(value)
    return f"{value:,.1f}" if metric == "output_tokens_per_s" else f"{value:.4g}"


def _change(v: VariantComparison, metric: str) -> str:
    found = next((m for m in v.metrics if m.metric == metric), None)
    if found is None or found.relative_change is None:
        return ""
    interval = "" if found.ci_low is None else f" [{found.ci_low:+.1%}, {found.ci_high:+.1%}]"
    return f" ({found.relative_change:+.1%}{interval} {verdict_word(metric, found.verdict)})"


def summary_rows(comparison: MatrixComparison) -> list[list[str]]:
    """One row per variant: its figures, and their change against the baseline with the interval and verdict."""
    rows = []
    for v in comparison.variants:
        tokens = ("baseline" if v.baseline else "–" if v.tokens is None or v.tokens.ratio is None
                  else f"{v.tokens.ratio:.1%} ({v.tokens.identical_requests}/{v.tokens.requests} requests)")
        rows.append([
            f"{v.index}{' (baseline)' if v.baseline else ''}", v.label + resolved(v),
            f"{sum(s == 'succeeded' for s in v.statuses)}/{len(v.statuses)}", verdict(v),
            figure("output_tokens_per_s", v.output_tokens_per_s) + _change(v, "output_tokens_per_s"),
            figure("ttft_s", v.ttft_p50_s) + _change(v, "ttft_s.p50"),
            figure("itl_s", v.itl_p50_s) + _change(v, "itl_s.p50"),
            figure("tpot_s", v.tpot_p50_s) + _change(v, "tpot_s.p50"),
            gib(v.weight_bytes) + _change(v, "weight_bytes"),
            gib(v.peak_memory_bytes) + _change(v, "peak_memory_bytes"),
            tokens,
            str(v.stack.get("attn_implementation") or "–"),
            f"{v.stack.get('quantized_layers') or 0} layers" if v.stack.get("quantization") not in (None, "none")
            else "–",
            "–" if v.model_load_s is None else f"{v.model_load_s:.2f}",
            roofline_cell(v),
        ])
    return rows


def resolved(v: VariantComparison) -> str:
    """What a variant over environments (or requirements) resolved to, its runs' stack: the versions a release A/B
    compares."""
    if not {"environment", "requirements"} & set(v.values):
        return ""
    names = (("python", "python_version"), ("torch", "torch_version"), ("transformers", "transformers_version"),
             ("CUDA", "cuda_version"))
    found = [f"{name} {v.stack[key]}" for name, key in names if v.stack.get(key)]
    return f" ({', '.join(found)})" if found else ""


def roofline_cell(v: VariantComparison) -> str:
    """Its MBU and MFU, the fraction of its roofline bound, and the ceiling it moved toward from the baseline."""
    if v.roofline is None:
        return "–"
    line = v.roofline
    toward = f"; toward {v.moved_toward}" if v.moved_toward else ""
    return f"{line['mbu']:.1%} / {line['mfu']:.1%} ({line['of_bound']:.1%}{toward})"


def verdict(v: VariantComparison) -> str:
    """Its runs' verdicts: an over-saturated one is named, since its latencies measure a growing queue; and whether
    it ran under other clock states than the baseline (its change may be the GPU's)."""
    clocks = "; other clock states than the baseline" if v.clock_states else ""
    if v.oversaturated:
        return f"OVERSATURATED ({len(v.oversaturated)}/{len(v.run_ids)} runs){clocks}"
    return (f"INVALID ({len(v.invalid)}/{len(v.run_ids)} runs)" if v.invalid else "valid") + clocks


SUMMARY_HEAD = ("variant", "values", "runs ok", "verdict", "output tok/s", "TTFT p50", "ITL p50", "TPOT p50", "weights",
                "peak memory", "greedy tokens = baseline", "attention", "quantized", "load s", "MBU / MFU (of bound)")


def matrix_page(row: dict, records: dict[str, Sequence[RequestRecord]]) -> str:
    """row: the matrix as stored (store.get_matrix, or the CLI's outcome in that form); records: each run's first
    stage's records, by run id."""
    comparison = MatrixComparison.model_validate(row["comparison"]) if row.get("comparison") else None
    variants = row["variants"]
    document = row.get("document") or {}
    status = row.get("status", "unknown")
    title = f"{document.get('name', variants[0]['spec'].get('name', 'matrix'))} · {len(variants)} variants"
    meta = (f'<span class="pill {_esc(status)}">{_esc(status)}</span> matrix {_esc(row.get("id") or "–")} · '
            f'{document.get("repeats", 1)} rounds, every variant once a round · baseline: variant {row["baseline"]}')
    if row.get("error"):
        meta += f'<br><span class="error">{_esc(row["error"])}</span>'
    sections = []
    if comparison is None:
        sections.append(_section("Variants", '<p class="note">not compared yet: the comparison is made once every '
                                             'run has ended</p>', _table(("variant", "values"), [
                                                 [v["index"], v["label"]] for v in variants], 2), anchor="summary"))
    else:
        about = (f"changes against the baseline with their bootstrap intervals at {comparison.confidence:.0%}; a "
                 f"verdict needs a change beyond ±{comparison.threshold:.0%}")
        saturated = [f'<p class="note error">variant {_esc(v.index)} ({_esc(v.label)}): completions fell behind '
                     f'the offers in {len(v.oversaturated)} of its {len(v.run_ids)} runs: its latencies measure a '
                     'growing queue, and their change against the baseline says how long it grew</p>'
                     for v in comparison.variants if v.oversaturated]
        saturated += [f'<p class="note error">variant {_esc(v.index)} ({_esc(v.label)}): {_esc(v.clock_states)}</p>'
                      for v in comparison.variants if v.clock_states]
        sections.append(_section("Variants", _table(SUMMARY_HEAD, summary_rows(comparison), 2), *saturated,
                                 anchor="summary", about=about))
        sections.append(_section("Every metric", *[_metrics(v) for v in comparison.variants if not v.baseline],
                                 anchor="metrics", about="each variant against the baseline"))
    good: dict[int, list[RequestRecord]] = {v["index"]: [] for v in variants}
    for run in row["runs"]:
        good[run["variant"]].extend(r for r in records.get(run["run_id"], ()) if not r.warmup and r.ok)
    labels = {v["index"]: f"{v['index']}: {v['label']}" for v in variants}
    latency = [charts.cdf("ttft", "Time to first token", [(labels[i], [r.ttft_s for r in rs]) for i, rs in good.items()]),
               charts.cdf("itl", "Inter-token latency (per token)",
                          [(labels[i], np.asarray([g for r in rs for g in r.itl_s()])) for i, rs in good.items()])]
    sections.append(_section("Latency", _charts(*latency), anchor="latency",
                             about="cumulative distributions, each variant's runs pooled"))
    sections.append(_section("Runs", _runs(row, records, labels), anchor="runs",
                             about="each run's output throughput in the order the runs executed"))
    stack = [[labels[v["index"]], json.dumps(v["values"]), _esc_stack(comparison, v["index"])] for v in variants]
    spec = f"<details><summary>document</summary><pre>{_esc(json.dumps(document, indent=2))}</pre></details>"
    sections.append(_section("Stack", _table(("variant", "values", "in effect"), stack, 3), spec, anchor="stack"))
    return _shell(f"benchd · matrix · {title}", f"benchd · matrix · {_esc(title)}", meta, sections)


def _esc_stack(comparison: MatrixComparison | None, index: int) -> str:
    if comparison is None:
        return ""
    stack = next((v.stack for v in comparison.variants if v.index == index), {})
    return ", ".join(f"{k}: {v}" for k, v in stack.items() if v is not None)


def _metrics(v: VariantComparison) -> str:
    rows = [[m.metric, figure(m.metric, m.a), figure(m.metric, m.b),
             "–" if m.relative_change is None else f"{m.relative_change:+.1%}",
             "–" if m.ci_low is None else f"[{m.ci_low:+.1%}, {m.ci_high:+.1%}]",
             verdict_word(m.metric, m.verdict)] for m in v.metrics]
    return f"<p><b>{_esc(v.index)}: {_esc(v.label)}</b></p>" + _table(
        ("metric", "baseline", "variant", "change", "interval", "verdict"), rows, 1)


def _runs(row: dict, records: dict[str, Sequence[RequestRecord]], labels: dict[int, str]) -> str:
    """Throughput per run from its measured token stamps, at its place in the execution order."""
    series: dict[int, tuple[list[float], list[float]]] = {i: ([], []) for i in labels}
    for position, run in enumerate(row["runs"]):
        measured = [r for r in records.get(run["run_id"], ()) if not r.warmup and r.ok]
        if not measured:
            continue
        start = min(r.scheduled_s for r in measured)
        end = max(r.arrival_s[-1] for r in measured)
        tokens = sum(r.output_tokens for r in measured)
        if end > start:
            series[run["variant"]][0].append(position + 1)
            series[run["variant"]][1].append(tokens / (end - start))
    lines = [Line(labels[i], t, v) for i, (t, v) in series.items() if t]
    return _charts(charts.lines("runs", "Output tokens per second, run by run", lines, charts.number,
                                x_label="run, in execution order", fx=lambda x: f"{x:g}", markers=True))
