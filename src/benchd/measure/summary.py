"""A stage's summary: every figure over its measured requests, and its verdict."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from benchd.hardware.clocks import GPUClocks
from benchd.measure.records import RequestRecord
from benchd.measure.verdicts import Figures, Invalidity, judge, saturation, sent_rate_ratio
from benchd.spec import slo as objectives
from benchd.spec.fields import Documented
from benchd.spec.slo import SLO
from benchd.spec.validity import ValidityRules

PERCENTILES = (50, 90, 95, 99)


class LatencyStats(Documented):
    count: int
    """Values."""
    mean: float | None = None
    """Their mean."""
    std: float | None = None
    """Their standard deviation."""
    min: float | None = None
    """The smallest."""
    p50: float | None = None
    """The median (linear interpolation between order statistics)."""
    p90: float | None = None
    """The 90th percentile."""
    p95: float | None = None
    """The 95th percentile."""
    p99: float | None = None
    """The 99th percentile."""
    max: float | None = None
    """The largest."""

    @classmethod
    def of(cls, values: Sequence[float]) -> LatencyStats:
        if not len(values):
            return cls(count=0)
        a = np.asarray(values, dtype=np.float64)
        p50, p90, p95, p99 = np.percentile(a, PERCENTILES)  # linear interpolation between order statistics
        return cls(
            count=a.size, mean=float(a.mean()), std=float(a.std()), min=float(a.min()),
            p50=float(p50), p90=float(p90), p95=float(p95), p99=float(p99), max=float(a.max()),
        )


class StageSummary(Documented):
    stage: str
    """The stage's label (its profile and level: concurrent=4, poisson@8/s, …)."""
    status: str
    """succeeded | stopped (a rule stopped it early) | failed | cancelled | interrupted."""
    requests: int
    """Measured requests that succeeded."""
    errors: int
    """Measured requests that failed or were cancelled (those cut at the drain's end apart)."""
    warmup_requests: int
    """Warm-up requests, in no figure."""
    duration_s: float
    """The measured window: the first measured scheduled time to the last measured token, in seconds."""
    prompt_tokens: int
    """Prompt tokens of the measured requests."""
    output_tokens: int
    """Output tokens of the measured requests."""
    output_tokens_per_s: float
    """Output tokens a second over the measured window."""
    total_tokens_per_s: float
    """Prompt and output tokens a second over the measured window."""
    requests_per_s: float
    """Measured requests that succeeded, a second over the window."""
    goodput_requests_per_s: float | None = None
    """Good requests a second (those meeting the SLO's per-request objectives; 0 where the stage misses its SLO)."""
    slo_attainment: float | None = None
    """The share of measured requests that were good."""
    good_output_tokens: int | None = None
    """Output tokens of the good requests (those meeting the SLO's per-request objectives, every successful one
    where it sets none; none where the stage misses its SLO): what a good token's energy and cost are over."""
    ttft_s: LatencyStats
    """Time to first token (from the scheduled time) over the measured requests that succeeded, in seconds."""
    itl_s: LatencyStats
    """Inter-token latency, each gap between tokens (split over the tokens a chunk carried), in seconds."""
    tpot_s: LatencyStats
    """Time per output token after the first, each request's, in seconds."""
    e2e_s: LatencyStats
    """Each request's scheduled time to its last token, in seconds."""
    queue_s: LatencyStats
    """Scheduled time to the engine's admission, in seconds."""
    dispatch_lag_s: LatencyStats
    """Scheduled time to the request's sending, in seconds: the client's lateness."""
    kv_cache_occupancy_peak: float | None = None
    """The KV cache's highest occupancy during the stage (0 to 1)."""
    slo_met: bool | None = None
    """The stage's objectives of the SLO (p99s, error rate) met."""
    slo_misses: list[str] = []
    """Each objective missed."""
    sent_rate_ratio: float | None = None
    """Open loop: requests sent a second over requests scheduled a second (1: every request left on time)."""
    # Open loop, the stage's two rates (request_rates; MLPerf LoadGen's scheduled and completed samples per second):
    # completed never exceeds offered. The over-saturation check's own, over the latter half of the sending, are in
    # its message (measure/verdicts.py, Saturation).
    offered_requests_per_s: float | None = None
    """Open loop: the measured requests sent a second, over their schedule's span (n requests at a rate r span n / r:
    a Poisson draw of the profile's rate)."""
    completed_requests_per_s: float | None = None
    """Open loop: those of them answered (succeeded or failed; cut ones not) a second, from the same start to the last
    answer: at most the offered rate."""
    # The verdict (measure/verdicts.py): valid, or invalid with each reason; None: stored before verdicts were kept.
    valid: bool | None = None
    """The verdict: every rule of validity met (null: stored before verdicts were kept)."""
    invalid: list[Invalidity] = []
    """Each rule broken, with why."""
    stop_reason: str | None = None
    """Why a stopped stage stopped early."""
    # The drain (stop.drain_s): measured requests still in flight when it ended, cut (cancelled at the stage's end,
    # their tokens kept: the figures over the completed ones lean short), their share of the measured requests
    # sent, the drain's bound, and how long the stage drained: from its stop to its last request's end or the cut.
    cut: int = 0
    """Measured requests still in flight when the drain ended, cut (cancelled, their tokens kept)."""
    cut_share: float | None = None
    """Those cut over the measured requests sent."""
    drain_bound_s: float | None = None
    """The drain's bound, in seconds."""
    drain_s: float | None = None
    """How long the stage drained: from its stop to its last request's end or the cut, in seconds."""
    # A server's requests counted by its usage and by benchd's tokenizer (measure/records.py, TokenCounts): how many,
    # and how many differ beyond the tolerance (the verdict's token_counts).
    counts_checked: int = 0
    """Measured requests whose tokens benchd counted beside the server's usage."""
    counts_disagree: int = 0
    """Those whose counts differ beyond max(2 tokens, 10 %)."""
    clocks: list[GPUClocks] = []
    """Each GPU the stage ran on: the share of its samples under each clock event, and its mean SM clock against its
    maximum; none on a CPU."""
    roofline: dict[str, float | int | str] | None = None
    """How far from the hardware: MBU, MFU, the bound and the fraction of it reached (null where the engine counted no
    steps or the device's limits are unknown)."""


