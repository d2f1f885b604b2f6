"""A run's figures as rows of text: one formatting for the terminal's tables and the HTML pages, each figure named,
united and written as the catalog says (measure/catalog.py)."""

from __future__ import annotations

from benchd.hardware.sampler import HardwareSummary
from benchd.measure import stack
from benchd.measure.capacity import CapacityResult
from benchd.measure.catalog import FIGURES, figure
from benchd.measure.catalog import bytes_text as size
from benchd.measure.catalog import significant as rounded
from benchd.measure.quality import QualityComparison, QualitySummary
from benchd.measure.summary import LatencyStats, StageSummary
from benchd.measure.timings import KernelResult, TimingStats, TrainStepSummary

__all__ = ["rounded", "size"]  # the catalog's, under the names the pages and their tests use


def _distribution(key: str, summaries: list[StageSummary], *percentiles: str) -> tuple[str, list[str]]:
    """A distribution's row: TTFT ms p50 / p90 / p99, its cells in the head's unit."""
    f = FIGURES[key]
    stats: list[LatencyStats] = [getattr(s, key) for s in summaries]
    return (f"{f.name} {f.display} {' / '.join(percentiles)}",
            [" / ".join(f.cell(getattr(s, p)) for p in percentiles) for s in stats])


def _stage(key: str, summaries: list[StageSummary]) -> tuple[str, list[str]]:
    """A stage's figure's row: output tok/s, KV-cache peak."""
    f = FIGURES[key]
    return f.name, [f.cell(getattr(s, key)) for s in summaries]


