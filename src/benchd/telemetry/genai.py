"""OpenTelemetry GenAI metrics: the semantic conventions' histograms, observed as cheaply as benchd's own and
exported over OTLP by the SDK's periodic reader when an endpoint is set."""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.sdk.metrics import Histogram as HistogramInstrument
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricsData,
    PeriodicExportingMetricReader,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

import benchd
from benchd.measure.catalog import FIGURES
from benchd.spec.engines import default_engine, engine_record

# The buckets the conventions recommend (open-telemetry/semantic-conventions docs/gen-ai/gen-ai-metrics.md as of
# v1.56.0, since moved to open-telemetry/semantic-conventions-genai).
DURATION_BOUNDS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TOKEN_BOUNDS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
TTFT_BOUNDS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BOUNDS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
MAX_SERIES = 2000  # attribute sets per instrument (the SDK's default cardinality limit); beyond: one overflow set
OVERFLOW = {"otel.metric.overflow": True}


@dataclass(frozen=True, slots=True)
class Instrument:
    name: str
    unit: str
    description: str
    bounds: tuple[float, ...]


# A server measured from outside (the openai engine) gets the client metrics; an engine in benchd's own worker, the
# server metrics. Times count from the request's scheduled time, as every benchd latency does (docs/figures.md):
# each time's unit is the catalog's figure's that it carries (measure/catalog.py); the descriptions are the GenAI
# semantic conventions' own words.
_E2E, _TTFT, _TPOT, _ITL = (FIGURES[key].unit for key in ("e2e_s", "ttft_s", "tpot_s", "itl_s"))
CLIENT_DURATION = Instrument("gen_ai.client.operation.duration", _E2E, "GenAI operation duration.", DURATION_BOUNDS)
CLIENT_TOKENS = Instrument("gen_ai.client.token.usage", "{token}", "Number of input and output tokens used.",
                           TOKEN_BOUNDS)
CLIENT_FIRST_CHUNK = Instrument("gen_ai.client.operation.time_to_first_chunk", _TTFT,
                                "Time to receive the first chunk of the response stream.", DURATION_BOUNDS)
CLIENT_CHUNK = Instrument("gen_ai.client.operation.time_per_output_chunk", _ITL,
                          "Time per output chunk, for each chunk after the first.", DURATION_BOUNDS)
SERVER_DURATION = Instrument("gen_ai.server.request.duration", _E2E,
                             "Generative AI server request duration such as time-to-last byte or last output token.",
                             DURATION_BOUNDS)
SERVER_TTFT = Instrument("gen_ai.server.time_to_first_token", _TTFT,
                         "Time to generate first token for successful responses.", TTFT_BOUNDS)
SERVER_TPOT = Instrument("gen_ai.server.time_per_output_token", _TPOT,
                         "Time per output token generated after the first token for successful responses.",
                         TPOT_BOUNDS)


@dataclass(frozen=True, slots=True)
class GenAIRequest:
    """What the conventions' attributes say of a run's requests: the same for each of them."""

    operation: str  # gen_ai.operation.name
    provider: str  # gen_ai.provider.name
    model: str  # gen_ai.request.model
    server_address: str | None = None
    server_port: int | None = None
    client: bool = False  # measured from outside the server (client metrics), or in benchd's worker (server)

    @classmethod
    def of(cls, spec: Any, model: str) -> GenAIRequest:
        """The provider is the engine's (spec/engines.py: the library that generates in benchd's own worker, or the
        API a server is driven through); an engine that reads a server's stream measures as the server's client,
        at the server's address. A run with no engine (none given, a timed run): the default engine's."""
        record = getattr(spec, "engine_record", None)
        if record is None:
            return cls("text_completion", engine_record(default_engine()).genai_provider, model)
        server = spec.server()
        if server is None:
            return cls(spec.operation(), record.genai_provider, model, client=record.stamps == "stream")
        url = urlsplit(server)
        return cls(spec.operation(), record.genai_provider, spec.served_model(), url.hostname,
                   url.port or (443 if url.scheme == "https" else 80), client=record.stamps == "stream")

    def attributes(self) -> dict[str, str | int]:
        out: dict[str, str | int] = {"gen_ai.operation.name": self.operation, "gen_ai.provider.name": self.provider,
                                     "gen_ai.request.model": self.model}
        if self.server_address is not None:
            out.update({"server.address": self.server_address, "server.port": self.server_port})
        return out


