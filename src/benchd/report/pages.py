"""A run's report page: what it measured first (the summary; throughput against latency across a sweep's stages;
the latency distributions; throughput and the engine's load), then the requests, how far from the hardware, the
hardware and the stack (self-contained: inline CSS and SVG, nothing fetched)."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from benchd.hardware.sampler import HardwareSummary
from benchd.measure.catalog import FIGURES
from benchd.measure.quality import QualitySummary
from benchd.measure.records import RequestRecord
from benchd.measure.stack import FIELDS, device, name, stack_of
from benchd.report import charts, scatter
from benchd.report.charts import Band, Line, Span
from benchd.report.html import charts as grid
from benchd.report.html import esc, section, shell, table
from benchd.report.tables import (
    GPU_COLUMNS,
    KERNEL_COLUMNS,
    gpu_rows,
    hardware_line,
    kernel_rows,
    parse_summaries,
    quality_line,
    size,
    summary_rows,
    train_step_rows,
    train_step_subject,
)
from benchd.spec.engines import default_engine


@dataclass
class _Stage:
    index: int
    label: str
    start_s: float  # on the run's axis
    end_s: float
    records: list[RequestRecord] = field(default_factory=list)


def when(stamp: str | None) -> str | None:
    """An ISO 8601 time to the second, as a reader scans it: 2026-11-26 10:53:41 UTC."""
    if not stamp:
        return None
    text = str(stamp).replace("T", " ")
    return text[:19] + (" UTC" if text[19:].startswith(("+00:00", "Z")) else "")


def good_line(good: dict) -> str:
    """good tokens 640 of 700 (91%), 0.42 J a good token, 0.031 USD a million good tokens (1 device, 12.0 s)"""
    share = good["good_output_tokens"] / good["output_tokens"] if good["output_tokens"] else None
    parts = [f"good tokens {good['good_output_tokens']:,} of {good['output_tokens']:,}"
             + (f" ({share:.0%})" if share is not None else "")]
    if good.get("energy_per_good_token_j") is not None:
        parts.append(f"{good['energy_per_good_token_j']:.3g} J a good token")
    if good.get("cost_per_million_good_tokens") is not None:
        parts.append(f"{good['cost_per_million_good_tokens']:,.4g} {good.get('currency') or ''} a million good "
                     "tokens at the daemon's prices")
    return ", ".join(parts) + f" ({good['devices']} device{'s' * (good['devices'] != 1)}, " \
        f"{good['device_seconds'] / max(1, good['devices']):.1f} s)"


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
    runner = spec.get("engine", default_engine()) if kind == "generate" else kind
    workload = run.get("workload") or spec.get("name", "run")
    label = run.get("label") or metadata.get("label") or spec.get("label")
    facts = [f"label {label}" if label else None, subject, runner, device(metadata),
             f"run {run.get('id') or metadata.get('run_id') or '–'}",
             f"started {when(metadata.get('started_at') or run.get('started_at')) or '–'}"]
    meta = (f'<span class="pill {esc(status)}">{esc(status)}</span> '
            + " · ".join(esc(x) for x in facts if x))
    error = run.get("error")
    top = [esc(hardware_line(hardware)) if hardware else "no hardware summary"]
    if run.get("good_tokens"):
        top.append(esc(good_line(run["good_tokens"])))
    if line := quality_line(QualitySummary.model_validate(run["quality"]) if run.get("quality") else None):
        top.append(esc(line))
    if error:
        top.insert(0, f'<span class="error">{esc(error)}</span>')
    summary = "".join(f'<p class="note">{line}</p>' for line in top)
    if kind == "generate":
        missing = ("the run has not ended: its timeline is stored when it does" if status in ("queued", "running")
                   else "no timeline stored with this run")
        sections = _generation(summaries, run.get("timeline"), rows, summary, missing, spec)
        if run.get("parts"):
            rounds = run["parts"].get("rounds") or 1
            about = (f"every GPU at once, {rounds} rounds until each was decided (docs/figures.md, verdicts that "
                     "decide): each GPU's output tok/s (the mean of its rounds') against the median of its siblings'"
                     if rounds > 1 else "every GPU at once: the first stage, each against the median of its siblings")
            sections.insert(1, section("GPUs", table(GPU_COLUMNS, gpu_rows(run["parts"]), text_columns=2),
                                       anchor="gpus", about=about))
    else:
        sections = _timed(kind, summaries, rows, summary)
    sections.append(_stack(run, metadata, hardware, spec))
    title = " · ".join(x for x in (workload, label) if x)
    return shell(f"benchd · {title}", f"benchd · {esc(title)}", meta, sections)


def _generation(summaries: list, timeline: dict | None, rows: list[dict], summary: str, missing: str,
                spec: dict) -> list[str]:
    """missing: what the panels that need the timeline say when there is none."""
    stages, placed = _stages(rows, timeline)
    # A stage whose completions fell behind its offers is marked on every chart over the run.
    saturated = {i for i, s in enumerate(summaries) if any(x.check == "oversaturated" for x in s.invalid)}
    bands: list[Band] = [(s.start_s, s.end_s, s.label + (" · OVERSATURATED" if s.index in saturated else ""))
                         for s in stages]
    head = [""] + [s.stage for s in summaries]
    why = "".join(f'<p class="note error">{esc(s.stage)}: invalid: {esc(x.message)}</p>'
                  for s in summaries for x in s.invalid)
    out = [section("Summary", table(head, [[n, *c] for n, c in summary_rows(summaries)]), why, summary,
                   anchor="summary")]
    if len(summaries) > 1:
        out.append(section("Throughput against latency", _tradeoff(summaries, spec), anchor="tradeoff",
                           about="a point a stage; the Pareto front ringed: no other stage has both more throughput "
                                 "and less latency"))
    good = [(s.label, [r for r in s.records if not r.warmup and r.ok]) for s in stages]
    out.append(section(
        "Latency",
        grid(charts.cdf("ttft", FIGURES["ttft_s"].title, [(k, [r.ttft_s for r in g]) for k, g in good]),
             charts.cdf("itl", FIGURES["itl_s"].title, [(k, _itl(g)) for k, g in good]),
             charts.cdf("tpot", FIGURES["tpot_s"].title,
                        [(k, [t for r in g if (t := r.tpot_s) is not None]) for k, g in good]),
             charts.cdf("e2e", FIGURES["e2e_s"].title, [(k, [r.e2e_s for r in g]) for k, g in good])),
        anchor="latency", about="cumulative distributions over the measured requests that succeeded"))
    out.append(section("Throughput and load", _load(stages, timeline, bands, missing), anchor="load",
                       about="over the run"))
    spans = [_span(s, r) for s in stages for r in s.records]
    out.append(section("Requests", charts.timeline(
        "requests", "Each request from its scheduled time (one row each, in that order)", spans, bands,
        None if placed else f"{missing}: stages drawn back to back"), anchor="requests"))
    if lines := [(s.stage, s.roofline) for s in summaries if s.roofline]:
        first = lines[0][1]
        figures = table(("stage", "MBU", "MFU", "of bound", "bound by"), [
            [label, f"{line['mbu']:.1%}", f"{line['mfu']:.1%}", f"{line['of_bound']:.1%}", line["bound_by"]]
            for label, line in lines])
        out.append(section("How far from the hardware", grid(scatter.roofline(
            "roofline", "Achieved FLOP/s against arithmetic intensity",
            [(label, line["intensity"], line["achieved_flops_per_s"]) for label, line in lines],
            first["peak_bytes_per_s"], first["peak_flops_per_s"]), figures), anchor="roofline",
            about="each stage's steps under the device's measured ceilings (docs/figures.md)"))
    out.append(section("Hardware", _hardware(timeline, bands, missing), anchor="hardware",
                       about="over the run, from the daemon's hardware sampler"))
    if (timeline or {}).get("server") is not None:
        server = timeline["server"]
        totals = [f"{label}: {fmt(v)}" for label, v, fmt in (
            ("preemptions in the run", server.get("preemptions_total"), charts.number),
            ("prefix-cache hit rate over the run", server.get("prefix_cache_hit_rate_run"), charts.percent))
            if v is not None]
        out.append(section("Server", _server(server, bands), anchor="server",
                           about="; ".join([f"{server.get('server') or 'unknown server'}, by its own metrics at "
                                            f"{server['url']}, read every {server['interval_s']:g} s", *totals])))
    return out


def _tradeoff(summaries: list, spec: dict) -> str:
    """Output throughput against TTFT p99 and ITL p50, a point a stage; the workload's SLO where it bounds that
    figure, and each stage's SLO verdict (a hollow point missed it)."""
    slo = (spec.get("workload") or {}).get("slo") or {}
    ttft = [scatter.Point(s.stage, s.output_tokens_per_s, s.ttft_s.p99, s.slo_met) for s in summaries
            if s.ttft_s.p99 is not None]
    itl = [scatter.Point(s.stage, s.output_tokens_per_s, s.itl_s.p50, s.slo_met) for s in summaries
           if s.itl_s.p50 is not None]
    ttft_slo, ttft_says = ((slo["ttft_p99_s"], "SLO: TTFT p99 ≤") if slo.get("ttft_p99_s") else
                           (slo.get("ttft_s"), "SLO: each request's TTFT ≤"))
    return grid(scatter.tradeoff("tradeoff-ttft", "TTFT p99 against output throughput", ttft, "TTFT p99",
                                 ttft_slo, ttft_says),
                scatter.tradeoff("tradeoff-itl", "ITL p50 against output throughput", itl, "ITL p50"))


