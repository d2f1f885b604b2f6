"""The /metrics page: the node's registry, and its page byte for byte as prometheus_client writes it, with
benchd's per-token families written straight to text (prometheus_client 0.26 escapes every label value character
by character: a page of a few workloads' histograms cost ~10 ms of the daemon's GIL, these take a tenth of that;
tests hold the two pages equal)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CONTENT_TYPE_LATEST as TEXT_TYPE
from prometheus_client import CollectorRegistry
from prometheus_client import generate_latest as generate_text
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS_TYPE
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar, Sample
from prometheus_client.utils import floatToGoString

from benchd.telemetry.metrics import NODE_LABEL
from benchd.telemetry.series import HotCounter, HotFamily, HotGauge, HotHistogram

__all__ = ["OPENMETRICS_TYPE", "TEXT_TYPE", "NodeRegistry", "page"]

EOF = "# EOF\n"


class NodeRegistry(CollectorRegistry):
    """A registry whose collect() adds the node label to every sample of every family, whoever registered it."""

    def __init__(self, node: str, label: str = NODE_LABEL) -> None:
        super().__init__()
        self.node, self.label = node, label
        self._order: list[Collector] = []  # registration order, the order collect() yields in
        self._order_lock = threading.Lock()

    def register(self, collector: Collector) -> None:
        super().register(collector)
        with self._order_lock:
            self._order.append(collector)

    def unregister(self, collector: Collector) -> None:
        super().unregister(collector)
        with self._order_lock:
            self._order.remove(collector)

    def collectors(self) -> list[Collector]:
        with self._order_lock:
            return list(self._order)

    def labelled(self, families: Iterable[Metric]) -> Iterator[Metric]:
        label, node = self.label, self.node
        for family in families:
            labelled = copy.copy(family)  # collectors may keep their families: the copy gets the new samples
            # Built positionally: a third of _replace's cost (scrapes copy every sample).
            labelled.samples = [Sample(s[0], {label: node, **s[1]}, *s[2:]) for s in family.samples]
            yield labelled

    def collect(self) -> Iterator[Metric]:
        return self.labelled(super().collect())


class _Segment:
    """Consecutive collectors of the generic kind, node-labelled, for prometheus_client's writers."""

    def __init__(self, registry: NodeRegistry, collectors: Sequence[Collector]) -> None:
        self.registry, self.collectors = registry, collectors

    def collect(self) -> Iterable:
        for collector in self.collectors:
            yield from self.registry.labelled(collector.collect())


def page(registry: NodeRegistry, openmetrics: bool) -> bytes:
    """Every collector in registration order (as CollectorRegistry.collect yields them)."""
    out: list[str] = []
    generic: list[Collector] = []

    def flush() -> None:
        if generic:
            segment = _Segment(registry, list(generic))
            out.append(generate_openmetrics(segment).decode().removesuffix(EOF) if openmetrics
                       else generate_text(segment).decode())
            generic.clear()

    node = (registry.label, registry.node)
    for collector in registry.collectors():
        if isinstance(collector, HotFamily):
            flush()
            _write(collector, node, openmetrics, out)
        else:
            generic.append(collector)
    flush()
    if openmetrics:
        out.append(EOF)
    return "".join(out).encode()


def _value(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _help(family: HotFamily, name: str, openmetrics: bool) -> str:
    doc = family.documentation
    doc = _value(doc) if openmetrics else doc.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {doc}\n"


def _pairs(family: HotFamily, values: tuple[str, ...], node: tuple[str, str]) -> list[tuple[str, str]]:
    return sorted([*zip(family.labelnames, values), node])


def _join(pairs: Iterable[tuple[str, str]]) -> str:
    return ",".join(f'{name}="{_value(value)}"' for name, value in pairs)


def _count(n: int) -> str:
    return f"{n}.0" if n < 1_000_000 else floatToGoString(n)  # floatToGoString's own form below a million


def _exemplar(exemplar: Exemplar) -> str:
    labels = _join(sorted(exemplar.labels.items()))
    stamp = "" if exemplar.timestamp is None else f" {exemplar.timestamp}"
    return f" # {{{labels}}} {floatToGoString(exemplar.value)}{stamp}"


def _write(family: HotFamily, node: tuple[str, str], openmetrics: bool, out: list[str]) -> None:
    name = family.name
    if isinstance(family, HotCounter):
        headed = name if openmetrics else f"{name}_total"
        out.append(_help(family, headed, openmetrics))
        out.append(f"# TYPE {headed} counter\n")
        for values, series in list(family.series.items()):
            out.append(f"{name}_total{{{_join(_pairs(family, values, node))}}} {floatToGoString(series.value)}\n")
    elif isinstance(family, HotGauge):
        out.append(_help(family, name, openmetrics))
        out.append(f"# TYPE {name} gauge\n")
        for values, series in list(family.series.items()):
            out.append(f"{name}{{{_join(_pairs(family, values, node))}}} {floatToGoString(series.value)}\n")
    elif isinstance(family, HotHistogram):
        out.append(_help(family, name, openmetrics))
        out.append(f"# TYPE {name} histogram\n")
        bounds = [floatToGoString(bound) for bound in family.bounds]
        for values, series in list(family.series.items()):
            _histogram(name, bounds, _pairs(family, values, node), series, openmetrics, out)
    else:
        raise TypeError(f"no writer for {type(family).__name__}")


def _histogram(name: str, bounds: list[str], pairs: list[tuple[str, str]], series, openmetrics: bool,
               out: list[str]) -> None:
    counts, exemplars, total = list(series.counts), list(series.exemplars), series.sum  # one moment's copy
    labels = _join(pairs)
    head = _join(p for p in pairs if p[0] < "le")  # le takes its sorted place among the labels
    tail = _join(p for p in pairs if p[0] > "le")
    start = f"{name}_bucket{{{head}," if head else f"{name}_bucket{{"
    end = f',{tail}}} ' if tail else "} "
    cumulative = 0
    for le, count, exemplar in zip(bounds, counts, exemplars):
        cumulative += count
        line = f'{start}le="{le}"{end}{_count(cumulative)}'
        if openmetrics and exemplar is not None:
            line += _exemplar(exemplar)
        out.append(line + "\n")
    out.append(f"{name}_count{{{labels}}} {_count(cumulative)}\n")
    out.append(f"{name}_sum{{{labels}}} {floatToGoString(total)}\n")
