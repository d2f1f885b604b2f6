"""HTML pages: a run's report and a comparison of runs, self-contained (inline CSS and SVG, nothing fetched)."""

from __future__ import annotations

import html
import json
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from benchd.hardware.sampler import HardwareSummary
from benchd.measure.compare import LATENCIES, Comparison, Side
from benchd.measure.records import RequestRecord
from benchd.report import charts
from benchd.report.charts import Band, Line, Span
from benchd.report.tables import (
    GPU_COLUMNS,
    KERNEL_COLUMNS,
    gpu_rows,
    hardware_line,
    kernel_rows,
    parse_summaries,
    summary_rows,
    train_step_rows,
    train_step_subject,
)

STYLE = """
:root{--fg:#1d2433;--muted:#5b6475;--line:#e3e6ec}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);
background:#f4f5f8}
header{background:#1d2433;color:#fff;padding:16px 28px}
header h1{margin:0;font-size:20px;font-weight:600}
header .meta{color:#c5cbd6;margin-top:4px;font-size:13px} nav{margin-top:6px}
nav a{color:#9fc3ff;text-decoration:none}
main{max-width:1240px;margin:0 auto;padding:4px 24px 40px}
section{background:#fff;border:1px solid var(--line);border-radius:8px;padding:14px 18px;margin:16px 0}
h2{font-size:15px;margin:0 0 10px;display:inline-block} .about{color:var(--muted);font-size:12px;margin-left:8px}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(480px,1fr));gap:18px 24px}
figure{margin:0} figcaption{font-size:13px;margin-bottom:2px;display:flex;flex-wrap:wrap;gap:2px 12px;
align-items:baseline} figcaption b{margin-right:6px}
.key{color:var(--muted);font-size:12px} .key i{display:inline-block;width:10px;height:10px;border-radius:2px;
margin-right:4px;vertical-align:-1px}
svg.plot{width:100%;height:auto;display:block;overflow:visible}
.gridline{stroke:#eceef2} .axis{stroke:#9aa1ad}
.tick,.label,.guide-label,.band-label{fill:var(--muted);font-size:11px}
.guide-label{font-size:10px} .line,.bar{fill:none} .line{stroke-width:1.8;stroke-linejoin:round}
.band{fill:#f6f7fa} .band.alt{fill:#eaeef5} .guide{stroke:#c8ccd4;stroke-dasharray:3 3}
.note{color:var(--muted);font-size:12px;margin:4px 0 0} .empty .note{padding:24px 0;text-align:center}
table{border-collapse:collapse;font-variant-numeric:tabular-nums;font-size:13px}
th,td{padding:4px 12px;border-bottom:1px solid var(--line);text-align:right;vertical-align:top}
th{font-weight:600;background:#f6f7fa}
th:first-child,td:first-child{text-align:left;color:var(--muted);white-space:nowrap}
td.text{text-align:left;color:inherit} .wide{overflow-x:auto}
.pill{display:inline-block;padding:0 9px;border-radius:10px;font-size:12px;font-weight:600;background:#dde3ee;
color:#1d2433} .pill.succeeded{background:#cdeed6;color:#17602a} .pill.failed{background:#f9d3cd;color:#9b2317}
.error{color:#9b2317} .slower{color:#b00;font-weight:600} .faster{color:#070;font-weight:600}
details pre{background:#f6f7fa;padding:10px;border-radius:6px;overflow-x:auto;font-size:12px}
"""


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _shell(title: str, heading: str, meta: str, sections: Sequence[str]) -> str:
    """The page around its sections, with a link to each section that has an id."""
    anchors = re.findall(r"<section id=(\w+)><h2>([^<]*)</h2>", "".join(sections))
    links = " · ".join(f'<a href="#{a}">{t}</a>' for a, t in anchors)
    meta += f'<nav>{links}</nav>' if links else ""
    return ('<!doctype html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f'<link rel="icon" href="data:,"><title>{_esc(title)}</title><style>{STYLE}</style></head><body>'
            f'<header><h1>{heading}</h1><div class="meta">{meta}</div></header><main>{"".join(sections)}</main>'
            '</body></html>')


