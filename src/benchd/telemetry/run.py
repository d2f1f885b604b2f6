"""Makes measurements visible: Prometheus and OpenTelemetry GenAI observations as tokens arrive, from the same
calls (the hot path), a run's outcome recorded at its end, and its spans (telemetry/spans.py)."""

from __future__ import annotations

import threading
import time

from opentelemetry.sdk.trace import TracerProvider

from benchd.engines import EngineLoad
from benchd.measure import latency
from benchd.measure.outcome import RunOutcome
from benchd.measure.records import RequestRecord
from benchd.telemetry.genai import (
    CLIENT_CHUNK,
    CLIENT_DURATION,
    CLIENT_FIRST_CHUNK,
    CLIENT_TOKENS,
    SERVER_DURATION,
    SERVER_TPOT,
    SERVER_TTFT,
    GenAIMetrics,
    GenAIRequest,
    Instrument,
    Series,
)
from benchd.telemetry.metrics import Metrics
from benchd.telemetry.server import ServerGauges
from benchd.telemetry.spans import RunSpans, error_type
from benchd.telemetry.tracing import PresetSpanIds


class Telemetry:
    """Long-lived: the instruments and the tracer provider, either of which may be absent."""

    def __init__(self, metrics: Metrics | None = None, tracer_provider: TracerProvider | None = None,
                 genai: GenAIMetrics | None = None) -> None:
        self.metrics = metrics
        self.genai = genai  # the OTel GenAI histograms, exported over OTLP
        self.tracer_provider = tracer_provider
        self.tracer = tracer_provider.get_tracer("benchd") if tracer_provider is not None else None
        ids = getattr(tracer_provider, "id_generator", None)
        self.span_ids = ids if isinstance(ids, PresetSpanIds) else None  # request span ids decided at send time

    def for_run(self, run_id: str, model: str, engine: str, workload: str, gpu: str = "",
                spec=None) -> RunTelemetry:
        """spec (a RunSpec) says what the GenAI conventions' attributes need: an openai run's API and server."""
        return RunTelemetry(self, run_id, model, engine, workload, gpu, spec=spec)

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Flush what spans and metrics it can within timeout_s, both at once; a dead collector must not hold the
        process up."""
        flushers = [threading.Thread(target=flush, name=f"benchd-{what}-flush", daemon=True) for what, flush in (
            ("span", self.tracer_provider.shutdown if self.tracer_provider is not None else None),
            ("metric", self.genai.shutdown if self.genai is not None else None)) if flush is not None]
        deadline = time.monotonic() + timeout_s
        for flusher in flushers:
            flusher.start()
        for flusher in flushers:
            flusher.join(max(0.0, deadline - time.monotonic()))


class RunTelemetry:
    """One run's observer (or one GPU's part of a run on every GPU: see part()), fed by ingest as the worker's
    events arrive. Request spans wait for the end of the run (spans.requests)."""

    def __init__(self, telemetry: Telemetry, run_id: str, model: str, engine: str, workload: str, gpu: str = "",
                 parent: RunTelemetry | None = None, spec=None) -> None:
        self.run_id, self.model, self.gpu, self.parent = run_id, model, gpu, parent
        self.telemetry, self.spec = telemetry, spec
        self.genai = GenAIRequest.of(spec, model)
        self.spans = RunSpans(telemetry.tracer, telemetry.span_ids, self.genai, run_id,
                              parent.spans if parent is not None else None)
        self.run_trace_id: str | None = None  # the run's trace (its spans'), once started
        self.exemplars: dict[str, dict[str, str]] = {}  # built once per request, not per token
        self.slowest_gap: dict[str, float] = {}
        m = telemetry.metrics
        self.metrics = m
        if m is not None:
            m.touch(workload)
            labels = (model, engine, workload, gpu)
            # Children bound once per run: the hot path never looks labels up.
            self.ttft, self.itl, self.tpot = m.ttft.labels(*labels), m.itl.labels(*labels), m.tpot.labels(*labels)
            self.e2e, self.queue = m.e2e.labels(*labels), m.queue.labels(*labels)
            self.lag = m.dispatch_lag.labels(*labels)
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
        self._otel(telemetry.genai, getattr(spec, "kind", "generate"))

    def _otel(self, genai: GenAIMetrics | None, kind: str) -> None:
        """The run's GenAI series, bound once like the Prometheus children: client metrics for a server measured
        from outside (openai), server metrics for an engine in benchd's worker; none for a timed run (no tokens)."""
        self.otel, self.otel_series = genai, []
        self.first_chunk = self.chunk = self.duration = self.server_ttft = self.server_tpot = None
        self.input_tokens = self.output_tokens = None
        self.failed_durations: dict[str, Series] = {}  # by error.type, made at the first failure of each kind
        if genai is None or kind != "generate":
            self.otel = None
            return
        if self.genai.client:
            self.first_chunk, self.chunk = self._series(CLIENT_FIRST_CHUNK), self._series(CLIENT_CHUNK)
            self.duration = self._series(CLIENT_DURATION)
            self.input_tokens = self._series(CLIENT_TOKENS, **{"gen_ai.token.type": "input"})
            self.output_tokens = self._series(CLIENT_TOKENS, **{"gen_ai.token.type": "output"})
        else:
            self.server_ttft, self.server_tpot = self._series(SERVER_TTFT), self._series(SERVER_TPOT)
            self.duration = self._series(SERVER_DURATION)

    def _series(self, instrument: Instrument, **extra: str) -> Series:
        created = self.otel.series(instrument, {**self.genai.attributes(), **extra})
        self.otel_series.append(created)
        return created

    def _failed_duration(self, kind: str) -> Series:
        series = self.failed_durations.get(kind)
        if series is None:
            series = self.failed_durations[kind] = self._series(
                CLIENT_DURATION if self.genai.client else SERVER_DURATION, **{"error.type": kind})
        return series

    def part(self, gpu: str) -> RunTelemetry:
        """The observer of one GPU's share of this run (placement every_gpu): its series carry gpu; its requests'
        spans are children of this run's span; its GenAI series are its own (one writer each) with the run's
        attributes (the conventions name no GPU), so they add up to the run's."""
        return RunTelemetry(self.telemetry, self.run_id, self.model, self._engine, self._workload, gpu, parent=self,
                            spec=self.spec)

    # ---- the run -------------------------------------------------------------------------------

    def run_started(self, t: float) -> None:
        if self.metrics is not None:
            self.in_progress.set(1)
        self.spans.start(t, f"benchd.run {self._workload}", {
            "benchd.run_id": self.run_id, "benchd.loadgen.contents": self._workload, "benchd.engine": self._engine,
            "gen_ai.request.model": self.model})
        self.run_trace_id = self.spans.trace_id

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

    def record(self, outcome: RunOutcome) -> None:
        """The run's outcome as the daemon judged it (measure/outcome.py): its verdict (a timed run has none) and a
        capacity search's figure, how far from the hardware its last stage with counted steps ran, its energy a
        token, and in a run on every GPU each GPU against its siblings."""
        m = self.metrics
        if m is None:
            return
        labels = (self.model, self._engine, self._workload, self.gpu)
        if outcome.valid is not None:
            m.run_valid.labels(*labels).set(float(outcome.valid))
        if outcome.capacity is not None:
            m.capacity.labels(*labels).set(outcome.capacity.requests_per_s or 0.0)
        if (figures := outcome.roofline) is not None:
            m.mbu.labels(*labels).set(figures["mbu"])
            m.mfu.labels(*labels).set(figures["mfu"])
            m.of_bound.labels(*labels).set(figures["of_bound"])
        if outcome.energy_per_token_j is not None:
            m.energy_per_token.labels(*labels).set(outcome.energy_per_token_j)
        good = outcome.good_tokens
        if good is not None and good.energy_per_good_token_j is not None:
            m.energy_per_good_token.labels(*labels).set(good.energy_per_good_token_j)
        if good is not None and good.cost_per_million_good_tokens is not None:
            m.cost_per_good_tokens.labels(*labels).set(good.cost_per_million_good_tokens)
        if (quality := outcome.quality) is not None:
            for family, value in ((m.quality_perplexity, quality.perplexity),
                                  (m.quality_answer_logprob, quality.answer_logprob),
                                  (m.quality_probe_seconds, quality.probe_s), (m.quality_eos, quality.eos_share),
                                  (m.quality_logprob, quality.logprob_mean)):
                if value is not None:
                    family.labels(*labels).set(value)
        for verdict in (outcome.parts or {}).get("verdicts", []):
            if verdict["relative_throughput"] is not None:
                m.gpu_relative_throughput.labels(self._workload, verdict["gpu"]).set(verdict["relative_throughput"])
            m.gpu_outlier.labels(self._workload, verdict["gpu"]).set(float(verdict["outlier"]))

    def run_finished(self, t: float, status: str, error: str | None) -> None:
        if self.otel is not None:
            self.otel.retire(self.otel_series)
        if self.metrics is not None:
            self.in_progress.set(0)
            # Between runs the engine holds no request: its load reads 0, not the last run's last sample; the run's
            # throughput so far has no run to describe, so its series goes (Prometheus marks it stale).
            for gauge in (self.running, self.waiting, self.kv_usage, self.kv_used):
                gauge.set(0)
            self.metrics.throughput.remove(self.model, self._engine, self._workload, self.gpu)
            self.runs(status).inc()
            if status == "succeeded":
                self.metrics.last_success.labels(self.model, self._engine, self._workload,
                                                 self.gpu).set_to_current_time()
        self.spans.end(t, status, error)

    def server_gauges(self) -> ServerGauges | None:
        """The run's benchd_server_* gauges, for what the daemon reads of its server's page."""
        return ServerGauges(self.metrics, (self.model, self._engine, self._workload, self.gpu)) \
            if self.metrics is not None else None

    def engine_restarted(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.engine_restarts.labels(self.model, self._engine, self._workload, self.gpu, reason).inc()

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
        split over the tokens it carried (ITL is per token), and is one chunk's time (time per output chunk, for
        the openai engine's stream). An ITL observation carries an exemplar when it is the request's slowest gap so
        far (about ln(tokens) per request), so the exemplars on the tail buckets are the outliers; an exemplar costs
        a few microseconds."""
        if record.warmup:
            return
        stamps, counts = record.arrival_s, record.arrival_tokens
        if start == 0 and self.first_chunk is not None:
            self.first_chunk.observe(latency.ttft(record.scheduled_s, stamps))
        if self.chunk is not None:
            for gap in latency.chunk_gaps(stamps, counts, start):
                self.chunk.observe(gap)
        if self.metrics is None:
            return
        self.generation_tokens.inc(sum(counts[start:]))
        if start == 0:
            self.ttft.observe(latency.ttft(record.scheduled_s, stamps), self.exemplars.get(record.request_id))
        observe, slowest = self.itl.observe, self.slowest_gap.get(record.request_id, 0.0)
        for gap, n in latency.token_gaps(stamps, counts, start):
            if gap > slowest:
                slowest = gap
                observe(gap, self.exemplars.get(record.request_id))
                n -= 1
            for _ in range(n):
                observe(gap)
        if len(stamps) > 1:
            self.slowest_gap[record.request_id] = slowest

    def finished(self, record: RequestRecord) -> None:
        if record.warmup:
            return
        outcome = "success" if record.ok else "cancelled" if record.cut else "error"
        if self.duration is not None and outcome != "cancelled":  # benchd's own cancelling is no operation's end
            self._otel_finished(record)
        if self.metrics is not None:
            self.outcomes[outcome].inc()
            if outcome == "error":
                self.errors(error_type(record.error)).inc()
            exemplar = self.exemplars.pop(record.request_id, None)
            self.slowest_gap.pop(record.request_id, None)
            if record.ok:
                self.e2e.observe(record.e2e_s, exemplar)
                if (tpot := record.tpot_s) is not None:
                    self.tpot.observe(tpot)

    def _otel_finished(self, record: RequestRecord) -> None:
        """Duration: to the last token (E2E) for a success, to its end for a failure, with error.type. The server's
        TTFT and TPOT are "for successful responses" (the conventions), so they wait for the request's end; the
        client's time to first chunk has no such condition and is observed as the chunk arrives."""
        if not record.ok:
            self._failed_duration(error_type(record.error)).observe(record.finished_s - record.scheduled_s)
            return
        self.duration.observe(record.e2e_s)
        if self.server_ttft is not None:
            if (ttft := record.ttft_s) is not None:
                self.server_ttft.observe(ttft)
            if (tpot := record.tpot_s) is not None:
                self.server_tpot.observe(tpot)
        if self.input_tokens is not None:
            self.input_tokens.observe(record.prompt_tokens)
            self.output_tokens.observe(record.output_tokens)
