"""Makes measurements visible: a run's fan-out to its recorders, one a backend that is on (Prometheus:
telemetry/prometheus.py; OpenTelemetry's GenAI metrics: telemetry/otel.py), fed from the same calls as tokens arrive
(the hot path) and with the run's outcome at its end, and its spans (telemetry/spans.py)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from opentelemetry.sdk.trace import TracerProvider

from benchd.engines import EngineLoad
from benchd.measure.outcome import RunOutcome
from benchd.measure.records import RequestRecord
from benchd.telemetry.genai import GenAIMetrics, GenAIRequest, Series
from benchd.telemetry.metrics import Metrics
from benchd.telemetry.otel import OTelRecorder
from benchd.telemetry.prometheus import PrometheusRecorder
from benchd.telemetry.recorder import RunLabels, RunRecorder
from benchd.telemetry.server import ServerGauges
from benchd.telemetry.spans import RunSpans
from benchd.telemetry.tracing import PresetSpanIds


class Telemetry:
    """Long-lived: the instruments and the tracer provider, any of which may be absent."""

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
        return RunTelemetry(self, RunLabels(run_id, model, engine, workload, gpu, spec))

    def recorders(self, run: RunLabels) -> list[RunRecorder]:
        """A recorder for each backend that is on; GenAI metrics only for a run with tokens (not a timed run)."""
        made: list[RunRecorder] = []
        if self.metrics is not None:
            made.append(PrometheusRecorder(self.metrics, run))
        if self.genai is not None and run.kind == "generate":
            made.append(OTelRecorder(self.genai, run))
        return made

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
    events arrive: each observation goes to every recorder, warmup requests to none. Request spans wait for the end
    of the run (spans.requests). It changes nothing it is handed: a record's trace id is ingest's to set, from the
    trace run_started returns."""

    def __init__(self, telemetry: Telemetry, run: RunLabels, parent: RunTelemetry | None = None) -> None:
        self.telemetry, self.run, self.gpu = telemetry, run, run.gpu
        self.spans = RunSpans(telemetry.tracer, telemetry.span_ids, GenAIRequest.of(run.spec, run.model), run.run_id,
                              parent.spans if parent is not None else None)
        self.run_trace_id: str | None = None  # the run's trace (its spans'), once started
        self.recorders = telemetry.recorders(run)

    def part(self, gpu: str) -> RunTelemetry:
        """The observer of one GPU's share of this run (placement every_gpu): its series carry gpu; its requests'
        spans are children of this run's span."""
        return RunTelemetry(self.telemetry, replace(self.run, gpu=gpu), parent=self)

    @property
    def otel_series(self) -> list[Series]:
        """The run's GenAI series (its OpenTelemetry recorder's; none where it has none)."""
        return [series for r in self.recorders if isinstance(r, OTelRecorder) for series in r.series]

    def server_gauges(self) -> ServerGauges | None:
        """The run's benchd_server_* gauges, for what the daemon reads of its server's page (Prometheus's)."""
        return next((r.server_gauges() for r in self.recorders if isinstance(r, PrometheusRecorder)), None)

    # ---- the run -------------------------------------------------------------------------------

    def run_started(self, t: float) -> str | None:
        """The run's span started; its trace id, when it is traced (one GPU's part: the run's)."""
        run = self.run
        self.spans.start(t, f"benchd.run {run.workload}", {
            "benchd.run_id": run.run_id, "benchd.loadgen.contents": run.workload, "benchd.engine": run.engine,
            "gen_ai.request.model": run.model})
        self.run_trace_id = self.spans.trace_id
        for recorder in self.recorders:
            recorder.run_started(t, self.run_trace_id)
        return self.run_trace_id

    def timing(self, kind: str, series: str, seconds: float, shape: str | None, dtype: str | None) -> None:
        for recorder in self.recorders:
            recorder.timing(kind, series, seconds, shape, dtype)

    def record(self, outcome: RunOutcome) -> None:
        for recorder in self.recorders:
            recorder.record(outcome)

    def run_finished(self, t: float, status: str, error: str | None) -> None:
        for recorder in self.recorders:
            recorder.run_finished(t, status, error)
        self.spans.end(t, status, error)

    def engine_restarted(self, reason: str) -> None:
        for recorder in self.recorders:
            recorder.engine_restarted(reason)

    def sample(self, load: EngineLoad, output_tokens_per_s: float) -> None:
        for recorder in self.recorders:
            recorder.sample(load, output_tokens_per_s)

    # ---- requests: measured ones only ----------------------------------------------------------

    def submitted(self, record: RequestRecord) -> None:
        if not record.warmup:
            for recorder in self.recorders:
                recorder.submitted(record)

    def admitted(self, record: RequestRecord) -> None:
        if not record.warmup:
            for recorder in self.recorders:
                recorder.admitted(record)

    def prompt_counted(self, record: RequestRecord, delta: int) -> None:
        if not record.warmup:
            for recorder in self.recorders:
                recorder.prompt_counted(record, delta)

    def arrivals(self, record: RequestRecord, start: int) -> None:
        if not record.warmup:
            for recorder in self.recorders:
                recorder.arrivals(record, start)

    def finished(self, record: RequestRecord) -> None:
        if not record.warmup:
            for recorder in self.recorders:
                recorder.finished(record)
