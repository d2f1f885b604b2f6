"""The worker's watch over a stage as it runs: its stop rules (errors, a backlog that keeps growing), each
returning why the stage stops."""

from __future__ import annotations

import math
from collections import deque

from benchd.measure.verdicts import MIN_GROWTH, NOISE_SIGMAS
from benchd.spec.validity import ValidityRules

# The error rate stops a stage only once this many measured requests have finished: one failure among the first
# few is no rate.
MIN_FINISHED_FOR_RATE = 20


class Backlog:
    """Over-saturation, from the stage's own counts sampled every 100 ms: over the last window_s the requests in flight
    (sent − finished) never drained to zero and grew by more than NOISE_SIGMAS standard deviations of what a stable
    queue's count wanders by, √(sent + finished in the window) (each a counting process, roughly Poisson), and by at
    least MIN_GROWTH. A rate above the service rate grows the backlog linearly, past that bound in about
    9·(arrival + service rate) / excess² seconds (50 % over 50 requests/s: ~3 s; 10 %: ~40 s); a stable queue
    wanders as √t. Simulated M/M/8 queues (tests/measure/test_watch.py) never tripped it at loads up to 0.9 in 10
    minutes with a 10 s window; near 1 a queue is all but unstable, and may."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.samples: deque[tuple[float, int, int]] = deque()  # (t, sent, finished)

    def add(self, t: float, sent: int, finished: int) -> str | None:
        """A reason to stop, or None."""
        samples = self.samples
        samples.append((t, sent, finished))
        while len(samples) > 1 and samples[1][0] <= t - self.window_s:
            samples.popleft()
        start, sent0, finished0 = samples[0]
        if t - start < self.window_s * 0.95:
            return None
        if any(a - d <= 0 for _, a, d in samples):
            return None
        before, now = sent0 - finished0, sent - finished
        noise = math.sqrt((sent - sent0) + (finished - finished0))
        if now - before <= max(MIN_GROWTH, NOISE_SIGMAS * noise):
            return None
        return (f"over-saturated: requests in flight grew from {before} to {now} in {self.window_s:g} s without "
                f"draining ({sent - sent0} sent, {finished - finished0} finished)")


class Watch:
    """A stage's stop rules in the worker. finished() runs on the dispatcher's thread, load() on the load sampler's;
    each returns a reason to stop, or None."""

    def __init__(self, rules: ValidityRules, open_loop: bool) -> None:
        self.rules = rules
        self.errors = self.finished_count = 0
        self.backlog = Backlog(rules.oversaturation_s) if rules.oversaturation_s and open_loop else None

    def finished(self, ok: bool) -> str | None:
        self.finished_count += 1
        if ok:
            return None
        self.errors += 1
        rules = self.rules
        if rules.max_errors is not None and self.errors > rules.max_errors:
            return f"{self.errors} measured requests failed, over max_errors {rules.max_errors}"
        if (rules.max_error_rate is not None and self.finished_count >= MIN_FINISHED_FOR_RATE
                and self.errors / self.finished_count > rules.max_error_rate):
            return (f"error rate {self.errors / self.finished_count:.1%} ({self.errors} of {self.finished_count}) "
                    f"over max_error_rate {rules.max_error_rate:.1%}")
        return None

    def load(self, t: float, sent: int, finished: int) -> str | None:
        return self.backlog.add(t, sent, finished) if self.backlog is not None else None