def _section(title: str, *parts: str, anchor: str = "", about: str = "") -> str:
    about = f' <span class="about">{_esc(about)}</span>' if about else ""
    return f'<section{f" id={anchor}" if anchor else ""}><h2>{_esc(title)}</h2>{about}{"".join(parts)}</section>'


def _table(head: Sequence[str], rows: Sequence[Sequence[object]], text_columns: int = 1) -> str:
    """Cells past the first text_columns are figures (right-aligned)."""
    th = f'<tr>{"".join(f"<th>{_esc(h)}</th>" for h in head)}</tr>' if any(head) else ""
    body = "".join("<tr>" + "".join(f'<td{" class=text" if 0 < i < text_columns else ""}>{_esc(c)}</td>'
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f'<div class="wide"><table>{th}{body}</table></div>'


def _charts(*figures: str) -> str:
    return f'<div class="charts">{"".join(figures)}</div>'


# ---- a run ---------------------------------------------------------------------------------------


@dataclass
class _Stage:
    index: int
    label: str
    start_s: float  # on the run's axis
    end_s: float
    records: list[RequestRecord] = field(default_factory=list)


def run_page(run: dict, rows: list[dict]) -> str:
    """A run's report. run: as stored (store.get_run), or summary.json's keys (`metadata`, `stages`) with its
    `timeline`; rows: its request rows (a generation run) or its timing rows (a training-step or kernel run)."""
    spec = run.get("spec") or {}
    kind = spec.get("kind", "generate")
    metadata = run.get("run_metadata") or run.get("metadata") or {}
    summaries = parse_summaries(kind, run.get("summary") or run.get("stages") or [])
    hardware = HardwareSummary.model_validate(run["hardware"]) if run.get("hardware") else None
    status = run.get("status", "unknown")
    subject = (spec.get("kernel") or {}).get("op") if kind == "kernel" else spec.get("model", "")
    runner = spec.get("engine", "transformers") if kind == "generate" else kind
    title = f"{spec.get('name', 'run')} · {subject} · {runner}"
    meta = " · ".join(_esc(x) for x in (
        f"run {run.get('id') or metadata.get('run_id') or '–'}", metadata.get("device_name") or "device unknown",
        f"started {metadata.get('started_at') or run.get('started_at') or '–'}") if x)
    meta = f'<span class="pill {_esc(status)}">{_esc(status)}</span> {meta}'
    error = run.get("error")
    top = [_esc(hardware_line(hardware)) if hardware else "no hardware summary"]
    if error:
        top.insert(0, f'<span class="error">{_esc(error)}</span>')
    summary = "".join(f'<p class="note">{line}</p>' for line in top)
    if kind == "generate":
        missing = ("the run has not ended: its timeline is stored when it does" if status in ("queued", "running")
                   else "no timeline stored with this run")
        sections = _generation(summaries, run.get("timeline"), rows, summary, missing)
        if run.get("parts"):
            sections.insert(1, _section("GPUs", _table(GPU_COLUMNS, gpu_rows(run["parts"]), text_columns=2),
                                        anchor="gpus", about="every GPU at once: the first stage, each against the "
                                                              "median of its siblings"))
    else:
        sections = _timed(kind, summaries, rows, summary)
    sections.append(_stack(run, metadata, hardware, spec))
    return _shell(f"benchd · {title}", f"benchd · {_esc(title)}", meta, sections)


def _generation(summaries: list, timeline: dict | None, rows: list[dict], summary: str, missing: str) -> list[str]:
    """missing: what the panels that need the timeline say when there is none."""
    stages, placed = _stages(rows, timeline)
    # A stage whose completions fell behind its offers is marked on every chart over the run.
    saturated = {i for i, s in enumerate(summaries) if any(x.check == "oversaturated" for x in s.invalid)}
    bands: list[Band] = [(s.start_s, s.end_s, s.label + (" · OVERSATURATED" if s.index in saturated else ""))
                         for s in stages]
    head = [""] + [s.stage for s in summaries]
    why = "".join(f'<p class="note error">{_esc(s.stage)}: invalid: {_esc(x.message)}</p>'
                  for s in summaries for x in s.invalid)
    out = [_section("Summary", _table(head, [[n, *c] for n, c in summary_rows(summaries)]), why, summary,
                    anchor="summary")]
    if lines := [(s.stage, s.roofline) for s in summaries if s.roofline]:
        out.append(_section("How far from the hardware", charts.roofline(
            "roofline", "Achieved FLOP/s against arithmetic intensity",
            [(label, line["intensity"], line["achieved_flops_per_s"]) for label, line in lines],
            lines[0][1]["peak_bytes_per_s"], lines[0][1]["peak_flops_per_s"]), anchor="roofline",
            about="each stage's steps under the device's measured ceilings (docs/figures.md)"))
    good = [(s.label, [r for r in s.records if not r.warmup and r.ok]) for s in stages]
    out.append(_section(
        "Latency",
        _charts(charts.cdf("ttft", "Time to first token", [(k, [r.ttft_s for r in g]) for k, g in good]),
                charts.cdf("itl", "Inter-token latency (per token)",
                           [(k, _itl(g)) for k, g in good]),
                charts.cdf("tpot", "Time per output token (per request)",
                           [(k, [t for r in g if (t := r.tpot_s) is not None]) for k, g in good]),
                charts.cdf("e2e", "End-to-end latency", [(k, [r.e2e_s for r in g]) for k, g in good])),
        anchor="latency", about="cumulative distributions over the measured requests that succeeded"))
    spans = [_span(s, r) for s in stages for r in s.records]
    out.append(_section("Requests", charts.timeline(
        "requests", "Each request from its scheduled time (one row each, in that order)", spans, bands,
        None if placed else f"{missing}: stages drawn back to back"), anchor="requests"))
    out.append(_section("Engine load", _load(stages, timeline, bands, missing), anchor="load", about="over the run"))
    out.append(_section("Hardware", _hardware(timeline, bands, missing), anchor="hardware",
                        about="over the run, from the daemon's hardware sampler"))
    if (timeline or {}).get("server") is not None:
        server = timeline["server"]
        totals = [f"{label}: {fmt(v)}" for label, v, fmt in (
            ("preemptions in the run", server.get("preemptions_total"), charts.number),
            ("prefix-cache hit rate over the run", server.get("prefix_cache_hit_rate_run"), charts.percent))
            if v is not None]
        out.append(_section("Server", _server(server, bands), anchor="server",
                            about="; ".join([f"{server.get('server') or 'unknown server'}, by its own metrics at "
                                             f"{server['url']}, read every {server['interval_s']:g} s", *totals])))
    return out


def _server(server: dict, bands: list[Band]) -> str:
    """An openai run's server as its Prometheus page told it (server_scrape): requests, KV cache, prefix cache."""
    t, warning, name = server["t"], server.get("warning"), server.get("server") or "the server"

    def note(key: str) -> str | None:
        return warning or (None if any(v is not None for v in server[key]) else f"{name} exports no such figure")

    return _charts(
        charts.lines("server-requests", "Requests in the server", [
            Line("running", t, server["requests_running"]), Line("waiting", t, server["requests_waiting"])],
            charts.number, bands, note=note("requests_running")),
        charts.lines("server-kv-cache", "Server KV-cache usage", [Line("usage", t, server["kv_cache_usage"])],
                     charts.percent, bands, y_max=1.0, note=note("kv_cache_usage")),
        charts.lines("server-prefix-cache", "Prefix-cache hit rate (per interval)",
                     [Line("hit rate", t, server["prefix_cache_hit_rate"])], charts.percent, bands, y_max=1.0,
                     note=note("prefix_cache_hit_rate")),
        charts.lines("server-preemptions", "Preemptions since the run began",
                     [Line("preemptions", t, server["preemptions"])], charts.number, bands,
                     note=note("preemptions")))


def _itl(records: list[RequestRecord]) -> np.ndarray:
    gaps = [np.asarray(r.itl_s()) for r in records]
    return np.concatenate(gaps) if gaps else np.empty(0)


def _stages(rows: list[dict], timeline: dict | None) -> tuple[list[_Stage], bool]:
    """The stages with their requests, placed on the run's axis by the timeline (else back to back); whether the
    timeline placed them."""
    grouped: dict[int, list[dict]] = defaultdict(list)
    labels: dict[str, int] = {}
    for row in rows:  # rows written before stage_index was kept carry their stage's label only
        index = row.get("stage_index")
        grouped[labels.setdefault(row["stage"], len(labels)) if index is None else index].append(row)
    known = {s["index"]: s for s in (timeline or {}).get("stages", [])}
    stages, cursor = [], 0.0
    for index in sorted(set(grouped) | set(known)):
        records = [RequestRecord.from_row(r) for r in grouped.get(index, [])]
        last = max((t for r in records for t in (r.finished_s, *r.arrival_s[-1:]) if t is not None), default=0.0)
        span = known.get(index)
        start = span["start_s"] if span else cursor
        end = span["end_s"] if span and span.get("end_s") is not None else start + last
        label = span["label"] if span else (grouped[index][0]["stage"] or f"stage {index}")
        stages.append(_Stage(index, label, start, max(end, start), records))
        cursor = max(end, start)
    return stages, bool(known) or not stages


def _span(stage: _Stage, r: RequestRecord) -> Span:
    def at(t: float | None) -> float | None:
        return None if t is None else stage.start_s + t

    state = "warm-up" if r.warmup else "measured" if r.ok else "failed"
    return Span(at(r.scheduled_s), at(r.admitted_s), at(r.arrival_s[0] if r.arrival_s else None),
                at(r.arrival_s[-1] if r.arrival_s else None), at(r.finished_s), state)


def _load(stages: list[_Stage], timeline: dict | None, bands: list[Band], missing: str) -> str:
    """Throughput from the token stamps (binned) and as the engine reported it; requests in flight; KV cache."""
    stamps, tokens = [], []
    for s in stages:
        for r in s.records:
            if not r.warmup and r.arrival_s:
                stamps.append(s.start_s + np.asarray(r.arrival_s))
                tokens.append(np.asarray(r.arrival_tokens))
    throughput = []
    if stamps:
        t, w = np.concatenate(stamps), np.concatenate(tokens)
        width = max(0.1, charts.nice_step((t.max() - t.min()) / 120))  # s; about 120 bins, none under 100 ms
        edges = np.arange(np.floor(t.min() / width) * width, t.max() + width, width)
        counts, _ = np.histogram(t, edges, weights=w)
        throughput.append(Line(f"from token stamps, {width:g} s bins",
                               (edges[:-1] + width / 2).tolist(), (counts / width).tolist()))
    load = (timeline or {}).get("load") or {}
    note = None if timeline else f"{missing}: no engine load samples"
    if load.get("t"):
        throughput.append(Line("stage average so far", load["t"], load["output_tokens_per_s"], dashed=True))
    return _charts(
        charts.lines("throughput", "Output throughput (measured requests)", throughput, charts.number, bands,
                     note=note),
        charts.lines("in-flight", "Requests in the engine", [
            Line("running", load.get("t", []), load.get("running", [])),
            Line("waiting", load.get("t", []), load.get("waiting", []))], charts.number, bands,
            note=note or "sampled every 100 ms"),
        charts.lines("kv-cache", "KV-cache occupancy (used / total blocks)",
                     [Line("occupancy", load.get("t", []), load.get("kv_usage", []))], charts.percent, bands,
                     y_max=1.0, note=note or (None if any(v is not None for v in load.get("kv_usage", []))
                                              else "this engine has no paged cache to read")))


def _hardware(timeline: dict | None, bands: list[Band], missing: str) -> str:
    """GPU utilization (and the host's CPU), power and memory, one line per GPU (NVML index)."""
    samples = (timeline or {}).get("hardware") or {}
    t, gpus = samples.get("t", []), sorted(samples.get("gpus", {}).items())
    if timeline is None:
        note = cpu_note = f"{missing}: no hardware samples"
    else:
        note = None if gpus else "no GPU samples: no NVML on this host, or no GPU"
        cpu_note = note and note + "; the host's CPU only"
    utilization = [Line(f"GPU {g}", t, s["utilization"]) for g, s in gpus]
    utilization.append(Line("CPU (host)", t, samples.get("cpu_utilization", []), color="#777777", dashed=True))
    memory = [Line(f"GPU {g}", t, [None if v is None else v / 2**30 for v in s["memory_used_bytes"]]) for g, s in gpus]
    return _charts(
        charts.lines("gpu-utilization", "Utilization", utilization, charts.percent, bands, y_max=1.0, note=cpu_note),
        charts.lines("gpu-power", "GPU power", [Line(f"GPU {g}", t, s["power_watts"]) for g, s in gpus],
                     charts.unit("W"), bands, note=note),
        charts.lines("gpu-memory", "GPU memory used", memory, charts.unit("GiB"), bands, note=note))


def _stack(run: dict, metadata: dict, hardware: HardwareSummary | None, spec: dict) -> str:
    m = metadata
    rows = [(k, v) for k, v in (
        ("benchd", m.get("benchd_version")), ("environment", m.get("environment")), ("Python", m.get("python_version")),
        ("torch", m.get("torch_version")), ("transformers", m.get("transformers_version")),
        ("CUDA", m.get("cuda_version")), ("NVIDIA driver", m.get("driver_version")), ("device", m.get("device")),
        ("device name", m.get("device_name")), ("torch threads", m.get("torch_threads")),
        ("host", m.get("host") or run.get("node")), ("pod", run.get("pod")), ("model", m.get("model")),
        ("attention", m.get("attn_implementation")), ("attention kernel", m.get("attention_kernel")),
        ("quantization", m.get("quantization") if m.get("quantization") != "none" else None),
        ("model load s", m.get("model_load_s") and f"{m['model_load_s']:.2f}"),
        ("label", m.get("label") or run.get("label")), ("schedule", run.get("schedule")),
        ("commit", " ".join(str(v) for v in (m.get("commit") or {}).values() if v) or None),
        ("started", m.get("started_at")), ("finished", m.get("finished_at")), ("trace id", m.get("trace_id")),
    ) if v is not None]
    rows += [(f"GPU {g.gpu}", f"{g.name} ({g.uuid})") for g in (hardware.gpus if hardware else [])]
    if m.get("engine_settings"):
        rows += [(f"engine: {k}", json.dumps(v) if isinstance(v, (dict, list)) else v)
                 for k, v in m["engine_settings"].items()]
    table = (_table(("", ""), rows, text_columns=2) if rows
             else '<p class="note">no stack recorded: the run did not start</p>')
    spec_text = f"<details><summary>spec</summary><pre>{_esc(json.dumps(spec, indent=2))}</pre></details>"
    return _section("Stack", table, spec_text, anchor="stack", about="what the run measured: versions, device, host")


# ---- timed runs ----------------------------------------------------------------------------------


def _timed(kind: str, summaries: list, rows: list[dict], summary: str) -> list[str]:
    if kind == "kernel":
        table = _table(KERNEL_COLUMNS, kernel_rows(summaries), text_columns=4)
        caption = "TFLOP/s at the median time"
    else:
        table = _table([""] + [s.stage for s in summaries], [[n, *c] for n, c in train_step_rows(summaries)])
        caption = train_step_subject(summaries[0]) if summaries else ""
    out = [_section("Summary", f'<p class="note">{_esc(caption)}</p>' if caption else "", table, summary,
                    anchor="summary")]
    # A chart per training-step stage (its phases), or per kernel shape (its implementations).
    groups: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        stage = summaries[row["stage_index"]] if row["stage_index"] < len(summaries) else None
        if stage is None:
            group = f"stage {row['stage_index']}"
        else:
            group = stage.shape if kind == "kernel" else stage.stage
        groups[group][row["series"]].append(row)
    figures = []
    for group, series in groups.items():
        warm = [r["index"] for rs in series.values() for r in rs if r["warmup"]]
        measured = [r["index"] for rs in series.values() for r in rs if not r["warmup"]]
        bands = [(min(warm) - 0.5, max(warm) + 0.5, "warm-up")] if warm else []
        if measured:
            bands.append((min(measured) - 0.5, max(measured) + 0.5, "measured"))
        lines = [Line(name, [r["index"] for r in rs], [r["seconds"] for r in rs]) for name, rs in series.items()]
        figures.append(charts.lines(f"timings-{group}", f"{group}: every repetition", lines, charts.seconds, bands,
                                    x_label="repetition", fx=lambda v: f"{v:g}", markers=True, log_y=None))
    out.append(_section("Timings", _charts(*figures) if figures else '<p class="note">no timings recorded</p>',
                        anchor="timings"))
    return out


# ---- comparisons ---------------------------------------------------------------------------------


def comparison_page(result: Comparison, a: Side, b: Side) -> str:
    """B against A: the table of changes with their intervals, and each latency's distributions side by side."""
    def value(metric: str, v: float | None) -> str:
        if v is None:
            return ""
        return charts.seconds(v) if metric.split(".")[0] in LATENCIES else f"{v:.6g}"

    rows = "".join(
        f"<tr><td>{_esc(m.metric)}</td><td>{value(m.metric, m.a)}</td><td>{value(m.metric, m.b)}</td>"
        f"<td>{'' if m.relative_change is None else f'{m.relative_change:+.1%}'}</td>"
        f"<td>{'' if m.ci_low is None else f'[{m.ci_low:+.1%}, {m.ci_high:+.1%}]'}</td>"
        f'<td class="text {m.verdict.replace(" ", "-")}">{_esc(m.verdict)}</td></tr>'
        for m in result.metrics)
    table = ('<div class="wide"><table><tr><th>metric</th><th>A</th><th>B</th><th>change</th><th>interval</th>'
             f"<th>verdict</th></tr>{rows}</table></div>")

    def pooled(side: Side, name: str) -> list[float]:
        return [x for run in side.samples.get(name, []) for x in run]

    titles = {"ttft_s": "Time to first token", "itl_s": "Inter-token latency (per token)",
              "tpot_s": "Time per output token", "e2e_s": "End-to-end latency"}
    figures = [charts.cdf(name.removesuffix("_s"), titles[name], [("A", pooled(a, name)), ("B", pooled(b, name))])
               for name in LATENCIES if pooled(a, name) or pooled(b, name)]
    meta = (f"A: {_esc(', '.join(result.a))}<br>B: {_esc(', '.join(result.b))}<br>bootstrap intervals at "
            f"{result.confidence:.0%}; a change must also exceed ±{result.threshold:.0%}")
    sections = [_section("B against A", table)]
    if figures:
        sections.append(_section("Distributions (measured requests of the first stage, runs pooled)",
                                 _charts(*figures)))
    return _shell("benchd comparison", "benchd · comparison", meta, sections)
