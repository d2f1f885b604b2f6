"""A run's OpenTelemetry spans: the run's own (one GPU's part of a run on every GPU has its parent's), each request's
made from its record once the run is over, and a timed run's stages, at explicit perf_counter() times."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from benchd.measure.records import RequestRecord
from benchd.telemetry.genai import GenAIRequest
from benchd.telemetry.tracing import Clock, PresetSpanIds


def error_type(error: str | None) -> str:
    """The error's kind: what precedes the first colon ("timeout: no data for 60 s" → "timeout")."""
    return (error or "error").split(":")[0][:100]


class RunSpans:
    """One run's spans. Made after the fact from perf_counter() times (Clock maps them to the epoch), so tracing
    never runs while requests are measured."""

    def __init__(self, tracer: Tracer | None, span_ids: PresetSpanIds | None, genai: GenAIRequest, run_id: str,
                 parent: RunSpans | None = None) -> None:
        self.tracer, self.span_ids, self.genai, self.run_id, self.parent = tracer, span_ids, genai, run_id, parent
        self.clock = Clock()
        self.context: Context | None = None
        self.trace_id: str | None = None  # the run's trace, once started (and sampled)
        self.span: Span | None = None

    def start(self, t: float, name: str, attributes: dict) -> None:
        if self.parent is not None:  # the run's span is the parent's
            self.context, self.trace_id = self.parent.context, self.parent.trace_id
            return
        if self.tracer is not None:
            self.span = self.tracer.start_span(name, kind=SpanKind.INTERNAL, start_time=self.clock.ns(t),
                                               attributes=attributes)
            self.context = trace.set_span_in_context(self.span)
            context = self.span.get_span_context()
            if context.trace_flags.sampled:
                self.trace_id = format(context.trace_id, "032x")

    def requests(self, records: list[RequestRecord]) -> None:
        """A child span per request, made from its record once the run is over: explicit start (the scheduled
        time) and end, the first token as an event. Nothing of tracing runs while requests are measured: done
        live, the SDK's ~50 µs a span delays the next submissions of a closed loop into a later engine step."""
        if self.tracer is None:
            return
        for record in records:
            self._request_span(record)

    def _request_span(self, record: RequestRecord) -> None:
        if record.span_id is not None and self.span_ids is not None:
            with self.span_ids.preset(int(record.span_id, 16)):
                self._start_request_span(record)
        else:
            self._start_request_span(record)

    def _start_request_span(self, record: RequestRecord) -> None:
        assert self.tracer is not None  # requests() asks first
        span = self.tracer.start_span(
            f"{self.genai.operation} {self.genai.model}", context=self.context, kind=SpanKind.CLIENT,
            start_time=self.clock.ns(record.scheduled_s),
            # Every engine hands tokens over as they come: the request streams.
            attributes={**self.genai.attributes(), "gen_ai.request.stream": True,
                        "gen_ai.request.max_tokens": record.max_new_tokens,
                        "gen_ai.usage.input_tokens": record.prompt_tokens,
                        "gen_ai.usage.output_tokens": record.output_tokens,
                        "benchd.run_id": self.run_id, "benchd.request.index": record.index,
                        "benchd.warmup": record.warmup},
        )
        if record.arrival_s:
            span.add_event("gen_ai.first_token", timestamp=self.clock.ns(record.arrival_s[0]))
            span.set_attribute("gen_ai.response.time_to_first_chunk", record.ttft_s)
        span.set_attributes({f"benchd.{name}": value for name, value in (
            ("ttft_s", record.ttft_s), ("tpot_s", record.tpot_s), ("e2e_s", record.e2e_s),
            ("queue_s", record.queue_s), ("dispatch_lag_s", record.dispatch_lag_s),
        ) if value is not None})
        if record.error is not None:
            span.set_attribute("error.type", error_type(record.error))
            span.set_status(Status(StatusCode.ERROR, record.error))
        span.end(end_time=self.clock.ns(record.finished_s if record.finished_s is not None else record.scheduled_s))

    def stage(self, name: str, start_s: float, end_s: float, attributes: dict, error: str | None = None) -> None:
        """A child of the run's span with explicit perf_counter() times (timed runs' stages)."""
        if self.tracer is None:
            return
        span = self.tracer.start_span(name, context=self.context, kind=SpanKind.INTERNAL,
                                      start_time=self.clock.ns(start_s),
                                      attributes={**attributes, "benchd.run_id": self.run_id})
        if error is not None:
            span.set_attribute("error.type", error_type(error))
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=self.clock.ns(end_s))

    def end(self, t: float, status: str, error: str | None) -> None:
        if self.span is not None:
            self.span.set_attribute("benchd.status", status)
            if status == "failed":
                self.span.set_status(Status(StatusCode.ERROR, error))
            self.span.end(end_time=self.clock.ns(t))
