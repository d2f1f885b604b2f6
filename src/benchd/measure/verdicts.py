"""A stage's verdict, as MLPerf LoadGen has it: every rule of spec/validity.py its figures break (dispatch lag,
sent rate, errors, over-saturation, cut requests, throttled clocks), each with its reason."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass

from benchd.hardware.clocks import CLOCK_EVENT_NAMES, SLOWDOWN_EVENTS, ClockShares
from benchd.measure.records import COUNT_TOLERANCE_SHARE, COUNT_TOLERANCE_TOKENS
from benchd.spec.fields import Documented
from benchd.spec.validity import ValidityRules

# Over-saturation: the in-flight count's growth over the window must exceed both this many requests and
# NOISE_SIGMAS standard deviations of a stable queue's wandering (Backlog).
MIN_GROWTH = 2
NOISE_SIGMAS = 3.0
# Over-saturation in the verdict (every open loop): completions against offers from the latter half of the stage's
# sending on (SETTLE_SHARE of it lets the queue fill to its steady level: a stage starts empty, and its first
# requests' latency is a ramp, not a backlog). A judged window under MIN_SATURATION_WINDOW_S (a stage sending for
# under about 2 s) is too short to tell a queue that grows from one that fills: it is not judged. The in-flight count
# must grow in each half of the window by at least STEADY_SHARE of its growth: steadily, as a rate beyond the
# engine's grows it, not in one burst (a trace's, a pause's) that drains once the stage ends.
SETTLE_SHARE = 0.5
MIN_SATURATION_WINDOW_S = 1.0
MIN_SATURATION_OFFERS = 20  # offers in the judged window: fewer are no rate (a start-up stall outweighs them)
STEADY_SHARE = 0.25


class Invalidity(Documented):
    check: str
    """The rule broken: unfinished | stopped | dispatch_lag | sent_rate | too_few_requests | min_duration | min_requests
    | max_errors | max_error_rate | oversaturated | cut | throttled | token_counts."""
    #             max_errors | max_error_rate | oversaturated | cut | throttled
    message: str
    """What the stage did, against what the rule allows."""


# Checks that say the client (or the stage's length), not the load, spoiled a stage: run it again.
CLIENT_CHECKS = frozenset({"dispatch_lag", "sent_rate", "too_few_requests", "min_duration", "min_requests",
                           "unfinished"})
# A rate is judged between two requests at least: an open loop that sent fewer is invalid, not on time.
MIN_REQUESTS_FOR_RATE = 2



@dataclass(slots=True, frozen=True)
class Figures:
    """What a verdict reads from a stage (records.summarize computes them from the records)."""

    status: str
    stop_reason: str | None
    open_loop: bool
    duration_s: float
    requests: int  # measured, succeeded
    errors: int  # measured, failed
    dispatch_lag_p99_s: float | None
    sent_rate_ratio: float | None
    saturation: Saturation | None = None  # an open loop's, where its window is long enough
    # What dispatch lag does to TTFT: (percentile, TTFT there from the scheduled time, TTFT there from the sending)
    ttft_moved: tuple[tuple[str, float, float], ...] = ()
    cut: int = 0  # measured requests cut when the stage's drain ended
    drain_s: float | None = None  # that drain's bound
    clocks: tuple[ClockShares, ...] = ()  # each GPU the stage ran on, over its samples
    # A server's requests counted twice (measure/records.py, TokenCounts): how many, and those that disagree (the
    # first's disagreement, to name it)
    counted: int = 0
    disagree: int = 0
    disagreement: str | None = None


@dataclass(slots=True, frozen=True)
class Saturation:
    """An open loop's completions against its offers. Over the judged window (the latter half of its sending): the
    requests offered in each half of it (measured ones, by scheduled time) and those that ended in each (any, failed
    ones too: an answer is a completion), the in-flight count growing by the difference. And the engine's pace: the
    requests answered from the window's start to the last answer (or to where the stage was cut), backlog included,
    as MLPerf LoadGen's completed samples per second (from the window on, so that a stage's first latencies and a
    stall at its start weigh nothing)."""

    window_s: float
    offered: tuple[int, int]
    completed: tuple[int, int]
    answered: int
    answered_over_s: float

    @property
    def offered_per_s(self) -> float:
        return sum(self.offered) / self.window_s

    @property
    def completed_per_s(self) -> float:
        return self.answered / self.answered_over_s

    @property
    def growth(self) -> tuple[int, int]:
        return self.offered[0] - self.completed[0], self.offered[1] - self.completed[1]

    def oversaturated(self, min_ratio: float) -> str | None:
        """A reason when the engine's pace fell behind the offers (under min_ratio of them) with the in-flight count
        growing steadily beyond a stable queue's noise (NOISE_SIGMAS of √(offered + completed), as Backlog); None
        otherwise, and with fewer than MIN_SATURATION_OFFERS offers in the window: no rate."""
        offered = sum(self.offered)
        first, second = self.growth
        growth = first + second
        if offered < MIN_SATURATION_OFFERS or self.completed_per_s >= min_ratio * self.offered_per_s:
            return None
        if growth <= max(MIN_GROWTH, NOISE_SIGMAS * math.sqrt(offered + sum(self.completed))):
            return None
        if min(first, second) < STEADY_SHARE * growth:
            return None
        return (f"over-saturated: completed {self.completed_per_s:.3g} requests/s against {self.offered_per_s:.3g} "
                f"offered ({self.completed_per_s / self.offered_per_s:.0%}) from the last {self.window_s:.3g} s of "
                f"sending on, the requests in flight growing by {first} then {second} over them: the figures measure "
                f"a growing queue; the engine kept up with about {self.completed_per_s:.3g} requests/s")


def saturation(scheduled: Iterable[float], finished: Iterable[float], end_s: float | None = None) -> Saturation | None:
    """scheduled: the measured requests' scheduled times (their last ends the sending); finished: when each of the
    stage's requests ended (warm-up ones too); end_s: where a stage cut short was cut (what it cancelled then is no
    answer). None when the judged window is shorter than MIN_SATURATION_WINDOW_S."""
    offers, ends = sorted(scheduled), sorted(finished)
    if len(offers) < 2:
        return None
    last = offers[-1]
    start = offers[0] + (last - offers[0]) * SETTLE_SHARE
    if last - start < MIN_SATURATION_WINDOW_S:
        return None
    middle = (start + last) / 2

    def between(times: list[float], lo: float, hi: float) -> int:  # in (lo, hi]
        return bisect.bisect_right(times, hi) - bisect.bisect_right(times, lo)

    if end_s is None:
        until = max(last, ends[-1] if ends else last)
        answered = between(ends, start, until)
    else:
        until = max(last, end_s)
        answered = bisect.bisect_left(ends, until) - bisect.bisect_right(ends, start)  # in (start, until)
    return Saturation(last - start, (between(offers, start, middle), between(offers, middle, last)),
                      (between(ends, start, middle), between(ends, middle, last)), answered, until - start)


def judge(rules: ValidityRules, f: Figures) -> list[Invalidity]:
    """Every rule the stage breaks; none: valid."""
    out: list[Invalidity] = []

    def bad(check: str, message: str) -> None:
        out.append(Invalidity(check=check, message=message))

    if f.status == "stopped":
        bad("stopped", f"stopped early: {f.stop_reason or 'a rule was broken'}")
    elif f.status != "succeeded":
        bad("unfinished", f"the stage did not run to its end ({f.status})")
    if f.open_loop and (reason := dispatch_lag(rules, f)) is not None:
        bad("dispatch_lag", reason)
    if f.open_loop:
        ratio = f.sent_rate_ratio
        if f.requests + f.errors + f.cut < MIN_REQUESTS_FOR_RATE:
            bad("too_few_requests", f"too few requests to judge the rate they were sent at: "
                                    f"{f.requests + f.errors + f.cut} "
                                    f"measured, {MIN_REQUESTS_FOR_RATE} needed (run the stage longer)")
        elif ratio is not None and ratio < rules.min_sent_rate_ratio:
            bad("sent_rate", f"sent at {ratio:.1%} of the scheduled rate, under {rules.min_sent_rate_ratio:.0%}")
    if f.duration_s < rules.min_duration_s:
        bad("min_duration", f"measured {f.duration_s:.1f} s, under the minimum of {rules.min_duration_s:g} s")
    finished = f.requests + f.errors
    if finished < rules.min_requests:
        bad("min_requests", f"{finished} measured requests finished, under the minimum of {rules.min_requests}")
    if (f.open_loop and rules.min_completion_ratio and f.saturation is not None
            and (reason := f.saturation.oversaturated(rules.min_completion_ratio)) is not None):
        bad("oversaturated", reason)
    sent = finished + f.cut
    # a drain's cut; a stage that ended early cut what it had in flight, and says why above
    if rules.max_cut_share is not None and f.status == "succeeded" and f.cut and f.cut / sent > rules.max_cut_share:
        drain = f" of {f.drain_s:.3g} s" if f.drain_s is not None else ""
        bad("cut", f"{f.cut} of {sent} measured requests ({f.cut / sent:.1%}) were still in flight when the stage's "
                   f"drain{drain} ended and were cut, over {rules.max_cut_share:.0%}: the longest requests are those "
                   "cut, so the completed ones lean short (run the stage longer, or give it a longer stop.drain_s)")
    if rules.max_slowdown_share is not None and (reason := slowdown(rules.max_slowdown_share, f.clocks)):
        bad("throttled", reason)
    if (rules.max_count_disagreement_share is not None and f.counted
            and f.disagree / f.counted > rules.max_count_disagreement_share):
        bad("token_counts", f"{f.disagree} of {f.counted} requests' token counts by the server's usage and by "
                            f"benchd's tokenizer differ beyond max({COUNT_TOLERANCE_TOKENS} tokens, "
                            f"{COUNT_TOLERANCE_SHARE:.0%}) (first: {f.disagreement}): the figures rest on the "
                            "server's counts")
    if f.status == "stopped":  # its reason says which rule stopped it (what it cancelled then was cut)
        return out
    if rules.max_errors is not None and f.errors > rules.max_errors:
        bad("max_errors", f"{f.errors} measured requests failed, over max_errors {rules.max_errors}")
    if rules.max_error_rate is not None and finished and f.errors / finished > rules.max_error_rate:
        bad("max_error_rate", f"error rate {f.errors / finished:.1%} ({f.errors} of {finished}) over "
                              f"{rules.max_error_rate:.1%}")
    return out


def dispatch_lag(rules: ValidityRules, f: Figures) -> str | None:
    """Why the dispatch lag spoils the stage's latencies, or None: its p99 over the ceiling, if one is set; else TTFT
    p50, p90 or p99 moved by it (from the scheduled time against from the sending) over the floor and a material
    share of the figure; where no request succeeded, the lag's p99 over the floor alone."""
    lag = f.dispatch_lag_p99_s
    if lag is None:
        return None
    why = ("requests left later than scheduled, which adds to each one's TTFT and E2E (a busy client, or a "
           "concurrency cap holding them back)")
    ceiling = rules.max_dispatch_lag_p99_s
    if ceiling is not None and lag > ceiling:
        return f"dispatch lag p99 {lag * 1e3:.2f} ms over the ceiling of {ceiling * 1e3:g} ms: {why}"
    floor, share = rules.dispatch_lag_floor_s, rules.max_dispatch_lag_ttft_share
    if share is None:
        return None
    if not f.ttft_moved:
        return None if lag <= floor else (f"dispatch lag p99 {lag * 1e3:.2f} ms over the floor of {floor * 1e3:g} ms, "
                                          f"with no latency to set it against: {why}")
    over = [f"TTFT {name} by {(late - sent) * 1e3:.3g} ms ({(late - sent) / late:.0%} of its {late * 1e3:.3g} ms)"
            for name, late, sent in f.ttft_moved if late - sent > floor and late - sent > share * late]
    if over:
        return (f"dispatch lag (p99 {lag * 1e3:.2f} ms) moved {', and '.join(over)}, over {share:.0%}: {why}")
    return None


