"""Raw per-request stamps, the latencies derived from them, and a stage's summary."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel

from benchd.hardware.clocks import GPUClocks
from benchd.measure import latency
from benchd.measure.verdicts import Figures, Invalidity, judge, saturation, sent_rate_ratio
from benchd.spec import slo as objectives
from benchd.spec.slo import SLO
from benchd.spec.validity import ValidityRules

# The error of a request still in flight when its stage's drain ended (loadgen/stage.py): cancelled by benchd at the
# stage's end, counted as cut, apart from the failed ones (docs/figures.md).
CUT = "cut: still in flight when the stage's drain ended"


@dataclass(slots=True)
class RequestRecord:
    """Everything measured about one request: perf_counter() seconds, one process."""

    index: int
    request_id: str
    warmup: bool
    prompt_tokens: int
    max_new_tokens: int
    scheduled_s: float  # t_s: when the schedule (open loop) or a freed slot (closed loop) said to send it
    submitted_s: float | None = None
    admitted_s: float | None = None  # the engine started work on it (left its waiting queue)
    arrival_s: list[float] = field(default_factory=list)  # one stamp per arrival (token or stream chunk)
    arrival_tokens: list[int] = field(default_factory=list)  # tokens carried by each arrival
    token_ids: list[int] = field(default_factory=list)
    finished_s: float | None = None
    error: str | None = None
    trace_id: str | None = None  # the request's span, when it was sampled
    span_id: str | None = None  # its id, decided when it is sent (a server engine's traceparent header)

    @property
    def done(self) -> bool:
        return self.finished_s is not None

    @property
    def ok(self) -> bool:
        return self.finished_s is not None and self.error is None and bool(self.arrival_s)

    @property
    def cut(self) -> bool:
        return self.error == CUT

    @property
    def output_tokens(self) -> int:
        return sum(self.arrival_tokens)

    @property
    def dispatch_lag_s(self) -> float | None:
        return None if self.submitted_s is None else self.submitted_s - self.scheduled_s

    @property
    def queue_s(self) -> float | None:
        return None if self.admitted_s is None else self.admitted_s - self.scheduled_s

    @property
    def ttft_s(self) -> float | None:
        return latency.ttft(self.scheduled_s, self.arrival_s)

    @property
    def e2e_s(self) -> float | None:
        return latency.e2e(self.scheduled_s, self.arrival_s)

    @property
    def tpot_s(self) -> float | None:
        return latency.tpot(self.arrival_s, self.output_tokens)

    def itl_s(self) -> list[float]:
        return latency.itl(self.arrival_s, self.arrival_tokens)

    def meets(self, slo: SLO) -> bool:
        if not self.ok:
            return False
        if slo.ttft_s is not None and self.ttft_s > slo.ttft_s:
            return False
        tpot = self.tpot_s
        return slo.tpot_s is None or tpot is None or tpot <= slo.tpot_s

    def to_row(self, stage: str, origin: float) -> dict[str, Any]:
        """The record as plain data with every stamp in seconds from origin (the stage's start): what the store
        keeps and the API returns. from_row() gives the record back, so every latency can be derived again."""

        def rel(t: float | None) -> float | None:
            return None if t is None else t - origin

        return {
            "stage": stage, "index": self.index, "request_id": self.request_id, "warmup": self.warmup,
            "prompt_tokens": self.prompt_tokens, "max_new_tokens": self.max_new_tokens,
            "output_tokens": self.output_tokens, "scheduled_s": rel(self.scheduled_s),
            "submitted_s": rel(self.submitted_s), "admitted_s": rel(self.admitted_s),
            "finished_s": rel(self.finished_s), "dispatch_lag_s": self.dispatch_lag_s, "queue_s": self.queue_s,
            "ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s, "error": self.error,
            "trace_id": self.trace_id, "arrival_s": [t - origin for t in self.arrival_s],
            "arrival_tokens": list(self.arrival_tokens), "token_ids": list(self.token_ids) or None,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> RequestRecord:
        return cls(
            index=row["index"], request_id=row["request_id"], warmup=bool(row["warmup"]),
            prompt_tokens=row["prompt_tokens"], max_new_tokens=row["max_new_tokens"],
            scheduled_s=row["scheduled_s"], submitted_s=row["submitted_s"], admitted_s=row["admitted_s"],
            arrival_s=list(row["arrival_s"] or []), arrival_tokens=list(row["arrival_tokens"] or []),
            token_ids=list(row.get("token_ids") or []), finished_s=row["finished_s"], error=row["error"],
            trace_id=row["trace_id"],
        )


class RecordBook:
    """A stage's records, changed only by the events engines report (the worker keeps one to dispatch, the daemon
    one rebuilt from the worker's events to derive every figure): one definition of what an event does to a
    record. Each method returns what changed, or None when the event changes nothing (a record already ended)."""

    __slots__ = ("records", "measured_tokens", "measured_from_s", "ended")

    def __init__(self) -> None:
        self.records: dict[str, RequestRecord] = {}
        # Running figures, so that what a live stage reports costs the same at its millionth request as at its first
        self.measured_tokens = 0  # output tokens of non-warm-up requests so far
        self.measured_from_s: float | None = None  # the earliest scheduled time of a measured request sent so far
        self.ended = 0  # requests finished so far

    def request(self, index: int, request_id: str, warmup: bool, prompt_tokens: int, max_new_tokens: int,
                scheduled_s: float, submitted_s: float | None = None, span_id: str | None = None) -> RequestRecord:
        record = RequestRecord(index=index, request_id=request_id, warmup=warmup, prompt_tokens=prompt_tokens,
                               max_new_tokens=max_new_tokens, scheduled_s=scheduled_s, submitted_s=submitted_s,
                               span_id=span_id)
        self.records[request_id] = record
        if submitted_s is not None:
            self._sent(record)
        return record

    def submitted(self, request_id: str, t: float) -> RequestRecord:
        record = self.records[request_id]
        record.submitted_s = t
        self._sent(record)
        return record

    def _sent(self, record: RequestRecord) -> None:
        if not record.warmup and (self.measured_from_s is None or record.scheduled_s < self.measured_from_s):
            self.measured_from_s = record.scheduled_s

    def admitted(self, request_id: str, t: float) -> RequestRecord | None:
        record = self.records[request_id]
        if record.admitted_s is not None:
            return None
        record.admitted_s = t
        return record

    def tokens(self, request_id: str, stamps: Sequence[float], counts: Sequence[int] | None,
               token_ids: Sequence[int] = ()) -> tuple[RequestRecord, int] | None:
        """Arrivals at stamps, carrying counts tokens each (None: one each); the record and the index of its first
        new arrival."""
        record = self.records[request_id]
        if record.finished_s is not None or not stamps:
            return None
        start = len(record.arrival_s)
        record.arrival_s.extend(stamps)
        record.arrival_tokens.extend(counts if counts is not None else [1] * len(stamps))
        record.token_ids.extend(token_ids)
        if not record.warmup:
            self.measured_tokens += sum(counts) if counts is not None else len(stamps)
        return record, start

    def prompt(self, request_id: str, n: int) -> tuple[RequestRecord, int]:
        """The prompt's length as a server counted it; the record and the change."""
        record = self.records[request_id]
        before, record.prompt_tokens = record.prompt_tokens, n
        return record, n - before

    def finished(self, request_id: str, t: float, error: str | None) -> RequestRecord | None:
        record = self.records[request_id]
        if record.finished_s is not None:  # the first end wins (a cancel can race the last token)
            return None
        record.error, record.finished_s = error, t
        self.ended += 1
        return record


# ---- summaries ---------------------------------------------------------------------------------

PERCENTILES = (50, 90, 95, 99)


class LatencyStats(BaseModel):
    count: int
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None

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


class StageSummary(BaseModel):
    stage: str
    status: str
    requests: int  # measured requests that succeeded
    errors: int  # measured requests that failed or were cancelled (those cut at the drain's end apart)
    warmup_requests: int
    duration_s: float  # the measured window: first measured scheduled time → last measured token
    prompt_tokens: int
    output_tokens: int
    output_tokens_per_s: float
    total_tokens_per_s: float
    requests_per_s: float
    goodput_requests_per_s: float | None = None
    slo_attainment: float | None = None
    ttft_s: LatencyStats
    itl_s: LatencyStats
    tpot_s: LatencyStats
    e2e_s: LatencyStats
    queue_s: LatencyStats
    dispatch_lag_s: LatencyStats
    kv_cache_occupancy_peak: float | None = None
    # The stage objectives of the SLO (p99s, error rate): met or not, and each one missed.
    slo_met: bool | None = None
    slo_misses: list[str] = []
    # Open loop: requests sent per second over requests scheduled per second (1: every request left on time).
    sent_rate_ratio: float | None = None
    # Open loop (validity.Saturation; None: too short to judge): requests offered per second over the latter half of
    # its sending, and requests answered per second from there to the last answer, the engine's pace.
    offered_requests_per_s: float | None = None
    completed_requests_per_s: float | None = None
    # The verdict (measure/verdicts.py): valid, or invalid with each reason; None: stored before verdicts were kept.
    valid: bool | None = None
    invalid: list[Invalidity] = []
    stop_reason: str | None = None  # why a stopped stage stopped early
    # The drain (stop.drain_s): measured requests still in flight when it ended, cut (cancelled at the stage's end,
    # their tokens kept: the figures over the completed ones lean short), their share of the measured requests
    # sent, the drain's bound, and how long the stage drained: from its stop to its last request's end or the cut.
    cut: int = 0
    cut_share: float | None = None
    drain_bound_s: float | None = None
    drain_s: float | None = None
    # Each GPU the stage ran on, over the hardware sampler's reads during it (hardware/clocks.py): the share of
    # samples under each clock event and the mean SM clock against its maximum; none on a CPU.
    clocks: list[GPUClocks] = []
    # How far from the hardware (benchd.measure.roofline.Roofline.as_dict): None where the engine counted no steps
    # or the device's limits are unknown.
    roofline: dict[str, float | int | str] | None = None


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
    if slo is not None:
        meeting = sum(r.meets(slo) for r in measured)
        attainment = meeting / len(good + failed) if good or failed else None
        if slo.per_stage:
            misses = objectives.misses(slo, {k: v.p99 for k, v in stats.items()}, len(failed), len(good + failed))
            met = not misses
        goodput = rate(meeting) if met is not False else 0.0  # a stage missing its objectives has no goodput
    lag = LatencyStats.of([x for r in measured if (x := r.dispatch_lag_s) is not None])
    sent = [r for r in measured if r.submitted_s is not None]
    ratio = sent_rate_ratio([r.scheduled_s for r in sent], [r.submitted_s for r in sent]) if open_loop else None
    pace = saturation([r.scheduled_s for r in measured], [r.finished_s for r in records if r.finished_s is not None],
                      end_s) if open_loop else None
    invalid = None
    if rules is not None:
        invalid = judge(rules, Figures(status, stop_reason, open_loop, duration, len(good), len(failed), lag.p99,
                                       ratio, pace, ttft_moved(good, stats["ttft_s"]), len(cut),
                                       None if drain is None else drain[1], tuple(c.shares() for c in clocks)))

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
        **stats,
        queue_s=LatencyStats.of([q for r in good if (q := r.queue_s) is not None]),
        dispatch_lag_s=lag,
        kv_cache_occupancy_peak=kv_cache_occupancy_peak,
        slo_met=met,
        slo_misses=misses,
        sent_rate_ratio=ratio,
        offered_requests_per_s=None if pace is None else pace.offered_per_s,
        completed_requests_per_s=None if pace is None else pace.completed_per_s,
        valid=None if invalid is None else not invalid,
        invalid=invalid or [],
        stop_reason=stop_reason,
        cut=len(cut),
        cut_share=len(cut) / sent_count if sent_count else None,
        drain_bound_s=None if drain is None else drain[1],
        drain_s=drained,
        clocks=list(clocks),
    )


def ttft_moved(good: list[RequestRecord], ttft: LatencyStats) -> tuple[tuple[str, float, float], ...]:
    """What dispatch lag does to TTFT (measure/verdicts.py judges it): at p50, p90 and p99, TTFT from the scheduled time
    (the figure) beside TTFT from the request's sending (the figure had the client sent it on time). Requests not
    sent (lag unknown) count as sent on time."""
    sent = LatencyStats.of([r.ttft_s - (r.dispatch_lag_s or 0.0) for r in good])
    return tuple((name, late, early) for name in ("p50", "p90", "p99")
                 if (late := getattr(ttft, name)) is not None and (early := getattr(sent, name)) is not None)
