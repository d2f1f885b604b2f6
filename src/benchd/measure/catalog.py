"""The catalog of figures: each figure benchd reports, declared once. A Figure says its key (the stored summaries'
field, the comparisons' and histories' metric: ttft_s, output_tokens_per_s; a distribution's percentile is its key
and the percentile: ttft_s.p99), its name and title as tables, pages and charts say them, its unit, which way is
better, how its values are written (text: with their unit, in the unit that reads best; cell: as a number in the
unit a table's head names), what it means, and the Prometheus series that carries it (the OpenTelemetry span
attribute of a request's figure follows from its key). figure(key) finds one, FIGURES holds them in the order
tables show them. The CLI's and the pages' tables, comparisons, histories, the fleet, the recorders of Prometheus
and OpenTelemetry and docs/generate.py read it (docs/figures.md defines each figure exactly; AIPerf's metric
registry is the model: a metric's tag, header, unit and direction declared together)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

Better = Literal["lower", "higher"]
# How a figure's values are written: seconds (850 µs, 12 ms, 1.5 s), a rate, joules, bytes, a ratio (a share, 0–1,
# as a percentage), or a plain number.
Format = Literal["seconds", "rate", "joules", "bytes", "ratio", "number"]
PERCENTILES = (50, 90, 95, 99)  # those a distribution's summary keeps (measure/summary.py's LatencyStats)


def significant(value: float) -> str:
    """Three significant figures, and whole numbers from 100 up with thousands marked: 0.412, 48.1, 2,191."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def seconds_text(value: float) -> str:
    """A duration in the unit that reads best: 850 µs, 12 ms, 1.5 s."""
    a = abs(value)
    if a == 0:
        return "0"
    if a < 1e-3:
        return f"{value * 1e6:.3g} µs"
    if a < 1:
        return f"{value * 1e3:.3g} ms"
    return f"{value:.3g} s"


def bytes_text(value: float) -> str:
    """GiB from 64 MiB up, else MiB: 2.5 GiB, 48 MiB."""
    return f"{value / 2**30:.3g} GiB" if abs(value) >= 2**26 else f"{value / 2**20:.3g} MiB"


def _joules(value: float) -> str:
    return f"{value * 1e3:.3g} mJ" if abs(value) < 1 else f"{value:.3g} J"


_TEXT: dict[Format, Callable[[float, str], str]] = {
    "seconds": lambda v, unit: seconds_text(v),
    "rate": lambda v, unit: f"{v:,.1f} {unit}",
    "joules": lambda v, unit: _joules(v),
    "bytes": lambda v, unit: bytes_text(v),
    "ratio": lambda v, unit: f"{v:.1%}",
    "number": lambda v, unit: f"{v:.4g}" + (f" {unit}" if unit else ""),
}
# A table's cell: the value in the unit its head names (Figure.display), without it.
_SCALE: dict[Format, tuple[str, float]] = {"seconds": ("ms", 1e3), "joules": ("mJ", 1e3), "bytes": ("GiB", 2**-30)}


@dataclass(frozen=True, slots=True)
class Figure:
    key: str
    name: str  # as tables and pages say it: TTFT, output tok/s
    title: str  # a chart's or a section's: Time to first token
    unit: str  # of its values as stored: s, tok/s, req/s, J, B; none for a ratio or a perplexity
    better: Better | None  # which way is better; None: neither (a state, such as the KV cache's occupancy)
    format: Format
    description: str  # what it is, in a sentence (docs/figures.md has the exact definition)
    prometheus: str | None = None  # the series that carries it (telemetry/metrics.py); None: no series does
    per_request: bool = False  # a distribution over requests (its summary: LatencyStats); a span attribute each
    percentile: int | None = None  # a distribution's percentile this figure is (ttft_s.p99)
    # The name a comparison's answer gives it where that differs from name: stored comparisons said "output
    # throughput" (measure/comparison.py's MetricChange.name), and every earlier answer must read the same.
    compared_as: str | None = None

    @property
    def compared_name(self) -> str:
        """Its name in a comparison's rows and answers (MetricChange.name): TTFT p99, output throughput."""
        return self.compared_as or self.name

    @property
    def higher_is_worse(self) -> bool:
        """A rise is a regression (a latency, energy, cost); for a figure with no better way, False."""
        return self.better == "lower"

    @property
    def display(self) -> str:
        """The unit a table's cells are written in (cell()): ms for seconds, mJ for joules, GiB for bytes, % for a
        ratio, else the unit."""
        return "%" if self.format == "ratio" else _SCALE.get(self.format, (self.unit, 1.0))[0]

    @property
    def span_attribute(self) -> str | None:
        """A request's figure on its span (telemetry/spans.py): benchd.ttft_s; None for a stage's or a run's."""
        return f"benchd.{self.key}" if self.per_request and self.percentile is None else None

    def text(self, value: float | None) -> str:
        """The value with its unit, in the unit that reads best (– for none): 12.3 ms, 1,234.5 tok/s, 41.2%."""
        return "–" if value is None else _TEXT[self.format](value, self.unit)

    def cell(self, value: float | None) -> str:
        """The value as a number in display's unit, three significant figures (– for none): 12.3 (ms), 2,191."""
        if value is None:
            return "–"
        if self.format == "ratio":
            return f"{value:.0%}"
        return significant(value * _SCALE.get(self.format, ("", 1.0))[1])

    def at(self, percentile: int) -> Figure:
        """This distribution's percentile as a figure of its own: ttft_s → ttft_s.p99, named TTFT p99."""
        if not self.per_request or self.percentile is not None or percentile not in PERCENTILES:
            raise KeyError(f"{self.key}.p{percentile}: a distribution's figure takes a percentile of {PERCENTILES}")
        return replace(self, key=f"{self.key}.p{percentile}", name=f"{self.name} p{percentile}",
                       title=f"{self.title}, p{percentile}", prometheus=None, percentile=percentile,
                       compared_as=None)


