"""A comparison as answered (GET /compare, `benchd compare`, a matrix's variants): each figure's change from side a
to side b with its interval and verdict, the runs left out, and what was compared. measure/compare.py computes one;
each figure's name and unit are the catalog's (measure/catalog.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import computed_field

from benchd.measure.catalog import figure
from benchd.measure.context import SideContext, StackChange
from benchd.measure.quality import QualityComparison
from benchd.measure.statistics import DECIDED, Verdict
from benchd.spec.fields import Documented

# What a comparison stored before issue 53 (a matrix's) may say where "equivalent" is now: its interval did not lie
# beyond the threshold (it may have reached past it: the verdict is read back as stored, and counts as decided).
STORED = "no significant change"


def _catalogued(metric: str) -> tuple[str, str]:
    """(name, unit) of a compared metric: ttft_s.p50 → (TTFT p50, s); a metric the catalog lacks, as it is named."""
    try:
        found = figure(metric)
    except KeyError:
        return metric, ""
    return found.compared_name, found.unit


class MetricChange(Documented):
    metric: str
    """The figure: ttft_s.p99, output_tokens_per_s, …"""
    a: float | None
    """Its value on side a: a percentile of its runs' requests pooled, or the mean of its runs' figures."""
    b: float | None
    """Its value on side b."""
    relative_change: float | None
    """b / a − 1."""
    ci_low: float | None
    """The relative change's interval at the given confidence, low end (never below −1: taken on the log scale)."""
    ci_high: float | None
    """The relative change's interval, high end."""
    samples_a: int
    """Samples on side a (requests, tokens, or runs)."""
    samples_b: int
    """Samples on side b."""
    verdict: Verdict | Literal["no significant change"]
    """faster | slower | equivalent | inconclusive | n/a (no significant change: a matrix's comparison stored before
    equivalent was, whose interval did not lie beyond the threshold)."""
    reason: str | None = None
    """Why it is inconclusive or n/a; what its interval rests on, with one run on a side."""
    spread: float | None = None
    """How much one run's figure moves from run to run, which the interval rests on: √ of the variance of ln(figure)
    pooled over the runs compared and stored runs of the same stack (0.05: about ±5 % a run)."""
    spread_runs: int | None = None
    """The runs that spread was measured over, stored ones included."""

    @computed_field  # type: ignore[prop-decorator]  # pydantic's way (its docs): mypy reads no decorator above one
    @property
    def name(self) -> str:
        """The figure's name as a comparison says it (TTFT p99, output throughput, …)."""
        return _catalogued(self.metric)[0]

    @computed_field  # type: ignore[prop-decorator]  # pydantic's way (its docs): mypy reads no decorator above one
    @property
    def unit(self) -> str:
        """Of a and b (the change and its interval are fractions)."""
        return _catalogued(self.metric)[1]

    @property
    def decided(self) -> bool:
        """faster, slower or equivalent: a verdict a gauge or a script may act on."""
        return self.verdict in DECIDED or self.verdict == STORED


class LeftOut(Documented):
    run_id: str
    """The run."""
    reason: str
    """Why the comparison left it out."""


class Comparison(Documented):
    a: list[str]
    """Side a's runs."""
    b: list[str]
    """Side b's runs."""
    threshold: float
    """The relative change a verdict needs beyond its interval to be faster or slower (on the log scale: slower above
    1 + threshold, faster below 1 / (1 + threshold))."""
    confidence: float
    """The intervals' confidence."""
    metrics: list[MetricChange]
    """Each figure's change from a to b."""
    invalid: list[str] = []
    """Runs on either side whose verdict is invalid: read the verdicts first."""
    left_out: list[LeftOut] = []
    """Runs given that the comparison left out, and why (a run that ran cold beside warm ones)."""
    # How far from the hardware (measure/roofline.py): each side's mean MBU, MFU and fraction of the bound, and the
    # ceiling b moved toward from a (bandwidth, compute; None: neither utilisation rose, or either side lacks them).
    roofline_a: dict[str, float] | None = None
    """Side a's mean MBU, MFU and fraction of the roofline bound."""
    roofline_b: dict[str, float] | None = None
    """Side b's mean MBU, MFU and fraction of the roofline bound."""
    moved_toward: str | None = None
    """The ceiling b moved toward from a: bandwidth or compute (null: neither utilisation rose, or either side lacks
    them)."""
    # What was compared: each side's runs, workloads, labels, dates and stack, and the stack entries that differ.
    context_a: SideContext | None = None
    """Side a: its runs, workloads, labels, dates and stack."""
    context_b: SideContext | None = None
    """Side b: its runs, workloads, labels, dates and stack."""
    stack_difference: list[StackChange] = []
    """The fields of the stack (measure/stack.py) whose values differ between the sides."""
    warnings: list[str] = []
    """What makes the verdicts weaker or void (shared runs, one run a side, invalid or cold runs)."""
    clock_states: str | None = None
    """Whether the two sides ran under different clock states, and how: a change between them may be the GPU's state,
    not the software's (null: the same, or no GPU samples)."""
    quality: QualityComparison | None = None
    """b's outputs and quality probe against a's, judged against a's own noise (its runs against each other): same or
    different beside the speed (null: a side holds no outputs)."""

    @property
    def regressions(self) -> list[MetricChange]:
        return [m for m in self.metrics if m.verdict == "slower"]