def count(n: int, noun: str) -> str:
    """1 sample, 2 samples, 1,024 runs."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def summary_rows(summaries: list[StageSummary]) -> list[tuple[str, list[str]]]:
    """One row per figure, one cell per stage (load level): what the terminal table and the report page show."""
    rows: list[tuple[str, list[str]]] = [
        ("requests ok / failed / warm-up", [f"{s.requests} / {s.errors} / {s.warmup_requests}"
                                            + (f", {s.cut} cut" if s.cut else "") for s in summaries]),
        _stage("output_tokens_per_s", summaries),
        _stage("total_tokens_per_s", summaries),
        _stage("requests_per_s", summaries),
        *(_distribution(key, summaries, "p50", "p90", "p99") for key in ("ttft_s", "itl_s", "tpot_s", "e2e_s")),
        _distribution("queue_s", summaries, "p50", "p99"),
        _distribution("dispatch_lag_s", summaries, "p99"),
        _stage("kv_cache_occupancy_peak", summaries),
    ]
    if any(s.offered_requests_per_s is not None for s in summaries):  # open loops long enough to judge
        rows.insert(4, ("completed / offered req/s", [pace(s) for s in summaries]))
    if any(s.valid is not None for s in summaries):
        rows.insert(0, ("verdict", [verdict(s) for s in summaries]))
    if any(s.goodput_requests_per_s is not None for s in summaries):
        rows.append((f"{FIGURES['goodput_requests_per_s'].name} (SLO met)", [
            "–" if s.goodput_requests_per_s is None else
            f"{s.goodput_requests_per_s:.2f} ({s.slo_attainment or 0:.0%})" for s in summaries
        ]))
    if any(s.drain_s is not None for s in summaries):
        rows.append(("drained s (cut at its end)", [drain_cell(s) for s in summaries]))
    if any(s.clocks for s in summaries):
        rows.append(("GPU clock events (SM of max)", [clocks_cell(s) for s in summaries]))
    if any(s.roofline for s in summaries):  # how far from the hardware (docs/figures.md)
        rows.append((f"{FIGURES['mbu'].name} / {FIGURES['mfu'].name}",
                     [roofline_cell(s, "{mbu:.1%} / {mfu:.1%}") for s in summaries]))
        rows.append((f"{FIGURES['of_bound'].name} (bound by)", [roofline_cell(s, "{of_bound:.1%} ({bound_by})")
                                                      for s in summaries]))
    return rows


def drain_cell(s: StageSummary) -> str:
    """How long it drained of its bound, and the requests cut when the bound came (the completed ones lean short)."""
    if s.drain_s is None:
        return "–"
    bound = "" if s.drain_bound_s is None else f" of ≤ {s.drain_bound_s:.3g}"
    # a stage that ended early cut what it had in flight, not its drain (the requests row counts them)
    cut = f"; {s.cut} cut ({s.cut_share:.1%}): completed lean short" if s.cut and s.status == "succeeded" else ""
    return f"{s.drain_s:.1f}{bound}{cut}"


def clocks_cell(s: StageSummary) -> str:
    """Each GPU's clock events in any of its samples (by DCGM's names) and its mean SM clock of its maximum."""
    cells = []
    for gpu in s.clocks:
        events = ", ".join(f"{event} {share:.0%}" for event, share in gpu.events.items() if share)
        ratio = gpu.sm_clock_ratio
        sm = "" if ratio is None else f" (SM {ratio:.0%})"
        cells.append(f"{gpu.gpu}: {events or 'none'}{sm}" if len(s.clocks) > 1 else f"{events or 'none'}{sm}")
    return "; ".join(cells) or "–"


def roofline_cell(s: StageSummary, form: str) -> str:
    return "–" if not s.roofline else form.format(**s.roofline)


def verdict(s: StageSummary) -> str:
    """valid, or invalid with the checks it failed (each one's sentence is in the summary)."""
    if s.valid is None:
        return "–"
    return "valid" if s.valid else "INVALID: " + ", ".join(i.check for i in s.invalid)


def pace(s: StageSummary) -> str:
    """An open loop's completions against its offers over the latter half of its sending (validity.Saturation)."""
    done, offered = s.completed_requests_per_s, s.offered_requests_per_s
    if done is None or offered is None:
        return "–"
    return f"{done:.2f} / {offered:.2f}" + (f" ({done / offered:.0%})" if offered else "")


def capacity_line(found: CapacityResult) -> str:
    rate = "none met the SLO" if found.requests_per_s is None else f"{found.requests_per_s:g} requests/s"
    done = "" if found.complete else " (incomplete)"
    return f"capacity under SLO: {rate}{done} after {len(found.probes)} probes: {found.reason}"


# A GPU busy less than this share of a run's samples (NVML: a kernel running) waited on the host most of the time:
# static generate() at batches of 64 ran kernels 17 % of the reference workload's time on an H100, continuous
# batching 81 % (docs/benchmarks/roofline.md).
HOST_BOUND_UTILIZATION = 0.5


def quality_line(q: QualitySummary | None) -> str | None:
    """What the run generated and its probe, in a line: real requests 3/8 ended at EOS, 41.2 tokens a request,
    log-probability −0.70 a token; probe: perplexity 12.88 (551 positions, 6.1 s after the run)."""
    if q is None or not q.requests:
        return None
    line = (f"quality: {q.prompts or 'random'} requests, {q.ended_at_eos}/{q.requests} ended at EOS, "
            f"{q.output_tokens_mean:.1f} tokens a request")
    if q.logprob_mean is not None:
        line += f", log-probability {q.logprob_mean:.3f} a token"
    if q.probe_error is not None:
        line += f"; probe failed: {q.probe_error}"
    if q.probe_s is not None:
        line += (f"; probe: perplexity {'not finite' if q.perplexity is None else f'{q.perplexity:.3f}'} "
                 f"({q.probe_tokens} positions, {q.probe_s:.1f} s after the run)")
    return line


def quality_verdict_line(q: QualityComparison) -> str:
    """B's quality against A's beside the speed: DIFFERENT (why), or same, with its figures."""
    figures = [f"{q.identical_requests}/{q.requests} requests identical" if q.requests else None,
               None if q.kl is None else f"probe KL {q.kl:.2g}",
               None if q.logprob_diff is None else f"Δ log-likelihood {q.logprob_diff:+.3g}"]
    word = q.verdict.upper() if q.verdict == "different" else q.verdict
    return f"quality: {word} ({q.reason}); " + ", ".join(f for f in figures if f)


def stack_line(metadata: dict) -> str | None:
    """What the engine ran on, in a line: the attention and where its kernel comes from, the quantization."""
    parts = []
    if attention := metadata.get("attn_implementation"):
        kernel = metadata.get("attention_kernel")
        parts.append(f"attention {attention}" + (f" ({kernel})" if kernel else ""))
    if (quantization := metadata.get("quantization")) not in (None, "none"):
        parts.append(f"quantization {quantization}")
    return "stack: " + ", ".join(parts) if parts else None


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
    line = f"hardware ({count(hw.samples, 'sample')} over {hw.window_s:.1f} s): " + ", ".join(parts)
    if hw.gpus and hw.gpu_utilization_mean is not None and hw.gpu_utilization_mean < HOST_BOUND_UTILIZATION:
        line += (f"; the GPU ran kernels {hw.gpu_utilization_mean:.0%} of the time: the host (Python, kernel "
                 "launches) bounds this run, not the device")
    return line


def _gib(value: int | None) -> str:
    return "–" if value is None else f"{value / 2**30:.2f}"


def _mean_std_ms(stats: TimingStats) -> str:
    return "–" if stats.mean is None else f"{stats.mean * 1e3:.2f} ± {stats.std * 1e3:.2f}"


def train_step_rows(summaries: list[TrainStepSummary]) -> list[tuple[str, list[str]]]:
    """One row per figure, one cell per warm-up level; times are mean ± std over the measured steps."""
    return [
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


def train_step_subject(s: TrainStepSummary) -> str:
    return (f"{s.model}: {s.parameters:,} parameters, {s.mode}, batch {s.batch_size} × {s.context_length}, "
            f"{s.dtype}" + (f" (autocast {s.autocast})" if s.autocast else ""))


KERNEL_COLUMNS = ("kernel", "shape", "dtype", "implementation", "median ms", "mean ± std ms", "min / max ms",
                  "TFLOP/s", "× reference")


def kernel_rows(results: list[KernelResult]) -> list[list[str]]:
    """One row per implementation and shape, cells under KERNEL_COLUMNS; TFLOP/s at the median time."""
    rows = []
    for r in results:
        t = r.timing
        if r.error is not None or t.median is None:
            rows.append([r.kernel, r.shape, r.dtype, r.implementation, "–", "–", "–", "–", r.error or r.status])
            continue
        ratio = "–" if r.speedup_vs_reference is None else f"{r.speedup_vs_reference:.2f} (vs {r.reference})"
        rows.append([r.kernel, r.shape, r.dtype, r.implementation, f"{t.median * 1e3:.4f}",
                     f"{t.mean * 1e3:.4f} ± {t.std * 1e3:.4f}", f"{t.min * 1e3:.4f} / {t.max * 1e3:.4f}",
                     "–" if r.tflops is None else f"{r.tflops:.2f}", ratio])
    return rows


def parse_summaries(kind: str, stages: list[dict]) -> list:
    """A run's stored or streamed stage summaries as their models, by the spec's kind."""
    models: dict[str, type[StageSummary] | type[TrainStepSummary] | type[KernelResult]] = {
        "generate": StageSummary, "train_step": TrainStepSummary, "kernel": KernelResult}
    model = models[kind]
    return [model.model_validate(s) for s in stages]


GPU_COLUMNS = ["GPU", "status", FIGURES["output_tokens_per_s"].name,
               *(f"{figure(key).name} {figure(key).display}" for key in ("ttft_s.p99", "itl_s.p50")),
               f"{FIGURES['energy_per_token_j'].display}/token", "tok/s × siblings", "verdict"]


def gpu_rows(parts: dict) -> list[list[str]]:
    """A run on every GPU, one row a GPU (its first stage): its figures beside its siblings' median, and whether
    it was found slow."""
    verdicts = {v["gpu"]: v for v in parts.get("verdicts", [])}
    rows = []
    for gpu, part in sorted(parts.get("gpus", {}).items()):
        stage = part["stages"][0] if part["stages"] else {}
        verdict = verdicts.get(gpu, {})
        if verdict.get("decision"):  # over rounds: the mean of its rounds' output tok/s
            stage = {**stage, "output_tokens_per_s": verdict["output_tokens_per_s"]}
        ttft, itl = (stage.get("ttft_s") or {}).get("p99"), (stage.get("itl_s") or {}).get("p50")
        ratio, low, high = (verdict.get(k) for k in ("relative_throughput", "throughput_ci_low", "throughput_ci_high"))
        energy = verdict.get("energy_per_token_j")
        rows.append([
            gpu, part["status"], f"{stage.get('output_tokens_per_s', 0):.1f}",
            "–" if ttft is None else f"{ttft * 1e3:.2f}", "–" if itl is None else f"{itl * 1e3:.2f}",
            "–" if energy is None else f"{energy * 1e3:.2f}",
            "–" if ratio is None else f"{ratio:.3f}" + ("" if low is None else f" [{low:.3f}, {high:.3f}]"),
            ("slow: " + "; ".join(verdict["reasons"])) if verdict.get("outlier") else
            ("ok: " + "; ".join(verdict["reasons"])) if verdict.get("decision") else "ok" if verdict else "–"])
    return rows


# ---- comparisons --------------------------------------------------------------------------------------------


def figure_text(metric: str, v: float | None) -> str:
    """A compared figure's value with its unit, as the catalog writes it (a metric it lacks: the number)."""
    try:
        return figure(metric).text(v)
    except KeyError:
        return "–" if v is None else f"{v:.4g}"


def _change(x: float) -> str:
    """A relative change, an interval's end beyond ×11 said as such (a few runs' interval on the log scale, at a
    high confidence, can reach ×10⁶: a cell says it is that wide, not how wide)."""
    return f"{x:+.1%}" if x < 10 else ">+1,000%"


def change_cells(m) -> tuple[str, str]:
    """A MetricChange's relative change and its interval."""
    change = "–" if m.relative_change is None else _change(m.relative_change)
    interval = "–" if m.ci_low is None else f"[{_change(m.ci_low)}, {_change(m.ci_high)}]"
    return change, interval


COMPARISON_HEAD = ("figure", "A", "B", "change", "interval", "verdict")


def comparison_rows(result, verdict_word=lambda metric, verdict: verdict) -> tuple[list[list[str]], list[str]]:
    """A row per figure under COMPARISON_HEAD, its verdict marked [n] where a note says why (too few samples, no
    data, one run a side…), and the notes: one line per reason, the figures it concerns named once."""
    reasons: dict[str, list[str]] = {}
    for m in result.metrics:
        if m.reason:
            reasons.setdefault(m.reason, []).append(m.name)
    numbers = {reason: i + 1 for i, reason in enumerate(reasons)}
    rows = []
    for m in result.metrics:
        mark = f" [{numbers[m.reason]}]" if m.reason else ""
        rows.append([m.name, figure_text(m.metric, m.a), figure_text(m.metric, m.b), *change_cells(m),
                     verdict_word(m.metric, m.verdict) + mark])
    every = len(result.metrics)
    notes = [f"[{numbers[reason]}] {'every figure' if len(names) == every > 1 else _names(names)}: {reason}"
             for reason, names in reasons.items()]
    return rows, notes


def _names(names: list[str]) -> str:
    """TTFT p50, TTFT p90 and ITL p50 → TTFT p50, p90, ITL p50 (a latency named once a run of its percentiles)."""
    out, last = [], None
    for name in names:
        head, _, tail = name.rpartition(" ")
        out.append(tail if head and head == last and tail.startswith("p") else name)
        last = head if tail.startswith("p") else None
    return ", ".join(out)


def roofline_rows(result) -> list[list[str]]:
    """MBU, MFU and the fraction of the roofline bound of each side, under COMPARISON_HEAD."""
    if not (result.roofline_a and result.roofline_b):
        return []
    rows = []
    for key in ("mbu", "mfu", "of_bound"):
        name, a, b = FIGURES[key].name, result.roofline_a[key], result.roofline_b[key]
        toward = (f"toward the {result.moved_toward} ceiling" if result.moved_toward else "no ceiling nearer")
        rows.append([name, FIGURES[key].text(a), FIGURES[key].text(b), f"{(b - a) * 100:+.1f} pts", "–",
                     toward if key == "of_bound" else "–"])
    return rows


def when(first: str | None, last: str | None) -> str:
    """2026-11-22 10:01 – 10:05 (the same day), or both dates; minutes, UTC as stored."""
    def short(stamp: str) -> str:
        return stamp.replace("T", " ")[:16]

    if not first:
        return "–"
    a, b = short(first), short(last or first)
    return a if a == b else f"{a} – {b[11:]}" if a[:10] == b[:10] else f"{a} – {b}"


def context_rows(result) -> list[list[str]]:
    """What each side is: its runs, workloads, labels, when it ran, and each stack entry whose values differ
    (marked ≠); empty when the sides carry no context."""
    a, b = result.context_a, result.context_b
    if a is None or b is None:
        return []
    rows = [["runs", str(a.runs), str(b.runs)],
            ["workload", ", ".join(a.workloads), ", ".join(b.workloads)],
            ["label", ", ".join(x or "–" for x in a.labels), ", ".join(x or "–" for x in b.labels)],
            ["when", when(a.first, a.last), when(b.first, b.last)]]
    rows += [[f"≠ {stack.name(c.what)}", ", ".join(c.a) or "–", ", ".join(c.b) or "–"]
             for c in result.stack_difference]
    return rows


def same_stack(result) -> str:
    """The named fields of the stack both sides share, in one line (the engine's settings and the workload's fields
    only where they differ)."""
    a = result.context_a
    if a is None or result.context_b is None:
        return ""
    differ = {c.what for c in result.stack_difference}
    return " · ".join(f"{stack.name(key)} {', '.join(values)}" for key, values in a.stack.items()
                      if key in stack.FIELDS and key not in differ)
