"""OpenTelemetry tracing from the standard OTEL_* variables: spans leave on a background thread, and what
cannot be delivered is dropped and counted, so a dead or slow collector never slows a run."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

import benchd

MAX_QUEUE = 4096  # spans waiting for the exporter; beyond this they are dropped


def tracing_enabled() -> bool:
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def otlp_exporter() -> SpanExporter:
    """OTLP over gRPC or HTTP/protobuf (the default) as OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL says; the exporters
    read their endpoint, headers, compression and timeout from the same variables themselves."""
    env = os.environ
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf")
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GRPCExporter

        return GRPCExporter()
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HTTPExporter

        return HTTPExporter()
    raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r} is not supported (grpc or http/protobuf)")


class _Accounting(SpanExporter):
    """Counts what the inner exporter fails to deliver and what leaves the queue."""

    def __init__(self, inner: SpanExporter, on_drop: Callable[[str, int], None]) -> None:
        self.inner, self.on_drop = inner, on_drop
        self.lock = threading.Lock()
        self.pending = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self.lock:
            self.pending -= len(spans)
        result = self.inner.export(spans)
        if result is not SpanExportResult.SUCCESS:
            self.on_drop("export_failed", len(spans))
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class DroppingBatchProcessor(SpanProcessor):
    """The SDK's batch processor behind a bound we can count: a span that finds MAX_QUEUE spans waiting
    is dropped here (benchd_spans_dropped_total{reason="queue_full"}) instead of silently inside the SDK."""

    def __init__(self, exporter: SpanExporter, on_drop: Callable[[str, int], None], max_queue: int = MAX_QUEUE,
                 schedule_delay_millis: float = 1000) -> None:
        self.accounting = _Accounting(exporter, on_drop)
        self.max_queue = max_queue
        self.on_drop = on_drop
        self.batch = BatchSpanProcessor(self.accounting, max_queue_size=max_queue + 1,
                                        schedule_delay_millis=schedule_delay_millis)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if not span.context.trace_flags.sampled:
            return
        with self.accounting.lock:
            if self.accounting.pending >= self.max_queue:
                full = True
            else:
                full = False
                self.accounting.pending += 1
        if full:
            self.on_drop("queue_full", 1)
        else:
            self.batch.on_end(span)

    def shutdown(self) -> None:
        self.batch.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.batch.force_flush(timeout_millis)


class PresetSpanIds(RandomIdGenerator):
    """Span ids chosen before their span is made: a request's id leaves in its traceparent header when it is sent,
    and its span, made from the record after the run, takes that id (on the thread that presets it)."""

    def __init__(self) -> None:
        self._next = threading.local()

    @contextmanager
    def preset(self, span_id: int) -> Iterator[None]:
        self._next.span_id = span_id
        try:
            yield
        finally:
            self._next.span_id = None

    def generate_span_id(self) -> int:
        span_id = getattr(self._next, "span_id", None)
        if span_id:
            self._next.span_id = None
            return span_id
        return super().generate_span_id()


def service_resource() -> Resource:
    """benchd as OTel sees it, for spans and metrics: OTEL_SERVICE_NAME (default benchd), OTEL_RESOURCE_ATTRIBUTES."""
    return Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "benchd"),
                            "service.version": benchd.__version__})


def build_tracer_provider(
    on_drop: Callable[[str, int], None],
    exporter: SpanExporter | None = None,
) -> TracerProvider | None:
    """None when tracing is off (no OTLP endpoint set). The sampler comes from OTEL_TRACES_SAMPLER, resource
    attributes from OTEL_RESOURCE_ATTRIBUTES and the service name from OTEL_SERVICE_NAME (default benchd)."""
    if exporter is None:
        if not tracing_enabled():
            return None
        exporter = otlp_exporter()
    resource = service_resource()
    # Telemetry.shutdown bounds the flush; span ids can be decided before their span (traceparent headers).
    provider = TracerProvider(resource=resource, id_generator=PresetSpanIds(), shutdown_on_exit=False)
    provider.add_span_processor(DroppingBatchProcessor(exporter, on_drop))
    return provider


class Clock:
    """Maps perf_counter() seconds onto the wall clock (ns since the epoch) that spans need."""

    def __init__(self) -> None:
        self.perf = time.perf_counter()
        self.epoch_ns = time.time_ns()

    def ns(self, perf_s: float) -> int:
        return self.epoch_ns + round((perf_s - self.perf) * 1e9)