def summarize(
    stage: str,
    status: str,
    records: Iterable[RequestRecord],
    slo: SLO | None = None,
    kv_cache_occupancy_peak: float | None = None,
    end_s: float | None = None,
    rules: ValidityRules | None = None,
    open_loop: bool = False,
    stop_reason: str | None = None,
    drain: tuple[float, float] | None = None,
    clocks: Sequence[GPUClocks] = (),
) -> StageSummary:
    """Figures over measured (non-warm-up) requests; end_s closes the window of an interrupted stage, or of one whose
    drain ended with requests in flight (cut). With rules, the stage's verdict (open_loop: its requests left at
    scheduled times, so the client's fidelity is judged). drain: (when the stage stopped sending, its drain's bound);
    clocks: its GPUs' clock events."""
    records = list(records)
    measured = [r for r in records if not r.warmup]
    good = [r for r in measured if r.ok]
    cut = [r for r in measured if r.cut]
    failed = [r for r in measured if r.done and not r.ok and not r.cut]
    sent_count = len(good) + len(failed) + len(cut)
    drained = None
    if drain is not None:
        ended = [r.finished_s for r in records if r.finished_s is not None]
        drained = max(0.0, max(ended, default=drain[0]) - drain[0])

    starts = [r.scheduled_s for r in measured if r.submitted_s is not None]
    ends = [r.arrival_s[-1] for r in measured if r.arrival_s]
    if end_s is not None:
        ends.append(end_s)
    duration = max(ends) - min(starts) if starts and ends else 0.0

    def rate(x: float) -> float:
        return x / duration if duration > 0 else 0.0

    # Tokens of every measured request count, failed ones included: the engine produced them in the window.
    output_tokens = sum(r.output_tokens for r in measured)
    prompt_tokens = sum(r.prompt_tokens for r in measured if r.admitted_s is not None)
    itl = [gap for r in good for gap in r.itl_s()]
    stats = {"ttft_s": LatencyStats.of([r.ttft_s for r in good]), "itl_s": LatencyStats.of(itl),
             "tpot_s": LatencyStats.of([t for r in good if (t := r.tpot_s) is not None]),
             "e2e_s": LatencyStats.of([r.e2e_s for r in good])}
    goodput = attainment = met = None
    misses: list[str] = []
    good_tokens = sum(r.output_tokens for r in good)
    if slo is not None:
        meeting = sum(r.meets(slo) for r in measured)
        attainment = meeting / len(good + failed) if good or failed else None
        if slo.per_stage:
            misses = objectives.misses(slo, {k: v.p99 for k, v in stats.items()}, len(failed), len(good + failed))
            met = not misses
        goodput = rate(meeting) if met is not False else 0.0  # a stage missing its objectives has no goodput
        good_tokens = sum(r.output_tokens for r in measured if r.meets(slo)) if met is not False else 0
    lag = LatencyStats.of([x for r in measured if (x := r.dispatch_lag_s) is not None])
    sent = [r for r in measured if r.submitted_s is not None]
    ratio = sent_rate_ratio([r.scheduled_s for r in sent], [r.submitted_s for r in sent]) if open_loop else None
    rates = request_rates(measured) if open_loop else None
    pace = saturation([r.scheduled_s for r in measured], [r.finished_s for r in records if r.finished_s is not None],
                      end_s) if open_loop else None
    counted = [r.counts for r in good if r.counts is not None]
    disagreements = [why for c in counted if (why := c.disagreement()) is not None]
    invalid = None
    if rules is not None:
        invalid = judge(rules, Figures(status, stop_reason, open_loop, duration, len(good), len(failed), lag.p99,
                                       ratio, pace, ttft_moved(good, stats["ttft_s"]), len(cut),
                                       None if drain is None else drain[1], tuple(c.shares() for c in clocks),
                                       len(counted), len(disagreements), next(iter(disagreements), None)))

    return StageSummary(
        stage=stage,
        status=status,
        requests=len(good),
        errors=len(failed),
        warmup_requests=len(records) - len(measured),
        duration_s=duration,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        output_tokens_per_s=rate(output_tokens),
        total_tokens_per_s=rate(output_tokens + prompt_tokens),
        requests_per_s=rate(len(good)),
        goodput_requests_per_s=goodput,
        slo_attainment=attainment,
        good_output_tokens=good_tokens,
        **stats,
        queue_s=LatencyStats.of([q for r in good if (q := r.queue_s) is not None]),
        dispatch_lag_s=lag,
        kv_cache_occupancy_peak=kv_cache_occupancy_peak,
        slo_met=met,
        slo_misses=misses,
        sent_rate_ratio=ratio,
        counts_checked=len(counted),
        counts_disagree=len(disagreements),
        offered_requests_per_s=None if rates is None else rates[0],
        completed_requests_per_s=None if rates is None else rates[1],
        valid=None if invalid is None else not invalid,
        invalid=invalid or [],
        stop_reason=stop_reason,
        cut=len(cut),
        cut_share=len(cut) / sent_count if sent_count else None,
        drain_bound_s=None if drain is None else drain[1],
        drain_s=drained,
        clocks=list(clocks),
    )


