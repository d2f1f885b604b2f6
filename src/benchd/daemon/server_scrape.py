"""A run's reads of the server's Prometheus page, on a daemon thread of their own: its server timeline and gauges."""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from benchd.measure.server_metrics import MAX_PAGE_BYTES, PageError, ServerReading, hit_rate, increase, read
from benchd.telemetry.server import ServerGauges

log = logging.getLogger("benchd.server")

MAX_TIMEOUT_S = 5.0  # one read waits at most max(1 s, the interval) and never more than this
MAX_SAMPLES = 100_000  # a day at the shortest interval would pass it: later samples are counted, not kept


@dataclass(frozen=True, slots=True)
class ServerSample:
    t: float  # perf_counter(), midway through the read: the run's clock
    reading: ServerReading


class ServerScrape:
    """Reads url every interval_s from start() to stop(). Nothing it meets reaches the run: a failed read (refused,
    timed out, an HTTP error, a page that is not Prometheus text or names no known server) is counted and the first
    of each kind becomes the run's warning; stop() never waits for a read under way."""

    def __init__(self, url: str, interval_s: float = 1.0, gauges: ServerGauges | None = None,
                 opener: Callable[..., AbstractContextManager[Any]] = urllib.request.urlopen) -> None:
        self.url, self.interval_s, self.gauges, self.opener = url, interval_s, gauges, opener
        self.timeout_s = min(max(1.0, interval_s), MAX_TIMEOUT_S)
        self.samples: list[ServerSample] = []
        self.failures = 0
        self.errors: dict[str, str] = {}  # the first message of each kind of failure
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="benchd-server-metrics", daemon=True)

    def start(self) -> ServerScrape:
        self._thread.start()
        return self

    def stop(self) -> None:
        """No read counts after this: one under way is dropped when it completes."""
        with self._lock:
            self._stop.set()

    def _loop(self) -> None:
        due = time.perf_counter()
        while not self._stop.is_set():
            self._read_once()
            due = max(due + self.interval_s, time.perf_counter())  # late reads are not caught up
            self._stop.wait(due - time.perf_counter())

    def _read_once(self) -> None:
        before = time.perf_counter()
        try:
            with self.opener(urllib.request.Request(self.url, headers={"Accept": "text/plain"}),
                             timeout=self.timeout_s) as response:
                page = response.read(MAX_PAGE_BYTES + 1)
            if len(page) > MAX_PAGE_BYTES:
                raise PageError(f"the page is over {MAX_PAGE_BYTES >> 20} MiB")
            reading = read(page.decode("utf-8", "replace"))
        except urllib.error.HTTPError as error:
            self._failed("http", f"HTTP {error.code} {error.reason}" + (
                ": the server exposes no Prometheus metrics there" if error.code == 404 else ""))
            return
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            self._failed("connect", f"{type(reason).__name__}: {reason}")
            return
        except PageError as error:
            self._failed("page", str(error))
            return
        sample = ServerSample((before + time.perf_counter()) / 2, reading)
        with self._lock:  # the run's timeline and gauges end with stop()
            if self._stop.is_set():
                return
            if len(self.samples) < MAX_SAMPLES:
                self.samples.append(sample)
            if self.gauges is not None:
                self.gauges.update(self.samples[0].reading, reading)

    def _failed(self, kind: str, message: str) -> None:
        with self._lock:
            if self._stop.is_set():
                return
            self.failures += 1
            if self.gauges is not None:
                self.gauges.failed()
            if kind not in self.errors:
                self.errors[kind] = message
                log.warning("reading the server's metrics at %s failed: %s", self.url, message)

    def timeline(self, origin: float) -> dict:
        """The run's server timeline (plain data, stored as JSON): times in seconds from origin; preemptions since
        the first read, per interval and in all; the prefix-cache hit rate per interval and over the run."""
        with self._lock:
            samples, failures, errors = list(self.samples), self.failures, dict(self.errors)
        readings = [s.reading for s in samples]
        first, last = (readings[0], readings[-1]) if readings else (None, None)
        out: dict = {
            "url": self.url, "interval_s": self.interval_s, "server": first.server if first else None,
            "scrapes": len(samples), "failures": failures,
            "warning": _warning(self.url, len(samples), failures, errors),
            "t": [s.t - origin for s in samples],
            "kv_cache_usage": [r.kv_cache_usage for r in readings],
            "requests_running": [r.requests_running for r in readings],
            "requests_waiting": [r.requests_waiting for r in readings],
            "preemptions": [increase(first.preemptions_total, r.preemptions_total) for r in readings] if first else [],
            "preemptions_per_s": [None] * bool(samples) + [
                d / (b.t - a.t) if (d := increase(a.reading.preemptions_total, b.reading.preemptions_total))
                is not None and b.t > a.t else None for a, b in pairwise(samples)],
            "prefix_cache_hit_rate": ([first.prefix_hit_rate] if first else []) + [
                hit_rate(a, b) for a, b in pairwise(readings)],
            "preemptions_total": increase(first.preemptions_total, last.preemptions_total) if first and last else None,
            "prefix_cache_hit_rate_run": hit_rate(first, last) if first and last and len(readings) > 1 else None,
        }
        return out


def _warning(url: str, scrapes: int, failures: int, errors: dict[str, str]) -> str | None:
    if not failures:
        return None
    return (f"{failures} of {scrapes + failures} reads of the server's metrics at {url} failed"
            f"{'' if scrapes else ' (no server timeline)'}: " + "; ".join(errors.values()))