class Series:
    """One instrument's histogram for one attribute set and one run: written by the run's one ingesting thread, read
    at export (a torn read skews one export by an observation in flight, never a count: counts are summed from the
    buckets)."""

    __slots__ = ("instrument", "key", "attributes", "bounds", "counts", "total", "low", "high")

    def __init__(self, instrument: Instrument, key: tuple, attributes: dict) -> None:
        self.instrument, self.key, self.attributes = instrument, key, attributes
        self.bounds = instrument.bounds
        self.counts = [0] * (len(instrument.bounds) + 1)
        self.total, self.low, self.high = 0.0, float("inf"), float("-inf")

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # bucket i holds (bounds[i-1], bounds[i]]
        self.total += value
        if value < self.low:
            self.low = value
        if value > self.high:
            self.high = value


class _Sum:
    __slots__ = ("counts", "total", "low", "high")

    def __init__(self, size: int) -> None:
        self.counts, self.total, self.low, self.high = [0] * size, 0.0, float("inf"), float("-inf")

    def add(self, counts: list[int], total: float, low: float, high: float) -> None:
        self.counts = [a + b for a, b in zip(self.counts, counts)]
        self.total += total
        self.low, self.high = min(self.low, low), max(self.high, high)


class GenAIMetrics:
    """Every GenAI histogram: per instrument and attribute set, what finished runs observed and what running runs
    observe (each run writes series of its own, so runs on several workers never share a writer)."""

    def __init__(self, max_series: int = MAX_SERIES) -> None:
        self.max_series = max_series
        self.reader: PeriodicExportingMetricReader | None = None
        self._lock = threading.Lock()
        self._start_ns = time.time_ns()
        self._retired: dict[tuple[Instrument, tuple], _Sum] = {}
        self._attributes: dict[tuple[Instrument, tuple], dict] = {}
        self._live: dict[int, Series] = {}
        self._last: dict[tuple[Instrument, tuple], tuple[list[int], float]] = {}  # delta: the previous export
        self._last_ns = self._start_ns

    def series(self, instrument: Instrument, attributes: dict) -> Series:
        key = tuple(sorted(attributes.items()))
        with self._lock:
            if (instrument, key) not in self._attributes:
                if sum(1 for i, _ in self._attributes if i is instrument) >= self.max_series:
                    attributes, key = OVERFLOW, tuple(OVERFLOW.items())
                self._attributes.setdefault((instrument, key), dict(attributes))
            series = Series(instrument, key, self._attributes[(instrument, key)])
            self._live[id(series)] = series
        return series

    def retire(self, series: Iterable[Series]) -> None:
        """A run's series once it has ended: folded into the totals, so finished runs cost nothing."""
        with self._lock:
            for s in series:
                if self._live.pop(id(s), None) is not None:
                    self._sum(s.instrument, s.key).add(s.counts, s.total, s.low, s.high)

    def _sum(self, instrument: Instrument, key: tuple) -> _Sum:
        total = self._retired.get((instrument, key))
        if total is None:
            total = self._retired[(instrument, key)] = _Sum(len(instrument.bounds) + 1)
        return total

    def collect(self, resource: Resource, delta: bool = False) -> MetricsData | None:
        """Every attribute set that has observations: cumulative since benchd started, or (delta) since the last
        collection, whose min and max are then unknown and left out."""
        now = time.time_ns()
        with self._lock:
            totals: dict[tuple[Instrument, tuple], _Sum] = {}
            for key, total in self._retired.items():
                totals[key] = merged = _Sum(len(total.counts))
                merged.add(total.counts, total.total, total.low, total.high)
            for s in list(self._live.values()):
                sums = totals.get((s.instrument, s.key))
                if sums is None:
                    sums = totals[(s.instrument, s.key)] = _Sum(len(s.counts))
                sums.add(list(s.counts), s.total, s.low, s.high)
            start, self._last_ns = (self._last_ns if delta else self._start_ns), now
            by_instrument: dict[Instrument, list[HistogramDataPoint]] = {}
            for (instrument, key), total in totals.items():
                low: float | None
                high: float | None
                counts, value, low, high = total.counts, total.total, total.low, total.high
                if delta:
                    last_counts, last_total = self._last.get((instrument, key), ([0] * len(counts), 0.0))
                    self._last[(instrument, key)] = (counts, value)
                    counts = [a - b for a, b in zip(counts, last_counts)]
                    value, low, high = value - last_total, None, None
                if not sum(counts):
                    continue
                by_instrument.setdefault(instrument, []).append(HistogramDataPoint(
                    attributes=self._attributes[(instrument, key)], start_time_unix_nano=start, time_unix_nano=now,
                    count=sum(counts), sum=value, bucket_counts=counts, explicit_bounds=list(instrument.bounds),
                    min=low, max=high))
        if not by_instrument:
            return None
        temporality = AggregationTemporality.DELTA if delta else AggregationTemporality.CUMULATIVE
        metrics = [Metric(name=i.name, description=i.description, unit=i.unit,
                          data=Histogram(data_points=points, aggregation_temporality=temporality))
                   for i, points in by_instrument.items()]
        scope = InstrumentationScope("benchd", benchd.__version__)
        return MetricsData([ResourceMetrics(resource, [ScopeMetrics(scope, metrics, "")], "")])

    def shutdown(self) -> None:
        """The last export, within the reader's own bounds (Telemetry.shutdown bounds the wait for it)."""
        if self.reader is not None:
            self.reader.shutdown()