def request_rates(measured: list[RequestRecord]) -> tuple[float, float] | None:
    """An open loop's offered and completed requests a second: the measured requests sent, over their schedule from
    one mean gap before the first (n requests at a rate r span n / r, so a schedule at r offers r); and those of them
    answered (succeeded or failed, not cut), over the same start to the last answer (or the last send, where that is
    later). Fewer requests over a span at least as long: completed ≤ offered. None with fewer than two sent, or all
    at one instant."""
    sent = [r for r in measured if r.submitted_s is not None]
    times = sorted(r.scheduled_s for r in sent)
    if len(times) < 2 or times[-1] <= times[0]:
        return None
    start = times[0] - (times[-1] - times[0]) / (len(times) - 1)
    answers = [r.finished_s for r in sent if r.finished_s is not None and not r.cut]
    until = max([times[-1], *answers])
    return len(times) / (times[-1] - start), len(answers) / (until - start)


def ttft_moved(good: list[RequestRecord], ttft: LatencyStats) -> tuple[tuple[str, float, float], ...]:
    """What dispatch lag does to TTFT (measure/verdicts.py judges it): at p50, p90 and p99, TTFT from the scheduled time
    (the figure) beside TTFT from the request's sending (the figure had the client sent it on time). Requests not
    sent (lag unknown) count as sent on time."""
    sent = LatencyStats.of([r.ttft_s - (r.dispatch_lag_s or 0.0) for r in good])
    return tuple((name, late, early) for name in ("p50", "p90", "p99")
                 if (late := getattr(ttft, name)) is not None and (early := getattr(sent, name)) is not None)
