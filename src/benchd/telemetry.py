"""Makes measurements visible: Prometheus observations as tokens arrive, OpenTelemetry spans for each run."""

from __future__ import annotations

import threading

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from benchd.engines import EngineLoad
from benchd.metrics import Metrics
from benchd.records import RequestRecord
from benchd.tracing import Clock, PresetSpanIds

OPERATION = "text_completion"


def error_type(error: str | None) -> str:
    """The error's kind: what precedes the first colon ("timeout: no data for 60 s" → "timeout")."""
    return (error or "error").split(":")[0][:100]
  # gen_ai.operation.name for a prompt-in, tokens-out generation


class Telemetry:
    """Long-lived: the instruments and the tracer provider, either of which may be absent."""

    def __init__(self, metrics: Metrics | None = None, tracer_provider: TracerProvider | None = None) -> None:
        self.metrics = metrics
        self.tracer_provider = tracer_provider
        self.tracer = tracer_provider.get_tracer("benchd") if tracer_provider is not None else None
        ids = getattr(tracer_provider, "id_generator", None)
        self.span_ids = ids if isinstance(ids, PresetSpanIds) else None  # request span ids decided at send time

    def for_run(self, run_id: str, model: str, engine: str, workload: str, gpu: str = "") -> RunTelemetry:
        return RunTelemetry(self, run_id, model, engine, workload, gpu)

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Flush what spans it can within timeout_s; a dead collector must not hold the process up."""
        if self.tracer_provider is None:
            return
        flusher = threading.Thread(target=self.tracer_provider.shutdown, name="benchd-span-flush", daemon=True)
        flusher.start()
        flusher.join(timeout_s)


class RunTelemetry:
    """One run's observer (or one GPU's part of a run on every GPU: see part()), fed by ingest as the worker's
    events arrive. Request spans wait for the end of the run (trace_requests)."""

    def __init__(self, telemetry: Telemetry, run_id: str, model: str, engine: str, workload: str, gpu: str = "",
                 parent: RunTelemetry | None = None) -> None:
        self.run_id, self.model, self.gpu, self.parent = run_id, model, gpu, parent
        self.telemetry = telemetry
        self.tracer = telemetry.tracer
        self.span_ids = telemetry.span_ids
        self.clock = Clock()
        self.run_context = None
        self.run_trace_id: str | None = None
        self.exemplars: dict[str, dict[str, str]] = {}  # built once per request, not per token
        self.slowest_gap: dict[str, float] = {}
        self.run_span: Span | None = None
        m = telemetry.metrics
        self.metrics = m
        if m is not None:
            m.touch(workload)
            labels = (model, engine, workload, gpu)
            # Children bound once per run: the hot path never looks labels up.
            self.ttft, self.itl, self.tpot = m.ttft.labels(*labels), m.itl.labels(*labels), m.tpot.labels(*labels)
            self.e2e, self.queue, self.lag = m.e2e.labels(*labels), m.queue.labels(*labels), m.dispatch_lag.labels(*labels)
            self.prompt_tokens = m.prompt_tokens.labels(*labels)
            self.generation_tokens = m.generation_tokens.labels(*labels)
            self.outcomes = {o: m.requests.labels(*labels, o) for o in ("success", "error", "cancelled")}
            self.errors = lambda kind: m.request_errors.labels(*labels, kind)
            self.runs = lambda status: m.runs.labels(*labels, status)
            self.running, self.waiting = m.running.labels(*labels), m.waiting.labels(*labels)
            self.kv_usage, self.kv_used, self.kv_total = (m.kv_usage.labels(*labels), m.kv_used.labels(*labels),
                                                          m.kv_total.labels(*labels))
            self.throughput, self.in_progress = m.throughput.labels(*labels), m.in_progress.labels(*labels)
        self._engine, self._workload = engine, workload

    def part(self, gpu: str) -> RunTelemetry:
        """The observer of one GPU's share of this run (placement every_gpu): its series carry gpu; its requests'
        spans are children of this run's span."""
        return RunTelemetry(self.telemetry, self.run_id, self.model, self._engine, self._workload, gpu, parent=self)

    # ---- the run -------------------------------------------------------------------------------

    def run_started(self, t: float) -> None:
        if self.metrics is not None:
            self.in_progress.set(1)
        if self.parent is not None:  # the run's span is the parent's
            self.run_context, self.run_trace_id = self.parent.run_context, self.parent.run_trace_id
            return
        if self.tracer is not None:
            self.run_span = self.tracer.start_span(
                f"benchd.run {self._workload}", kind=SpanKind.INTERNAL, start_time=self.clock.ns(t),
                attributes={"benchd.run_id": self.run_id, "benchd.workload": self._workload,
                            "benchd.engine": self._engine, "gen_ai.request.model": self.model},
            )
            self.run_context = trace.set_span_in_context(self.run_span)
            context = self.run_span.get_span_context()
            if context.trace_flags.sampled:
                self.run_trace_id = format(context.trace_id, "032x")

    def trace_requests(self, records: list[RequestRecord]) -> None:
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
        span = self.tracer.start_span(
            f"{OPERATION} {self.model}", context=self.run_context, kind=SpanKind.CLIENT,
            start_time=self.clock.ns(record.scheduled_s),
            attributes={"gen_ai.operation.name": OPERATION, "gen_ai.request.model": self.model,
                        "gen_ai.request.max_tokens": record.max_new_tokens,
                        "gen_ai.usage.input_tokens": record.prompt_tokens,
                        "gen_ai.usage.output_tokens": record.output_tokens,
                        "benchd.run_id": self.run_id, "benchd.request.index": record.index,
                        "benchd.warmup": record.warmup},
        )
        if record.arrival_s:
            span.add_event("gen_ai.first_token", timestamp=self.clock.ns(record.arrival_s[0]))
        span.set_attributes({f"benchd.{name}": value for name, value in (
            ("ttft_s", record.ttft_s), ("tpot_s", record.tpot_s), ("e2e_s", record.e2e_s),
            ("queue_s", record.queue_s), ("dispatch_lag_s", record.dispatch_lag_s),
        ) if value is not None})
        if record.error is not None:
            span.set_attribute("error.type", error_type(record.error))
            span.set_status(Status(StatusCode.ERROR, record.error))
        span.end(end_time=self.clock.ns(record.finished_s if record.finished_s is not None else record.scheduled_s))

    def span(self, name: str, start_s: float, end_s: float, attributes: dict, error: str | None = None) -> None:
        """A child of the run's span with explicit perf_counter() times (timed runs' stages)."""
        if self.tracer is None:
            return
        span = self.tracer.start_span(name, context=self.run_context, kind=SpanKind.INTERNAL,
                                      start_time=self.clock.ns(start_s),
                                      attributes={**attributes, "benchd.run_id": self.run_id})
        if error is not None:
            span.set_attribute("error.type", error.split(":")[0][:100])
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=self.clock.ns(end_s))

    def timing(self, kind: str, series: str, seconds: float, shape: str | None, dtype: str | None) -> None:
        """A timed run's measured repetition: a training step's phase, or one call of a kernel (this run's subject
        is the kernel's op)."""
        if self.metrics is None:
            return
        exemplar = {"run_id": self.run_id, **({"trace_id": self.run_trace_id} if self.run_trace_id else {})}
        if kind == "train_step":
            self.metrics.step_duration.labels(self.model, self._workload, series).observe(seconds, exemplar)
        else:
            self.metrics.kernel_duration.labels(self._workload, self.model, series, shape or "",
                                                dtype or "").observe(seconds, exemplar)

    def verdict(self, valid: bool | None, capacity_requests_per_s: float | None, searched: bool) -> None:
        """The run's verdict (None: a timed run, none to export) and a capacity search's figure."""
        if self.metrics is None:
            return
        labels = (self.model, self._engine, self._workload, self.gpu)
        if valid is not None:
            self.metrics.run_valid.labels(*labels).set(float(valid))
        if searched:
            self.metrics.capacity.labels(*labels).set(capacity_requests_per_s or 0.0)

    def run_finished(self, t: float, status: str, error: str | None) -> None:
        if self.metrics is not None:
            self.in_progress.set(0)
            self.running.set(0)
            self.waiting.set(0)
            self.runs(status).inc()
            if status == "succeeded":
                self.metrics.last_success.labels(self.model, self._engine, self._workload,
                                                 self.gpu).set_to_current_time()
        if self.run_span is not None:
            self.run_span.set_attribute("benchd.status", status)
            if status == "failed":
                self.run_span.set_status(Status(StatusCode.ERROR, error))
            self.run_span.end(end_time=self.clock.ns(t))

    def energy(self, joules_per_output_token: float | None) -> None:
        if self.metrics is not None and joules_per_output_token is not None:
            self.metrics.energy_per_token.labels(self.model, self._engine, self._workload, self.gpu).set(
                joules_per_output_token)

    def sample(self, load: EngineLoad, output_tokens_per_s: float) -> None:
        if self.metrics is None:
            return
        self.running.set(load.running)
        self.waiting.set(load.waiting)
        self.throughput.set(output_tokens_per_s)
        if load.kv_blocks_total:
            self.kv_usage.set(load.kv_occupancy)
            self.kv_used.set(load.kv_blocks_used)
            self.kv_total.set(load.kv_blocks_total)

    # ---- requests ------------------------------------------------------------------------------

    def submitted(self, record: RequestRecord) -> None:
        """On the dispatcher's thread, before the engine sees the request: kept light."""
        if self.run_trace_id is not None:
            record.trace_id = self.run_trace_id  # every request span is a child in the run's trace
        if self.metrics is not None and not record.warmup:
            self.exemplars[record.request_id] = (
                {"trace_id": record.trace_id, "run_id": self.run_id} if record.trace_id else {"run_id": self.run_id}
            )
            self.lag.observe(record.submitted_s - record.scheduled_s)

    def prompt_counted(self, record: RequestRecord, delta: int) -> None:
        """The server's count of an admitted prompt replaces the client's (a counter only grows: a smaller count
        from the server leaves it as it was)."""
        if self.metrics is not None and not record.warmup and record.admitted_s is not None and delta > 0:
            self.prompt_tokens.inc(delta)

    def admitted(self, record: RequestRecord) -> None:
        if self.metrics is not None and not record.warmup:
            self.queue.observe(record.admitted_s - record.scheduled_s)
            self.prompt_tokens.inc(record.prompt_tokens)

    def arrivals(self, record: RequestRecord, start: int) -> None:
        """The record's arrivals from index start on, just recorded: the first is the TTFT; every later one's gap is
        split over the tokens it carried (ITL is per token). An ITL observation carries an exemplar when it is the
        request's slowest gap so far (about ln(tokens) per request), so the exemplars on the tail buckets are the
        outliers; an exemplar costs a few microseconds."""
        if self.metrics is None or record.warmup:
            return
        stamps, counts = record.arrival_s, record.arrival_tokens
        self.generation_tokens.inc(sum(counts[start:]))
        if start == 0:
            self.ttft.observe(stamps[0] - record.scheduled_s, self.exemplars.get(record.request_id))
            start = 1
        observe, slowest = self.itl.observe, self.slowest_gap.get(record.request_id, 0.0)
        for i in range(start, len(stamps)):
            n = counts[i]
            if not n:
                continue
            gap = (stamps[i] - stamps[i - 1]) / n
            if gap > slowest:
                slowest = gap
                observe(gap, self.exemplars.get(record.request_id))
                n -= 1
            for _ in range(n):
                observe(gap)
        if len(stamps) > 1:
            self.slowest_gap[record.request_id] = slowest

    def finished(self, record: RequestRecord) -> None:
        if self.metrics is not None and not record.warmup:
            outcome = "success" if record.ok else "cancelled" if record.error in ("cancelled", "interrupted") else "error"
            self.outcomes[outcome].inc()
            if outcome == "error":
                self.errors(error_type(record.error)).inc()
            exemplar = self.exemplars.pop(record.request_id, None)
            self.slowest_gap.pop(record.request_id, None)
            if record.ok:
                self.e2e.observe(record.e2e_s, exemplar)
                if (tpot := record.tpot_s) is not None:
                    self.tpot.observe(tpot)

