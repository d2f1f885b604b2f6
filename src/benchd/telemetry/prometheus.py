"""A run's Prometheus series (telemetry/metrics.py's instruments), observed as the worker's events arrive: the hot
path, so every child is bound once a run; exemplars carry the run and its trace."""

from __future__ import annotations

from benchd.engines import EngineLoad
from benchd.measure import latency
from benchd.measure.outcome import RunOutcome
from benchd.measure.records import RequestRecord
from benchd.telemetry.metrics import Metrics
from benchd.telemetry.recorder import RunLabels, RunRecorder
from benchd.telemetry.server import ServerGauges
from benchd.telemetry.spans import error_type


class PrometheusRecorder(RunRecorder):
    """One run's (or one GPU's part's) series, labelled model, engine, workload, gpu."""

    def __init__(self, metrics: Metrics, run: RunLabels) -> None:
        self.metrics, self.run = metrics, run
        self.labels = labels = (run.model, run.engine, run.workload, run.gpu)
        self.trace_id: str | None = None  # the run's, for its exemplars
        self.exemplars: dict[str, dict[str, str]] = {}  # built once per request, not per token
        self.slowest_gap: dict[str, float] = {}
        m = metrics
        m.touch(run.workload)
        # Children bound once per run: the hot path never looks labels up.
        self.ttft, self.itl, self.tpot = m.ttft.labels(*labels), m.itl.labels(*labels), m.tpot.labels(*labels)
        self.e2e, self.queue = m.e2e.labels(*labels), m.queue.labels(*labels)
        self.lag = m.dispatch_lag.labels(*labels)
        self.prompt_tokens = m.prompt_tokens.labels(*labels)
        self.generation_tokens = m.generation_tokens.labels(*labels)
        self.outcomes = {o: m.requests.labels(*labels, o) for o in ("success", "error", "cancelled")}
        self.running, self.waiting = m.running.labels(*labels), m.waiting.labels(*labels)
        self.kv_usage, self.kv_used, self.kv_total = (m.kv_usage.labels(*labels), m.kv_used.labels(*labels),
                                                      m.kv_total.labels(*labels))
        self.throughput, self.in_progress = m.throughput.labels(*labels), m.in_progress.labels(*labels)

    def server_gauges(self) -> ServerGauges:
        """The run's benchd_server_* gauges, for what the daemon reads of its server's page."""
        return ServerGauges(self.metrics, self.labels)

    # ---- the run -------------------------------------------------------------------------------

    def run_started(self, t: float, trace_id: str | None) -> None:
        self.trace_id = trace_id
        self.in_progress.set(1)

    def timing(self, kind: str, series: str, seconds: float, shape: str | None, dtype: str | None) -> None:
        """A training step's phase, or one call of a kernel (this run's subject is the kernel's op)."""
        run = self.run
        exemplar = {"run_id": run.run_id, **({"trace_id": self.trace_id} if self.trace_id else {})}
        if kind == "train_step":
            self.metrics.step_duration.labels(run.model, run.workload, series).observe(seconds, exemplar)
        else:
            self.metrics.kernel_duration.labels(run.workload, run.model, series, shape or "",
                                                dtype or "").observe(seconds, exemplar)

    def record(self, outcome: RunOutcome) -> None:
        """Its verdict (a timed run has none) and a capacity search's figure, how far from the hardware its last
        stage with counted steps ran, its energy a token, and in a run on every GPU each GPU against its
        siblings."""
        m, labels, workload = self.metrics, self.labels, self.run.workload
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
                m.gpu_relative_throughput.labels(workload, verdict["gpu"]).set(verdict["relative_throughput"])
            m.gpu_outlier.labels(workload, verdict["gpu"]).set(float(verdict["outlier"]))

    def run_finished(self, t: float, status: str, error: str | None) -> None:
        self.in_progress.set(0)
        # Between runs the engine holds no request: its load reads 0, not the last run's last sample; the run's
        # throughput so far has no run to describe, so its series goes (Prometheus marks it stale).
        for gauge in (self.running, self.waiting, self.kv_usage, self.kv_used):
            gauge.set(0)
        self.metrics.throughput.remove(*self.labels)
        self.metrics.runs.labels(*self.labels, status).inc()
        if status == "succeeded":
            self.metrics.last_success.labels(*self.labels).set_to_current_time()

    def engine_restarted(self, reason: str) -> None:
        self.metrics.engine_restarts.labels(*self.labels, reason).inc()

    def sample(self, load: EngineLoad, output_tokens_per_s: float) -> None:
        self.running.set(load.running)
        self.waiting.set(load.waiting)
        self.throughput.set(output_tokens_per_s)
        if load.kv_blocks_total:
            self.kv_usage.set(load.kv_occupancy)
            self.kv_used.set(load.kv_blocks_used)
            self.kv_total.set(load.kv_blocks_total)

    # ---- requests ------------------------------------------------------------------------------

    def submitted(self, record: RequestRecord) -> None:
        self.exemplars[record.request_id] = (
            {"trace_id": record.trace_id, "run_id": self.run.run_id} if record.trace_id else {"run_id": self.run.run_id}
        )
        self.lag.observe(record.submitted_s - record.scheduled_s)

    def prompt_counted(self, record: RequestRecord, delta: int) -> None:
        """The server's count of an admitted prompt replaces the client's (a counter only grows: a smaller count
        from the server leaves it as it was)."""
        if record.admitted_s is not None and delta > 0:
            self.prompt_tokens.inc(delta)

    def admitted(self, record: RequestRecord) -> None:
        self.queue.observe(record.admitted_s - record.scheduled_s)
        self.prompt_tokens.inc(record.prompt_tokens)

    def arrivals(self, record: RequestRecord, start: int) -> None:
        """The first arrival is the TTFT; every later one's gap is split over the tokens it carried (ITL is per
        token). An ITL observation carries an exemplar when it is the request's slowest gap so far (about ln(tokens)
        per request), so the exemplars on the tail buckets are the outliers; an exemplar costs a few
        microseconds."""
        stamps, counts = record.arrival_s, record.arrival_tokens
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
        outcome = "success" if record.ok else "cancelled" if record.cut else "error"
        self.outcomes[outcome].inc()
        if outcome == "error":
            self.metrics.request_errors.labels(*self.labels, error_type(record.error)).inc()
        exemplar = self.exemplars.pop(record.request_id, None)
        self.slowest_gap.pop(record.request_id, None)
        if record.ok:
            self.e2e.observe(record.e2e_s, exemplar)
            if (tpot := record.tpot_s) is not None:
                self.tpot.observe(tpot)