def _server(server: dict, bands: list[Band]) -> str:
    """An openai run's server as its Prometheus page told it (server_scrape): requests, KV cache, prefix cache."""
    t, warning, name = server["t"], server.get("warning"), server.get("server") or "the server"

    def note(key: str) -> str | None:
        return warning or (None if any(v is not None for v in server[key]) else f"{name} exports no such figure")

    return grid(
        charts.lines("server-requests", "Requests in the server", [
            Line("running", t, server["requests_running"]), Line("waiting", t, server["requests_waiting"])],
            charts.number, bands, note=note("requests_running")),
        charts.lines("server-kv-cache", "Server KV-cache usage", [Line("usage", t, server["kv_cache_usage"])],
                     charts.percent, bands, note=warning or occupancy(server["kv_cache_usage"],
                                                                      f"{name} exports no such figure")),
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
    return grid(
        charts.lines("throughput", "Output throughput (measured requests)", throughput, charts.number, bands,
                     note=note),
        charts.lines("in-flight", "Requests in the engine", [
            Line("running", load.get("t", []), load.get("running", [])),
            Line("waiting", load.get("t", []), load.get("waiting", []))], charts.number, bands,
            note=note or "sampled every 100 ms"),
        charts.lines("kv-cache", "KV-cache occupancy (used / total blocks)",
                     [Line("occupancy", load.get("t", []), load.get("kv_usage", []))], charts.percent, bands,
                     note=note or occupancy(load.get("kv_usage", []), "this engine has no paged cache to read")))


def occupancy(values: list, none: str) -> str:
    """A cache's chart is drawn to its values (a fixed 0–100 % axis flattened a peak of 7 % to a line): its note says
    the peak, and of what."""
    peak = max((v for v in values if v is not None), default=None)
    return none if peak is None else f"peak {peak:.1%} of the cache; the axis spans the values"


def _hardware(timeline: dict | None, bands: list[Band], missing: str) -> str:
    """GPU utilization (and the host's CPU), power and memory, one line per GPU (NVML index)."""
    samples = (timeline or {}).get("hardware") or {}
    # The sampler's reads from before the run's start are left out: the charts begin with the run.
    keep = [i for i, at in enumerate(samples.get("t", [])) if at >= 0]

    def kept(values: list) -> list:
        return [values[i] for i in keep if i < len(values)]

    t = kept(samples.get("t", []))
    gpus = sorted((g, {k: kept(v) for k, v in series.items()}) for g, series in samples.get("gpus", {}).items())
    note: str | None
    cpu_note: str | None
    if timeline is None:
        note = cpu_note = f"{missing}: no hardware samples"
    else:
        note = None if gpus else "no GPU samples: no NVML on this host, or no GPU"
        cpu_note = note and note + "; the host's CPU only"
    utilization = [Line(f"GPU {g}", t, s["utilization"]) for g, s in gpus]
    utilization.append(Line("CPU (host)", t, kept(samples.get("cpu_utilization", [])), color="#777777",
                            dashed=True))
    memory = [Line(f"GPU {g}", t, [None if v is None else v / 2**30 for v in s["memory_used_bytes"]]) for g, s in gpus]
    return grid(
        charts.lines("gpu-utilization", "Utilization", utilization, charts.percent, bands, y_max=1.0, note=cpu_note),
        charts.lines("gpu-power", "GPU power", [Line(f"GPU {g}", t, s["power_watts"]) for g, s in gpus],
                     charts.unit("W"), bands, note=note),
        charts.lines("gpu-memory", "GPU memory used", memory, charts.unit("GiB"), bands, note=note))


def _setting(value: object) -> str:
    """An engine setting's value as a reader scans it: numbers rounded, lists joined, None as –."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_setting(v) for v in value) or "–"
    return str(value)


def settings_rows(settings: dict, section_name: str = "") -> list[tuple[str, str, str]]:
    """An engine's settings a row each, (section, setting, value): a nested section's name on its first row."""
    rows: list[tuple[str, str, str]] = []
    for key, value in sorted(settings.items(), key=lambda item: isinstance(item[1], dict)):  # sections last
        if isinstance(value, dict):
            rows += settings_rows(value, f"{section_name} · {key}".strip(" ·").replace("_", " "))
        else:
            rows.append(("" if any(r[0] == section_name for r in rows) else section_name, key.replace("_", " "),
                         _setting(value)))
    return rows


def _stack(run: dict, metadata: dict, hardware: HardwareSummary | None, spec: dict) -> str:
    """The run's stack (measure/stack.py: its named fields here, the engine's settings below, the workload's in the
    spec), then what describes the run without changing a figure."""
    m = metadata
    fields = stack_of(spec, m, hardware.model_dump() if hardware else None, run.get("node"))
    rows = [(name(key), value) for key, value in fields.items() if key in FIELDS and key != "gpu_uuids"]
    rows += [(k, v) for k, v in (
        ("host", m.get("host")), ("pod", run.get("pod")),
        ("model load", m.get("model_load_s") and f"{m['model_load_s']:.2f} s"),
        ("weights", m.get("weight_bytes") and size(m["weight_bytes"])), ("schedule", run.get("schedule")),
        ("commit message", (m.get("commit") or {}).get("message")), ("ran", _warmth(m.get("engine_run"))),
        ("started", when(m.get("started_at"))), ("finished", when(m.get("finished_at"))),
        ("trace id", m.get("trace_id")),
    ) if v is not None]
    rows += [(f"GPU {g.gpu}", f"{g.name} ({g.uuid})") for g in (hardware.gpus if hardware else [])]
    if not rows:
        return section("Stack", '<p class="note">no stack recorded: the run did not start</p>', anchor="stack")
    parts = [table(("", ""), rows, text_columns=2)]
    if m.get("engine_settings"):
        parts.append(table(("engine", "setting", "value"), settings_rows(m["engine_settings"]), text_columns=3))
    spec_text = f"<details><summary>spec</summary><pre>{esc(json.dumps(spec, indent=2))}</pre></details>"
    return section("Stack", grid(*parts), spec_text, anchor="stack",
                   about="what the run measured on: device, versions, host, the engine's settings")


def _warmth(engine_run: int | None) -> str | None:
    """Whether the run was its engine's first (measure/compare.py leaves such a run out beside warm ones)."""
    if engine_run is None:
        return None
    return "cold: its engine's first run" if engine_run == 1 else f"warm: its engine's run {engine_run}"


# ---- timed runs ----------------------------------------------------------------------------------


def _timed(kind: str, summaries: list, rows: list[dict], summary: str) -> list[str]:
    if kind == "kernel":
        figures_table = table(KERNEL_COLUMNS, kernel_rows(summaries), text_columns=4)
        caption = "TFLOP/s at the median time"
    else:
        figures_table = table([""] + [s.stage for s in summaries], [[n, *c] for n, c in train_step_rows(summaries)])
        caption = train_step_subject(summaries[0]) if summaries else ""
    out = [section("Summary", f'<p class="note">{esc(caption)}</p>' if caption else "", figures_table, summary,
                   anchor="summary")]
    # A chart per training-step stage (its phases), or per kernel shape (its implementations).
    groups: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        stage = summaries[row["stage_index"]] if row["stage_index"] < len(summaries) else None
        group = (f"stage {row['stage_index']}" if stage is None
                 else stage.shape if kind == "kernel" else stage.stage)
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
    out.append(section("Timings", grid(*figures) if figures else '<p class="note">no timings recorded</p>',
                        anchor="timings"))
    return out
