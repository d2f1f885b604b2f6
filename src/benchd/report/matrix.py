"""A matrix's variants against its baseline: the table the terminal and the page share (each figure with its change
and verdict in one cell), throughput against latency across the variants, every metric's interval, the latency
distributions per variant, and each run's throughput in execution order."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from benchd.measure import stack
from benchd.measure.catalog import FIGURES, figure
from benchd.measure.matrix import MatrixComparison, VariantComparison
from benchd.measure.records import RequestRecord
from benchd.report import charts, scatter
from benchd.report.charts import Line
from benchd.report.html import charts as grid
from benchd.report.html import esc, notes, section, shell, table, verdict_class, verdict_pill
from benchd.report.tables import COMPARISON_HEAD, comparison_rows, count, size

BYTES = ("weight_bytes", "peak_memory_bytes")
# The terminal's marks for a verdict (its colour says it too): a cell reads "+7.3% ✗".
MARKS = {"faster": "✓", "smaller": "✓", "slower": "✗", "larger": "✗", "equivalent": "≈",
         "inconclusive": "?", "n/a": ""}
# "quality": its verdict against the baseline's noise (same, DIFFERENT), the share of its requests whose tokens are
# all the baseline's, and the probe's KL a token (measure/quality.py)
SUMMARY_HEAD = ("variant", "runs", "output tok/s", "TTFT p50", "ITL p50", "TPOT p50", "peak memory", "quality")
STACK_HEAD = ("variant", "attention", "quantized", "weights", "load", "MBU / MFU (of bound)")
# Quality, each against the baseline: its verdict, the requests whose tokens are all the baseline's, the median
# position of the first that is not, the shared prefix's mean |Δ log-probability|, the probe's mean Δ log-likelihood
# and KL a token, the reference text's perplexity (measure/quality.py; the baseline's row: its own noise).
QUALITY_HEAD = ("variant", "verdict", "same", "diverges at", "prefix |Δ lp|", "probe Δ ll", "probe KL", "ppl")


def spaced(label: str) -> str:
    """A variant's label with room to wrap: quantization=int8, attn_implementation=eager."""
    return label.replace(",", ", ")


def breakable(text: str) -> str:
    """HTML of a variant's name: its index, then each of its values on a line of its own, which wraps after its = if
    it must (quantization= / int8_weight_only), never within a word (attn_ / implementation, as it did)."""
    head, _, label = text.partition(": ")
    label, _, stack = label.partition(" (")  # what an environment resolved to (resolved()), after the values
    pairs = "".join(f'<span class="pair">{esc(pair).replace("=", "=<wbr>")}</span>' for pair in label.split(", "))
    return f"{esc(head)}:{pairs}" + (f'<span class="pair">({esc(stack)}</span>' if stack else "")


def verdict_word(metric: str, verdict: str) -> str:
    """compare's verdicts speak of speed; a byte count is larger or smaller."""
    if metric in BYTES:
        return {"slower": "larger", "faster": "smaller"}.get(verdict, verdict)
    return verdict


def value(metric: str, v: float | None) -> str:
    """A figure in its unit, the unit in its column's name: 2,179.4 (tok/s), 12.3 ms, 1.2 GiB."""
    if v is None:
        return "–"
    unit = figure(metric).unit
    if unit == "s":
        return charts.seconds(v)
    if unit == "B":
        return size(v)
    return f"{v:,.1f}" if unit == "tok/s" else f"{v:.4g}"


@dataclass(frozen=True, slots=True)
class Cell:
    """A variant's figure, and its change against the baseline with the verdict (empty for the baseline)."""

    value: str
    change: str = ""
    verdict: str = ""

    def __str__(self) -> str:
        return f"{self.value} {self.change} {self.verdict}".strip()

    def terminal(self) -> str:
        return f"{self.value}\n{self.change} {MARKS.get(self.verdict, '')}".rstrip() if self.change else self.value

    def html(self) -> str:
        """Its change in a pill coloured by the verdict, with the verdict's mark (and the word on hover)."""
        if not self.change:
            return esc(self.value)
        return (f'{esc(self.value)}<span class="chg"><span class="verdict {verdict_class(self.verdict)}" '
                f'title="{esc(self.verdict)}">{esc(self.change)} {esc(MARKS.get(self.verdict, ""))}</span></span>')


