"""Validity's rules, as MLPerf LoadGen has them: what a stage's figures must meet to be trusted (the verdict that
applies them is measure/verdicts.py; the worker's stop rules, measure/watch.py)."""

from __future__ import annotations

from benchd.spec.fields import Fraction, NonNegativeFloat, NonNegativeInt, PositiveFloat, Strict


class ValidityRules(Strict):
    """A stage breaking any rule gets the verdict invalid, with each reason. The rules are the workload's (stored with
    its spec), the daemon's BENCHD_VALIDITY__* where it sets none, the defaults below where neither does
    (docs/figures.md, verdicts: validity, says why each default is what it is)."""

    # Client fidelity, open loop only (a closed loop's pace is the engine's): dispatch lag (sent − scheduled) adds to
    # every request's TTFT and E2E, so it is judged by how far it moves TTFT's percentiles (docs/figures.md).
    dispatch_lag_floor_s: PositiveFloat = 0.001
    """Open loop: a move of TTFT by dispatch lag (or a lag p99) at or under this many seconds is never judged."""
    max_dispatch_lag_ttft_share: Fraction | None = 0.1
    """Open loop: the most dispatch lag may move TTFT p50, p90 or p99 (its figure from the scheduled time against the
    same from the requests' sending), as a share of that figure."""
    max_dispatch_lag_p99_s: PositiveFloat | None = None
    """Open loop: dispatch lag p99 at most this, in seconds, whatever the latencies."""
    min_sent_rate_ratio: Fraction = 0.95
    """Open loop: requests sent a second over those scheduled a second, at least."""
    min_duration_s: NonNegativeFloat = 0.0
    """The measured window, in seconds, at least."""
    min_requests: NonNegativeInt = 0
    """Measured requests that finished, at least."""
    max_errors: NonNegativeInt | None = None
    """Measured requests that failed, at most: beyond it the stage stops early (what it measured is kept) and is
    invalid."""
    max_error_rate: Fraction | None = None
    """The share of measured requests that failed, at most (checked once 20 have finished): beyond it the stage stops
    early and is invalid."""
    min_completion_ratio: Fraction | None = 0.9
    """Over-saturation (open loop): from the latter half of the stage's sending on, requests completed a second under
    this share of those offered, the requests in flight growing steadily beyond their noise, is invalid. None or 0:
    not judged."""
    oversaturation_s: PositiveFloat | None = None
    """As a stop rule: the requests in flight grew, never draining, for this many seconds: the stage stops early (off
    when unset)."""
    # Requests still in flight when the stage's drain ended were cut (stop.drain_s): the longest, so the completed
    # ones lean short; beyond this share, a percentile as high as p99 may be one a cut request would have moved.
    max_cut_share: Fraction | None = 0.01
    """Measured requests cut at the drain's end over those sent, at most: the longest are those cut, so the completed
    ones lean short."""
    # A GPU under thermal or hardware slowdown (SLOWDOWN_EVENTS: clocks cut, often by half or more) in more than this
    # share of the stage's samples gives figures that are its cooling's or board's (at half clock, 0.05 is half the
    # comparisons' 5 % threshold); the power cap and the rest are shown, not judged.
    max_slowdown_share: Fraction | None = 0.05
    """A GPU's samples under thermal or hardware slowdown (clocks cut for the cooling's or board's sake), at most."""
    max_count_disagreement_share: Fraction | None = 0.0
    """Against a server, with a tokenizer: measured requests whose prompt or output tokens by benchd's count of their
    text and by the server's usage differ beyond max(2 tokens, 10 %), over those counted, at most (the figures rest on
    the server's counts). None: not judged."""