def _request(key: str, name: str, title: str, description: str, prometheus: str) -> Figure:
    return Figure(key, name, title, "s", "lower", "seconds", description, prometheus, per_request=True)


FIGURES: dict[str, Figure] = {f.key: f for f in (
    # A request's (docs/figures.md, "One request"): a distribution over a stage's measured requests.
    _request("ttft_s", "TTFT", "Time to first token", "First token − scheduled time, per request.",
             "benchd_time_to_first_token_seconds"),
    _request("itl_s", "ITL", "Inter-token latency (per token)",
             "Gap between consecutive tokens; a chunk of k tokens is k equal gaps.",
             "benchd_inter_token_latency_seconds"),
    _request("tpot_s", "TPOT", "Time per output token (per request)",
             "(last token − first token) / (output tokens − 1), per request.", "benchd_time_per_output_token_seconds"),
    _request("e2e_s", "E2E", "End-to-end latency", "Last token − scheduled time, per request (end-to-end latency).",
             "benchd_request_duration_seconds"),
    _request("queue_s", "queue", "Queue time", "Admitted by the engine − scheduled time, per request.",
             "benchd_request_queue_seconds"),
    _request("dispatch_lag_s", "dispatch lag", "Dispatch lag",
             "Submission − scheduled time: the dispatcher's own lateness.", "benchd_dispatch_lag_seconds"),
    # A stage's (docs/figures.md, "A stage's summary"): over its measured window.
    Figure("output_tokens_per_s", "output tok/s", "Output throughput", "tok/s", "higher", "rate",
           "Output tokens a second over the measured window.", "benchd_run_output_tokens_per_second",
           compared_as="output throughput"),
    Figure("total_tokens_per_s", "total tok/s", "Total throughput", "tok/s", "higher", "rate",
           "Prompt and output tokens a second over the measured window."),
    Figure("requests_per_s", "requests/s", "Request throughput", "req/s", "higher", "rate",
           "Measured requests that succeeded, a second over the window."),
    Figure("goodput_requests_per_s", "goodput req/s", "Goodput", "req/s", "higher", "rate",
           "Good requests a second (those meeting the SLO's per-request objectives; 0 where the stage misses its "
           "SLO)."),
    Figure("kv_cache_occupancy_peak", "KV-cache peak", "KV-cache occupancy, peak", "", None, "ratio",
           "The KV cache's highest occupancy during the stage (used / total blocks, 0 to 1)."),
    # A run's (docs/figures.md, "A run"; "How far from the hardware"; "Quality beside speed").
    Figure("energy_per_token_j", "energy per token", "Energy per output token", "J", "lower", "joules",
           "GPU energy over the measured window per output token.", "benchd_run_energy_per_output_token_joules"),
    Figure("energy_per_good_token_j", "energy per good token", "Energy per good token", "J", "lower", "joules",
           "GPU energy over the measured window per good output token (those of requests meeting the SLO).",
           "benchd_run_energy_per_good_token_joules"),
    Figure("cost_per_million_good_tokens", "cost per million good tokens", "Cost per million good tokens", "",
           "lower", "number", "Device-hours and kWh at the daemon's prices per million good output tokens.",
           "benchd_run_cost_per_million_good_tokens"),
    Figure("capacity_requests_per_s", "capacity req/s", "Capacity under SLO", "req/s", "higher", "rate",
           "The highest request rate a capacity search found meeting the SLO.",
           "benchd_capacity_requests_per_second"),
    Figure("mbu", "MBU", "Model bandwidth utilisation", "", "higher", "ratio",
           "Bytes the steps must move a second / the device's measured bandwidth.",
           "benchd_run_memory_bandwidth_utilization_ratio"),
    Figure("mfu", "MFU", "Model FLOPs utilisation", "", "higher", "ratio",
           "The steps' matmul FLOP/s / the device's measured rate in the run's dtype.",
           "benchd_run_flops_utilization_ratio"),
    Figure("of_bound", "of roofline bound", "Fraction of the roofline bound", "", "higher", "ratio",
           "The fastest the steps could run on the device's measured limits / the time they took (1: at the limits).",
           "benchd_run_roofline_bound_ratio"),
    Figure("perplexity", "probe perplexity", "Quality probe's perplexity", "", "lower", "number",
           "The reference text's perplexity under the run's stack (its quality probe).", "benchd_quality_perplexity"),
    Figure("weight_bytes", "weights", "Weights", "B", "lower", "bytes",
           "The model's weights as stored on the device.", "benchd_matrix_variant_weight_bytes"),
    Figure("peak_memory_bytes", "peak memory", "Peak memory", "B", "lower", "bytes",
           "The device's memory in use at its highest during the run."),
)}


def figure(key: str) -> Figure:
    """The figure of a key: ttft_s, output_tokens_per_s, or a distribution's percentile (ttft_s.p99). KeyError naming
    the key for one the catalog does not hold."""
    found = FIGURES.get(key)
    if found is not None:
        return found
    base, _, percentile = key.partition(".p")
    if base in FIGURES and percentile.isdigit():
        return FIGURES[base].at(int(percentile))
    raise KeyError(f"{key}: no such figure (the catalog's: {', '.join(FIGURES)}, a distribution's with .p50 …)")


def per_request() -> list[Figure]:
    """The distributions over requests, in the catalog's order: TTFT, ITL, TPOT, E2E, queue, dispatch lag."""
    return [f for f in FIGURES.values() if f.per_request]