def _cell(v: VariantComparison, metric: str, figure: float | None) -> Cell:
    found = next((m for m in v.metrics if m.metric == metric), None)
    if found is None or found.relative_change is None:
        return Cell(value(metric, figure))
    return Cell(value(metric, figure), f"{found.relative_change:+.1%}", verdict_word(metric, found.verdict))


def summary_rows(comparison: MatrixComparison) -> list[list[str | Cell]]:
    """One row per variant under SUMMARY_HEAD: its figures, each with its change against the baseline and verdict."""
    rows: list[list[str | Cell]] = []
    for v in comparison.variants:
        rows.append([
            f"{v.index}{' (baseline)' if v.baseline else ''}: {spaced(v.label)}{resolved(v)}",
            f"{sum(s == 'succeeded' for s in v.statuses)}/{len(v.statuses)} {verdict(v)}",
            _cell(v, "output_tokens_per_s", v.output_tokens_per_s), _cell(v, "ttft_s.p50", v.ttft_p50_s),
            _cell(v, "itl_s.p50", v.itl_p50_s), _cell(v, "tpot_s.p50", v.tpot_p50_s),
            _cell(v, "peak_memory_bytes", v.peak_memory_bytes), quality_cell(comparison, v)])
    return rows


def _number(x: float | None, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def quality_rows(comparison: MatrixComparison) -> tuple[list[list[str]], list[str]]:
    """One row per variant under QUALITY_HEAD (the baseline: its own noise between repeats), and each verdict's
    reason."""
    rows, reasons = [], []
    noise = next((v.quality.noise for v in comparison.variants if v.quality is not None), None)
    for v in comparison.variants:
        name = f"{v.index}: {spaced(v.label)}"
        q = v.quality
        if v.baseline:
            baseline_ppl = next((x.quality.baseline_perplexity for x in comparison.variants if x.quality), None)
            rows.append([name, "baseline", "–" if noise is None else _number(noise.exact_match, ".0%"), "–", "–",
                         "–" if noise is None or noise.logprob is None else f"±{noise.logprob:.2g} (noise)",
                         "–" if noise is None or noise.kl is None else f"{noise.kl:.2g} (noise)",
                         _number(baseline_ppl, ".3f")])
            continue
        if q is None:
            rows.append([name, "–", "–", "–", "–", "–", "–", "–"])
            continue
        rows.append([name, headline(v) or q.verdict, f"{q.identical_requests}/{q.requests}",
                     _number(q.first_divergence_p50, ".0f"), _number(q.prefix_logprob_abs, ".2g"),
                     _number(q.logprob_diff, "+.3g"), _number(q.kl, ".2g"), _number(q.perplexity, ".3f")])
        reasons.append(f"{v.index}: {q.verdict}: {q.reason}")
    return rows, reasons


def headline(v: VariantComparison) -> str | None:
    """"faster but different": its speed's verdict (output tok/s) beside its quality's, when they pull apart."""
    speed = next((m.verdict for m in v.metrics if m.metric == "output_tokens_per_s"), None)
    if v.quality is None or v.quality.verdict != "different":
        return None
    return "faster but different" if speed == "faster" else "different"


def quality_cell(comparison: MatrixComparison, v: VariantComparison) -> str:
    """The baseline: its own noise; a variant: its verdict, exact match and probe KL against the baseline's."""
    if v.baseline:
        noise = next((x.quality.noise for x in comparison.variants if x.quality is not None), None)
        if noise is None or noise.pairs == 0:
            return "baseline"
        exact = "–" if noise.exact_match is None else f"{noise.exact_match:.0%}"
        kl = "" if noise.kl is None else f", KL ≤ {noise.kl:.2g}"
        return f"baseline (repeats: {exact} same{kl})"
    q = v.quality
    if q is None:
        return "–" if v.tokens is None or v.tokens.ratio is None else f"{v.tokens.ratio:.1%} tokens same"
    word = (headline(v) or q.verdict).upper() if q.verdict == "different" else q.verdict
    exact = "" if q.exact_match is None else f" · {q.exact_match:.0%} same"
    kl = "" if q.kl is None else f" · KL {q.kl:.2g}"
    return f"{word}{exact}{kl}"


def stack_rows(comparison: MatrixComparison) -> list[list[str]]:
    """One row per variant under STACK_HEAD: what it ran with, its weights, load time and roofline figures."""
    return [[f"{v.index}: {spaced(v.label)}", str(v.stack.get("attn_implementation") or "–"),
             f"{v.quantized_layers or 0} layers" if v.stack.get("quantization") not in (None, "none")
             else "–", "–" if v.weight_bytes is None else size(v.weight_bytes),
             "–" if v.model_load_s is None else f"{v.model_load_s:.2f} s", roofline_cell(v)]
            for v in comparison.variants]


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


def legend(comparison: MatrixComparison) -> str:
    return (f"each figure's change against the baseline and its verdict: ✓ faster (smaller), ✗ slower (larger), "
            f"≈ equivalent (within ±{comparison.threshold:.0%}), ? inconclusive; the change's interval at "
            f"{comparison.confidence:.0%} must lie beyond ±{comparison.threshold:.0%} (intervals: --json, and the "
            "page's every metric)")


def _rounded(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def matrix_page(row: dict, records: Mapping[str, Sequence[RequestRecord]]) -> str:
    """row: the matrix as stored (store.get_matrix, or the CLI's outcome in that form); records: each run's first
    stage's records, by run id."""
    comparison = MatrixComparison.model_validate(row["comparison"]) if row.get("comparison") else None
    variants = row["variants"]
    document = row.get("document") or {}
    status = row.get("status", "unknown")
    workload = document.get("name", variants[0]["spec"].get("name", "matrix"))
    title = f"{workload} · {len(variants)} variants"
    label = document.get("label") or variants[0]["spec"].get("label")
    facts = [f"label {label}" if label else None, document.get("model") or variants[0]["spec"].get("model"),
             f"matrix {row.get('id') or '–'}",
             f"{count(len(row['runs']) // max(1, len(variants)), 'round')}, every variant once a round",
             f"baseline: variant {row['baseline']}"]
    meta = (f'<span class="pill {esc(status)}">{esc(status)}</span> ' + " · ".join(esc(x) for x in facts if x))
    if row.get("error"):
        meta += f'<br><span class="error">{esc(row["error"])}</span>'
    good: dict[int, list[RequestRecord]] = {v["index"]: [] for v in variants}
    for run in row["runs"]:
        good[run["variant"]].extend(r for r in records.get(run["run_id"], ()) if not r.warmup and r.ok)
    labels = {v["index"]: f"{v['index']}: {spaced(v['label'])}" for v in variants}
    sections = []
    if comparison is None:
        sections.append(section("Variants", '<p class="note">not compared yet: the comparison is made once every '
                                            'run has ended</p>', table(("variant", "values"), [
                                                [v["index"], v["label"]] for v in variants], 2), anchor="summary"))
    else:
        saturated = [f"variant {v.index} ({v.label}): completions fell behind the offers in {len(v.oversaturated)} "
                     f"of its {len(v.run_ids)} runs: its latencies measure a growing queue, and their change "
                     "against the baseline says how long it grew" for v in comparison.variants if v.oversaturated]
        saturated += [f"variant {v.index} ({v.label}): {v.clock_states}" for v in comparison.variants if v.clock_states]
        cells = [[breakable(r[0]), *(esc(c) if isinstance(c, str) else c.html() for c in r[1:])]
                 for r in summary_rows(comparison)]
        sections.append(section("Variants", table(SUMMARY_HEAD, cells, 2, raw=True, kind="variants"),
                                notes(saturated, "note error"), notes([legend(comparison)]), anchor="summary"))
        rows, reasons = quality_rows(comparison)
        rows = [[breakable(r[0]), *(esc(c) for c in r[1:])] for r in rows]
        sections.append(section("Quality", table(QUALITY_HEAD, rows, 2, raw=True), notes(reasons), anchor="quality",
                                about="what each variant generated for the same requests and its stack's probe, "
                                      "against the baseline's and the baseline's own noise between its repeats"))
        sections.append(section("Throughput against latency", _tradeoff(comparison, good, document),
                                anchor="tradeoff", about="a point a variant; the Pareto front ringed: no other "
                                                         "variant has both more throughput and less latency"))
    latency = [charts.cdf("ttft", FIGURES["ttft_s"].title,
                          [(labels[i], [r.ttft_s for r in rs]) for i, rs in good.items()]),
               charts.cdf("itl", FIGURES["itl_s"].title,
                          [(labels[i], np.asarray([g for r in rs for g in r.itl_s()])) for i, rs in good.items()])]
    sections.append(section("Latency", grid(*latency), anchor="latency",
                            about="cumulative distributions, each variant's runs pooled"))
    if comparison is not None:
        sections.append(section("Every metric", *[_metrics(v, comparison) for v in comparison.variants
                                                  if not v.baseline], anchor="metrics",
                                about="each variant against the baseline"))
    sections.append(section("Runs", _runs(row, records, labels), anchor="runs",
                            about="each run's output throughput in the order the runs executed"))
    stack = [[v["index"], ", ".join(f"{k}={_rounded(x)}" for k, x in v["values"].items()),
              _in_effect(comparison, v["index"])] for v in variants]
    spec = f"<details><summary>document</summary><pre>{esc(json.dumps(document, indent=2))}</pre></details>"
    parts = [table(("variant", "values", "in effect"), stack, 3)]
    if comparison is not None:
        parts.insert(0, table(STACK_HEAD, stack_rows(comparison), 1))
    sections.append(section("Stack", *parts, spec, anchor="stack"))
    return shell(f"benchd · matrix · {title}", f"benchd · matrix · {esc(title)}", meta, sections)


def _tradeoff(comparison: MatrixComparison, good: dict[int, list[RequestRecord]], document: dict) -> str:
    """Each variant's output throughput (the mean over its runs) against its TTFT p99 and ITL p50, its runs'
    requests pooled; the workload's TTFT p99 objective where it sets one (a point above it missed it)."""
    slo = (document.get("workload") or {}).get("slo") or {}
    objective = slo.get("ttft_p99_s")
    ttft, itl = [], []
    for v in comparison.variants:
        rs = good.get(v.index, [])
        if v.output_tokens_per_s is None or not rs:
            continue
        name = f"{v.index}: {spaced(v.label)}"
        p99 = float(np.percentile([r.ttft_s for r in rs], 99))
        ttft.append(scatter.Point(str(v.index), v.output_tokens_per_s, p99, None if objective is None
                                  else p99 <= objective, name))
        gaps = [g for r in rs for g in r.itl_s()]
        if gaps:
            itl.append(scatter.Point(str(v.index), v.output_tokens_per_s, float(np.percentile(gaps, 50)), name=name))
    return grid(scatter.tradeoff("tradeoff-ttft", "TTFT p99 against output throughput", ttft, "TTFT p99", objective,
                                 "SLO: TTFT p99 ≤"),
                scatter.tradeoff("tradeoff-itl", "ITL p50 against output throughput", itl, "ITL p50"))


def _in_effect(comparison: MatrixComparison | None, index: int) -> str:
    """The fields of the variant's stack (measure/stack.py) whose values differ among the variants."""
    if comparison is None:
        return ""
    stacks = [v.stack for v in comparison.variants]
    varying = {k for k in {k for s in stacks for k in s} if len({s.get(k) for s in stacks}) > 1}
    mine = next((v.stack for v in comparison.variants if v.index == index), {})
    return ", ".join(f"{stack.name(k)}: {mine.get(k) or '–'}" for k in stack.order(varying))


def _metrics(v: VariantComparison, comparison: MatrixComparison) -> str:
    rows, reasons = comparison_rows(v, verdict_word)
    cells = [[*(esc(c) for c in row[:-1]), verdict_pill(verdict_word(m.metric, m.verdict),
                                                        row[-1][len(verdict_word(m.metric, m.verdict)):])]
             for m, row in zip(v.metrics, rows)]
    head = ("figure", "baseline", "variant", *COMPARISON_HEAD[3:])
    return (f"<p><b>{esc(v.index)}: {esc(spaced(v.label))}</b></p>" + table(head, cells, 1, raw=True, kind="verdicts")
            + notes(reasons))


def _runs(row: dict, records: Mapping[str, Sequence[RequestRecord]], labels: dict[int, str]) -> str:
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
    return grid(charts.lines("runs", "Output tokens per second, run by run", lines, charts.number,
                             x_label="run, in execution order", fx=lambda x: f"{x:g}", markers=True))