class _Reader(PeriodicExportingMetricReader):
    """The SDK's periodic reader (its thread, OTEL_METRIC_EXPORT_INTERVAL and _TIMEOUT, the exporter's temporality
    preference), collecting benchd's histograms: the SDK's own instruments cost tens of times more a measurement
    (attribute hashing; bench/telemetry_overhead.py prints both), and time per output chunk is measured for every
    chunk."""

    def __init__(self, exporter: MetricExporter, source: GenAIMetrics, resource: Resource,
                 export_interval_millis: float | None = None) -> None:
        self._source, self._resource = source, resource
        # What the exporter prefers for histograms (OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE), as the SDK's
        # own reader reads it: cumulative unless delta or lowmemory.
        preferred = getattr(exporter, "_preferred_temporality", None) or {}
        self._delta = preferred.get(HistogramInstrument) is AggregationTemporality.DELTA
        super().__init__(exporter, export_interval_millis=export_interval_millis)

    # the SDK marks collect final: this reader collects benchd's own histograms instead of an SDK meter's
    def collect(self, timeout_millis: float = 10_000) -> None:  # type: ignore[misc]
        data = self._source.collect(self._resource, self._delta)
        if data is not None:
            self._receive_metrics(data, timeout_millis=timeout_millis)


def metrics_enabled() -> bool:
    """On when an OTLP endpoint is set for metrics, unless OTEL_METRICS_EXPORTER is none or the SDK is disabled."""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    exporters = {name.strip() for name in env.get("OTEL_METRICS_EXPORTER", "otlp").split(",") if name.strip()}
    if "none" in exporters:
        return False
    if exporters - {"otlp"}:
        raise ValueError(f"OTEL_METRICS_EXPORTER: {', '.join(sorted(exporters - {'otlp'}))} is not supported "
                         "(otlp or none)")
    return bool(env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def otlp_metric_exporter() -> MetricExporter:
    """OTLP over gRPC or HTTP/protobuf (the default) as OTEL_EXPORTER_OTLP[_METRICS]_PROTOCOL says; the exporters
    read endpoint, headers, compression, timeout and temporality preference from the same variables themselves."""
    env = os.environ
    protocol = (env.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf")
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GRPCExporter

        return GRPCExporter()
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HTTPExporter

        return HTTPExporter()
    raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r} is not supported (grpc or http/protobuf)")


def build_genai_metrics(exporter: MetricExporter | None = None,
                        export_interval_millis: float | None = None) -> GenAIMetrics | None:
    """None when metrics are off (no OTLP endpoint set). Exports leave on the reader's thread, never a run's."""
    from benchd.telemetry.tracing import service_resource

    if exporter is None:
        if not metrics_enabled():
            return None
        exporter = otlp_metric_exporter()
    metrics = GenAIMetrics()
    metrics.reader = _Reader(exporter, metrics, service_resource(), export_interval_millis)
    return metrics
