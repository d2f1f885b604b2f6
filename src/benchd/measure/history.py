"""A workload's history: its runs as series (one a GPU model and node), which runs each holds and which it leaves
out, each headline figure's change points, and what differs in the stack between the two sides of each."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Literal, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from benchd.measure import catalog, changes, stack
from benchd.spec.fields import Documented

FigureName = Literal["output_tokens_per_s", "ttft_s.p50", "ttft_s.p99", "itl_s.p50", "itl_s.p99", "tpot_s.p50",
                     "energy_per_token_j", "perplexity"]
# The headline figures, named as the comparisons name them (measure/compare.py: a matrix's verdict on a figure is
# found by this name): each run's first stage, as a comparison reads it, the run's energy per output token, and its
# quality probe's perplexity of the reference text (measure/quality.py; a matrix confirms it by its quality verdict).
# Each one's name, unit and which way is worse: the catalog's (measure/catalog.py).
FIGURES: dict[str, catalog.Figure] = {key: catalog.figure(key) for key in get_args(FigureName)}

# A run's clock state, from the share of its hardware samples in which a GPU was slowed (hardware/sampler.py:
# throttled_fraction: power cap, thermal or hardware slowdown), which store/history.py reads for every run. This is
# the hook for per-stage clock-event shares by reason (issue 41): once stage summaries carry them, key here (and in
# that query) on the first stage's thermal and hardware slowdown shares.
SLOWED_SHARE = 0.5  # slowed in at least this share of its samples: the run ran "slowed"
CLOCK_STATES = ("nominal", "slowed", "unknown")


def clock_state(throttled_fraction: float | None) -> str:
    """nominal, slowed, or unknown (no GPU read: a CPU run, a server's)."""
    if throttled_fraction is None:
        return "unknown"
    return "slowed" if throttled_fraction >= SLOWED_SHARE else "nominal"


@dataclass(slots=True)
class SeriesRun:
    """One run as a series holds it: the light columns the store reads for every run of the window."""

    run_id: str
    at: datetime  # when it was created
    node: str
    device: str  # the GPU's model (the run metadata's device_name; a CPU's processor)
    valid: bool | None
    throttled_fraction: float | None
    figures: dict[str, float | None] = field(default_factory=dict)
    cold: bool = False  # the first run after its engine started (protocol/metadata.py: engine_run)


class Excluded(Documented):
    run_id: str
    """The run's id."""
    at: datetime
    """Its time."""
    reason: str
    """Invalid, the clock state it ran in against the series', or cold beside the series' warm runs."""


@dataclass(slots=True)
class Series:
    workload: str
    device: str
    node: str
    runs: list[SeriesRun]  # oldest first: those the series holds
    excluded: list[Excluded]
    clock: str  # the series' clock state: that of most of its valid runs
    cold: bool = False  # most of its valid runs ran cold (each the first of its engine): it holds those

    def values(self, figure: str) -> tuple[list[SeriesRun], np.ndarray]:
        """The runs that have this figure (positive), and their values."""
        held = [r for r in self.runs if (v := r.figures.get(figure)) is not None and v > 0]
        return held, np.asarray([r.figures[figure] for r in held], dtype=np.float64)


def series_of(workload: str, runs: list[SeriesRun]) -> list[Series]:
    """Runs (oldest first) as series, one per GPU model and node; an invalid run, a run whose clock state is not the
    series', and a cold run among warm ones (a run is cold as its engine's first: the engine's own warm-up is in its
    figures; a series of mostly cold runs, each of a freshly started engine, holds those) are left out, and listed
    with the reason."""
    groups: dict[tuple[str, str], list[SeriesRun]] = {}
    for run in runs:
        groups.setdefault((run.device, run.node), []).append(run)
    out = []
    for (device, node), members in sorted(groups.items()):
        valid = [r for r in members if r.valid is not False]
        states = Counter(clock_state(r.throttled_fraction) for r in valid)
        usual = max(CLOCK_STATES, key=lambda s: (states[s], s == "nominal")) if states else "unknown"
        cold = 2 * sum(r.cold for r in valid) > len(valid)
        held, excluded = [], []
        for run in members:
            state = clock_state(run.throttled_fraction)
            if run.valid is False:
                excluded.append(Excluded(run_id=run.run_id, at=run.at, reason="invalid"))
            elif state != usual:
                share = f" (a GPU slowed in {run.throttled_fraction:.0%} of its samples)" \
                    if run.throttled_fraction is not None else ""
                excluded.append(Excluded(run_id=run.run_id, at=run.at,
                                         reason=f"clock state {state}{share}, the series' is {usual}"))
            elif run.cold != cold:
                excluded.append(Excluded(run_id=run.run_id, at=run.at, reason=(
                    "cold: the first run after its engine started, the engine's own warm-up in its figures"
                    if run.cold else "warm: most of the series' runs are each the first of a freshly started engine")))
            else:
                held.append(run)
        out.append(Series(workload, device, node, held, excluded, usual, cold))
    return out


MAX_WINDOW = 10_000  # runs of a series one analysis reads at most


class HistorySettings(BaseModel):
    """Each workload's series analysed for change points after every run, on the daemon's history thread
    (daemon/history.py, measure/changes.py; docs/guides/history.md); the defaults are what bench/change_points.py
    measured on synthetic series with benchd's noise."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True  # analyse after every run
    window: Annotated[int, Field(ge=8, le=MAX_WINDOW)] = 2_000  # the newest runs of a series an analysis reads
    alpha: Annotated[float, Field(gt=0, lt=1)] = changes.ALPHA  # a split is kept when its t-test's p is below
    min_runs: Annotated[int, Field(ge=2, le=100)] = changes.MIN_RUNS  # runs a segment holds at least
    penalty: Annotated[float, Field(gt=0)] = changes.PENALTY  # PELT's, × the noise's variance × ln(runs)
    min_relative_change: Annotated[float, Field(ge=0)] = 0.0  # smaller change points are not kept
    # When the two sides of a new change point ran in two environments the daemon declares, run an interleaved
    # matrix between them on the device (repeats rounds) and attach its verdict: off by default, since it takes
    # the device for 2 × repeats runs; POST /changes/{id}/confirm and `benchd history --confirm` always can.
    confirm: bool = False
    confirm_repeats: Annotated[int, Field(ge=2, le=20)] = 3  # rounds of a confirmation's matrix (2 runs each)


# ---- what a change point says --------------------------------------------------------------------------------


class SegmentView(Documented):
    runs: int
    """Its runs."""
    first_run: str
    """Its first run's id."""
    last_run: str
    """Its last run's id."""
    start: datetime
    """Its first run's time."""
    end: datetime
    """Its last run's time."""
    mean: float
    """The geometric mean of the figure over its runs."""
    ci_low: float
    """The mean's interval, low end."""
    ci_high: float
    """The mean's interval, high end."""


class StackShift(Documented):
    """A stack entry whose value moved at a change point: what most runs of each segment had."""

    field: str
    """The stack entry: transformers_version, environment, engine_settings.continuous_batching.max_batch_tokens, …"""
    before: str | None
    """The value most runs of the segment before had."""
    after: str | None
    """The value most runs of the segment after had."""
    mixed: bool = False
    """Some runs of either side had another value."""

    def says(self) -> str:
        """transformers 5.17.0 → 5.18.0"""
        mixed = " (mixed)" if self.mixed else ""
        return f"{stack.name(self.field)} {self.before or '–'} → {self.after or '–'}{mixed}"


Verdict = Literal["scheduled", "confirmed", "not reproduced", "inconclusive", "failed"]


class Confirmation(Documented):
    """An interleaved matrix between the two sides' environments on the same device, and what it found."""

    status: Verdict
    """scheduled | confirmed | not reproduced | inconclusive | failed."""
    matrix_id: str | None = None
    """The interleaved matrix that confirms it."""
    environments: list[str]
    """The two environments it pits: [before, after]."""
    requested_at: datetime
    """When the confirmation was asked for."""
    relative_change: float | None = None
    """The matrix's: after's environment against before's."""
    ci_low: float | None = None
    """That change's interval, low end."""
    ci_high: float | None = None
    """That change's interval, high end."""
    reason: str | None = None
    """Why it failed or says what it says."""


class ChangePoint(Documented):
    id: str
    """The change point's id."""
    workload: str
    """The workload whose series it is in."""
    device: str
    """The GPU model (or CPU) of the series."""
    node: str
    """The node of the series."""
    figure: str
    """The figure that moved (itl_s.p50, output_tokens_per_s, …)."""
    run_id: str
    """The first run of the new segment."""
    at: datetime
    """That run's time."""
    direction: Literal["worse", "better"]
    """worse or better."""
    relative_change: float
    """after / before − 1, of the segments' geometric means."""
    ci_low: float
    """The change's interval, low end."""
    ci_high: float
    """The change's interval, high end."""
    p_value: float
    """Student's t-test between the two segments."""
    confidence: float
    """The interval's confidence."""
    before: SegmentView
    """The segment before it."""
    after: SegmentView
    """The segment after it."""
    stack: list[StackShift] = []
    """What differs between the two segments' runs."""
    active: bool = True
    """The latest analysis still finds it (else withdrawn: more runs made it noise)."""
    detected_at: datetime
    """When it was first found."""
    withdrawn_at: datetime | None = None
    """When the analysis stopped finding it."""
    confirmation: Confirmation | None = None
    """An interleaved matrix's verdict on it, once asked for."""

    def sentence(self) -> str:
        """ITL p50 +8.1% [+6.0%, +10.2%] at 2026-11-20 14:00 (p < 0.001); between the segments: transformers
        5.17.0 → 5.18.0. The change written as a comparison writes it (report/tables.py, change_cells)."""
        figure = FIGURES[self.figure].name if self.figure in FIGURES else self.figure
        p = "p < 0.001" if self.p_value < 0.001 else f"p = {self.p_value:.3f}"
        text = (f"{figure} {self.relative_change:+.1%} [{self.ci_low:+.1%}, {self.ci_high:+.1%}] "
                f"at {self.at:%Y-%m-%d %H:%M} ({p})")
        if self.stack:
            text += "; between the segments: " + ", ".join(c.says() for c in self.stack)
        return text


def segment_view(runs: list[SeriesRun], segment: changes.Segment) -> SegmentView:
    part = runs[segment.start:segment.end]
    return SegmentView(runs=len(part), first_run=part[0].run_id, last_run=part[-1].run_id, start=part[0].at,
                       end=part[-1].at, mean=segment.mean, ci_low=segment.ci_low, ci_high=segment.ci_high)


@dataclass(slots=True)
class Found:
    """A change point as one analysis finds it, before it is matched with those stored."""

    figure: str
    runs: list[SeriesRun]  # the figure's runs
    split: changes.Split

    @property
    def run_id(self) -> str:
        return self.runs[self.split.index].run_id

    def direction(self) -> Literal["worse", "better"]:
        worse = (self.split.relative_change > 0) == FIGURES[self.figure].higher_is_worse
        return "worse" if worse else "better"


def find(series: Series, alpha: float = changes.ALPHA, min_runs: int = changes.MIN_RUNS,
         penalty: float = changes.PENALTY, confidence: float = changes.CONFIDENCE,
         min_relative_change: float = 0.0) -> list[Found]:
    """Every headline figure's change points in the series; those smaller than min_relative_change are not kept."""
    out = []
    for figure in FIGURES:
        runs, values = series.values(figure)
        for split in changes.detect(values, alpha, min_runs, penalty, confidence):
            if abs(split.relative_change) >= min_relative_change:
                out.append(Found(figure, runs, split))
    return out


# ---- the stack between two segments ---------------------------------------------------------------------------


def stack_difference(before: list[dict[str, str]], after: list[dict[str, str]]) -> list[StackShift]:
    """Each field of the runs' stacks (measure/stack.py) whose most common value differs between the two sides (a
    field only one side has, too)."""
    if not before or not after:
        return []
    out = []
    for key in stack.order({k for s in (*before, *after) for k in s}):
        (value_a, mixed_a), (value_b, mixed_b) = stack.most_common(before, key), stack.most_common(after, key)
        if value_a != value_b:
            out.append(StackShift(field=key, before=value_a, after=value_b, mixed=mixed_a or mixed_b))
    return out