def slowdown(max_share: float, clocks: Iterable[ClockShares]) -> str | None:
    """Each GPU slowed by thermal or hardware slowdown in more than max_share of its samples, naming the events."""
    found = []
    for gpu in clocks:
        if not gpu.samples:
            continue
        events = [(e, share) for e in SLOWDOWN_EVENTS if (share := gpu.events.get(e, 0.0)) > max_share]
        if events:
            named = ", ".join(f"{CLOCK_EVENT_NAMES[e]} ({e}) in {share:.0%}" for e, share in events)
            found.append(f"GPU {gpu.gpu}: {named} of {gpu.samples} sample{'s' if gpu.samples > 1 else ''}")
    if not found:
        return None
    return (f"throttled: {'; '.join(found)}, over {max_share:.0%}: its clocks were cut for its cooling's or board's "
            "sake, so the figures are theirs, not the engine's")


def sent_rate_ratio(scheduled: list[float], submitted: list[float]) -> float | None:
    """Requests sent per second over the sending window, against requests scheduled per second over the scheduled
    window (the same requests): 1 when every request left on time, less when sending fell behind."""
    if len(scheduled) < 2 or len(submitted) < 2:
        return None
    planned, sent = max(scheduled) - min(scheduled), max(submitted) - min(submitted)
    if planned <= 0 or sent <= 0:
        return None
    return planned / sent
