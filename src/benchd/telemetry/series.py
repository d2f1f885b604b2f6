"""Series for the per-token path: a family of label sets, each one writer's, updated cheaply and read at scrape
time (histograms with exemplars, counters, gauges), at most a set number of series a family."""

from __future__ import annotations

import math
import threading
import time
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString

MAX_SERIES = 10_000  # per family, whatever clients send


def _escaped(char: str) -> str:
    return char if char.isprintable() else f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def clean(values: tuple[str, ...]) -> tuple[str, ...]:
    """Label values as Prometheus gets them: every character Python does not print (controls such as CR, ESC and
    BEL, the line and paragraph separators, the formatting ones: bidi overrides and isolates, zero widths) written
    as its escape (\\x1b, \\u202e), so that no name a client sets (a matrix's values, a label, a model) splits a line,
    moves a terminal's cursor or reorders what a dashboard shows. Printable values, nearly all, come back as given."""
    if all(value.isprintable() for value in values):
        return values
    return tuple(value if value.isprintable() else "".join(map(_escaped, value)) for value in values)


class _HistogramSeries:
    """One label set's buckets; observe() is the per-token hot path: a bisect and two additions."""

    __slots__ = ("bounds", "counts", "sum", "exemplars")

    def __init__(self, bounds: list[float]) -> None:
        self.bounds = bounds  # ends with +Inf
        self.counts = [0] * len(bounds)  # per bucket, not cumulative
        self.sum = 0.0
        self.exemplars: list[Exemplar | None] = [None] * len(bounds)

    def observe(self, value: float, exemplar: dict[str, str] | None = None) -> None:
        i = bisect_left(self.bounds, value)  # the first bucket whose upper bound is >= value ("le")
        self.counts[i] += 1
        self.sum += value
        if exemplar is not None:
            self.exemplars[i] = Exemplar(exemplar, value, time.time())


class _CounterSeries:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class HotFamily(Collector):
    """Series by label values, for the per-token path: prometheus_client's Histogram takes two locks and validates
    exemplar labels on every observation (about 2 µs with an exemplar); these take a fraction of that. They assume
    one writing thread per series, which holds because one run at a time owns the engine and its token thread
    (the dispatcher writes only its own series). Read by collect() at scrape time.

    Series can be removed (a workload evicted from the live set) and there are at most max_series of them: beyond,
    the least recently bound goes, so no client can grow the page without bound."""

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...], registry: CollectorRegistry,
                 max_series: int = MAX_SERIES, on_evict: Callable[[str, int], None] | None = None) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, labelnames
        self.series: OrderedDict[tuple[str, ...], Any] = OrderedDict()
        self.max_series, self.on_evict = max_series, on_evict
        self._lock = threading.Lock()  # only for adding, binding and removing series
        registry.register(self)

    def _new_series(self) -> Any:
        raise NotImplementedError

    def labels(self, *values: str) -> Any:
        values = clean(values)
        with self._lock:
            series = self.series.get(values)
            if series is None:
                series = self.series[values] = self._new_series()
                if len(self.series) > self.max_series:
                    self.series.popitem(last=False)
                    if self.on_evict is not None:
                        self.on_evict("max_series", 1)
            else:
                self.series.move_to_end(values)
        return series

    def remove(self, *values: str) -> None:
        """Remove one series (its label values in order), if it is there: a scrape no longer finds it."""
        values = clean(values)
        with self._lock:
            self.series.pop(values, None)

    def forget(self, label: str, value: str) -> int:
        """Remove every series whose label has this value; how many went."""
        if label not in self.labelnames:
            return 0
        position, (value,) = self.labelnames.index(label), clean((value,))
        with self._lock:
            gone = [values for values in self.series if values[position] == value]
            for values in gone:
                del self.series[values]
        return len(gone)


class HotHistogram(HotFamily):
    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...], bounds: list[float],
                 registry: CollectorRegistry, **kwargs: Any) -> None:
        self.bounds = [*bounds, math.inf]
        super().__init__(name, documentation, labelnames, registry, **kwargs)

    def _new_series(self) -> _HistogramSeries:
        return _HistogramSeries(self.bounds)

    def describe(self) -> list[HistogramMetricFamily]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> list[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, series in list(self.series.items()):
            counts, exemplars, total = list(series.counts), list(series.exemplars), series.sum
            buckets, cumulative = [], 0
            for bound, count, exemplar in zip(self.bounds, counts, exemplars):
                cumulative += count
                le = floatToGoString(bound)
                buckets.append((le, cumulative, exemplar) if exemplar is not None else (le, cumulative))
            family.add_metric(values, buckets, total)
        return [family]


class HotCounter(HotFamily):
    def _new_series(self) -> _CounterSeries:
        return _CounterSeries()

    def describe(self) -> list[CounterMetricFamily]:
        return [CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> list[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, series in list(self.series.items()):
            family.add_metric(values, series.value)
        return [family]


class _GaugeSeries:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = float(value)

    def set_to_current_time(self) -> None:
        self.value = time.time()


class HotGauge(HotFamily):
    def _new_series(self) -> _GaugeSeries:
        return _GaugeSeries()

    def describe(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> list[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, series in list(self.series.items()):
            family.add_metric(values, series.value)
        return [family]
