"""Capacity under SLO: the highest request rate whose stage meets the SLO's stage objectives, searched probe by probe
(bracketing, then bisection). The worker drives the search from its summaries; the daemon replays it over the same
summaries (records.summarize, one definition) to report the figure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

from benchd.measure.summary import StageSummary
from benchd.measure.verdicts import CLIENT_CHECKS
from benchd.spec.profiles import Capacity, describe_profile

Outcome = Literal["pass", "fail", "unusable"]


def outcome(summary: StageSummary) -> Outcome:
    """pass: a valid stage that meets its stage objectives. fail: one that misses them, or that the load broke (a stop
    rule ended it: over-saturation, errors; completions fell behind offers; requests still in flight when its drain
    ended; or too many errors): the rate is beyond the capacity even where its SLO held, and even where the client was
    late too (a max_concurrency cap holds requests back exactly when the engine cannot keep up). unusable: one the
    client spoiled (late dispatch, too short, not run to its end): it says nothing about the rate."""
    # The GPU's clocks are judged in the daemon after the run (result.RunResult.valid), never here: the worker that
    # decides the next probe from this outcome cannot see them, and the daemon replays its decisions.
    checks = {i.check for i in summary.invalid} - {"throttled"}
    if checks & {"stopped", "oversaturated", "cut"}:
        return "fail"
    if checks & CLIENT_CHECKS or summary.valid is None:
        return "unusable"
    if checks:  # max_errors, max_error_rate
        return "fail"
    return "pass" if summary.slo_met else "fail"


class Probe(BaseModel):
    stage: int  # its index among the run's stages
    rate: float
    outcome: Outcome
    goodput_requests_per_s: float | None
    reasons: list[str]  # what made it fail or unusable


class CapacityResult(BaseModel):
    """The run's figure: requests_per_s is the highest rate that passed (None: none did)."""

    requests_per_s: float | None
    goodput_requests_per_s: float | None  # measured at that rate
    low: float | None  # highest rate that passed
    high: float | None  # lowest rate that failed
    complete: bool  # the search ended by its own rule, every decision on usable probes
    reason: str  # how it ended
    probes: list[Probe]


class Search:
    """Rates double from start_rate while probes pass (halve while they fail) until one of each is known, then the
    interval between the highest pass and the lowest fail is bisected until (high − low) / high ≤ precision. An
    unusable probe is run again at its rate, up to retries times, then the search ends there."""

    def __init__(self, profile: Capacity) -> None:
        self.profile = profile
        self.max_rate = profile.max_rate
        self.low: float | None = None
        self.high: float | None = None
        self.rate: float | None = profile.start_rate  # the next probe's; None: done
        self.tries = 0  # unusable probes in a row at self.rate
        self.probes = 0
        self.reason = "the run ended before the search did"
        self.complete = False

    def next_rate(self) -> float | None:
        return self.rate

    def record(self, summary: StageSummary) -> Outcome:
        """A probe at next_rate() ended with this summary: decide the next rate."""
        rate, p = self.rate, self.profile
        assert rate is not None, "the search has ended"
        result = outcome(summary)
        self.probes += 1
        if result == "unusable":
            self.tries += 1
            if self.tries > p.retries:
                why = "; ".join(i.message for i in summary.invalid) or "no verdict"
                self._end(f"the probe at {rate:g} requests/s was unusable {self.tries} times ({why}): the capacity is "
                          "not known above the highest rate that passed", complete=False)
        else:
            self.tries = 0
            if result == "pass":
                self.low = rate if self.low is None else max(self.low, rate)
            else:
                self.high = rate if self.high is None else min(self.high, rate)
            self.rate = self._next(rate)
        if self.rate is not None and self.probes >= p.max_probes:
            self._end(f"max_probes ({p.max_probes}) reached", complete=False)
        return result

    def _next(self, rate: float) -> float | None:
        p = self.profile
        if self.high is None:  # every probe so far passed: up
            if self.max_rate is not None and rate >= self.max_rate:
                self._end(f"{rate:g} requests/s (max_rate) met the SLO: the capacity is at least that")
                return None
            return rate * 2 if self.max_rate is None else min(rate * 2, self.max_rate)
        if self.low is None:  # every probe so far failed: down
            if rate / 2 < p.min_rate:
                self._end(f"no rate down to {rate:g} requests/s met the SLO (min_rate {p.min_rate:g})")
                return None
            return rate / 2
        if (self.high - self.low) / self.high <= p.precision:
            self._end(f"bracketed within {p.precision:.0%}: {self.low:g} passed, {self.high:g} failed")
            return None
        return (self.low + self.high) / 2

    def _end(self, reason: str, complete: bool = True) -> None:
        self.rate, self.reason, self.complete = None, reason, complete
        return None


def conclude(profile: Capacity, stages: Sequence[tuple[str, StageSummary]]) -> CapacityResult:
    """The search replayed over the run's stages in order ((label, summary) each): the rate each probe ran at is the
    one the search chose, checked against the stage's label."""
    search = Search(profile)
    probes: list[Probe] = []
    for index, (label, summary) in enumerate(stages):
        rate = search.next_rate()
        if rate is None:
            break
        if label != describe_profile(profile.probe(rate)):
            search._end(f"stage {index} ({label}) is not the probe the search chose at {rate:g} requests/s",
                        complete=False)
            break
        result = search.record(summary)
        reasons = [i.message for i in summary.invalid] if result == "unusable" else \
            [*(i.message for i in summary.invalid), *summary.slo_misses] if result == "fail" else []
        probes.append(Probe(stage=index, rate=rate, outcome=result,
                            goodput_requests_per_s=summary.goodput_requests_per_s, reasons=reasons))
    best = next((p for p in probes if p.outcome == "pass" and p.rate == search.low), None)
    return CapacityResult(requests_per_s=search.low,
                          goodput_requests_per_s=best.goodput_requests_per_s if best else None,
                          low=search.low, high=search.high, complete=search.complete, reason=search.reason,
                          probes=probes)
