"""benchd's Prometheus instruments, registered on a registry passed in (never the global one), and their buckets."""

from __future__ import annotations

import platform
import threading
from collections import OrderedDict
from itertools import pairwise
from typing import Annotated, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Info
from pydantic import BaseModel, ConfigDict, Field, field_validator

import benchd
from benchd.measure.catalog import per_request
from benchd.telemetry.series import HotCounter, HotFamily, HotGauge, HotHistogram

# gpu: NVML's index of the GPU a run (or a part of a run on every GPU) ran on, as the hardware series' gpu; empty
# on a CPU and for a server's runs. Bounded by the GPUs of the node.
LABELS = ("model", "engine", "workload", "gpu")
# The node's label on every series: DCGM exporter's name for it (released versions up to 4.5.3-4.8.2 spell it
# Hostname; its main branch renamed it hostname, as Prometheus' lower-case convention has it), so that benchd's and
# DCGM's series of one node join on it.
NODE_LABEL = "hostname"


def _ladder(*decades: tuple[float, ...]) -> list[float]:
    return [step for decade in decades for step in decade]


# Fine at the low end (0.5 ms and 1 ms fall in different buckets; peers' 10 ms floors hide decode steps),
# up to ten minutes for request-level latencies.
_FINE = _ladder(
    (0.0001, 0.00025, 0.0005, 0.00075),
    (0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075),
    (0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075),
    (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75),
    (1.0, 1.5, 2.0, 3.0, 5.0, 7.5),
    (10.0,),
)
REQUEST_BUCKETS = [*_FINE, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0]
TOKEN_BUCKETS = _FINE
LAG_BUCKETS = [0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05,
               0.1, 0.25, 0.5, 1.0]

# A training step: from a millisecond (tiny models) to minutes (the largest sizes on a CPU).
STEP_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5,
                2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0]
# One kernel call: from a microsecond up.
KERNEL_BUCKETS = _ladder(
    (0.000001, 0.0000025, 0.000005, 0.0000075),
    (0.00001, 0.000025, 0.00005, 0.000075),
    (0.0001, 0.00025, 0.0005, 0.00075),
    (0.001, 0.0025, 0.005, 0.0075),
    (0.01, 0.025, 0.05, 0.075),
    (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)

Buckets = Annotated[list[float], Field(min_length=1)]


class HistogramBuckets(BaseModel):
    """Upper bounds (seconds) of each latency histogram; a setting (BENCHD_BUCKETS__TTFT_S='[0.001, …]')."""

    model_config = ConfigDict(extra="forbid")

    ttft_s: Buckets = REQUEST_BUCKETS  # benchd_time_to_first_token_seconds
    itl_s: Buckets = TOKEN_BUCKETS  # benchd_inter_token_latency_seconds
    tpot_s: Buckets = TOKEN_BUCKETS  # benchd_time_per_output_token_seconds
    e2e_s: Buckets = REQUEST_BUCKETS  # benchd_request_duration_seconds
    queue_s: Buckets = REQUEST_BUCKETS  # benchd_request_queue_seconds
    dispatch_lag_s: Buckets = LAG_BUCKETS  # benchd_dispatch_lag_seconds

    @field_validator("*")
    @classmethod
    def _increasing(cls, bounds: list[float]) -> list[float]:
        if any(b <= a for a, b in pairwise(bounds)) or bounds[0] <= 0:
            raise ValueError("bucket bounds must be positive and strictly increasing")
        return bounds


class MetricsSettings(BaseModel):
    """BENCHD_METRICS__MAX_WORKLOADS: distinct workload label values live at once; the least recently run
    workload's series are removed beyond it (its histograms start again if it runs later)."""

    model_config = ConfigDict(extra="forbid")

    max_workloads: Annotated[int, Field(ge=1)] = 50  # workload label values with live series, at most


class Metrics:
    def __init__(self, registry: CollectorRegistry, buckets: HistogramBuckets | None = None,
                 max_workloads: int = MetricsSettings().max_workloads) -> None:
        self.registry = registry
        self.max_workloads = max_workloads
        self._workloads: OrderedDict[str, None] = OrderedDict()  # least recently run first
        self._lock = threading.Lock()
        self.evicted = Counter("benchd_series_evicted", "Label sets removed to keep the series bounded: a workload "
                               "beyond BENCHD_METRICS__MAX_WORKLOADS, or a family over its series cap.",
                               ("reason",), registry=registry)
        self.workloads = Gauge("benchd_workloads_tracked", "Distinct workload label values with live series.",
                               registry=registry)
        self._families: list[HotFamily] = []
        self._requests(buckets or HistogramBuckets())
        self._engine()
        self._runs()
        self._quality()
        self._server()
        self._comparisons()
        self._changes()
        self._fleet()
        self._timed()
        self._daemon()

    def _family(self, cls, name: str, doc: str, labels: tuple[str, ...] = LABELS, **kwargs: Any) -> Any:
        """A family of series keyed by workload among its labels: touch() removes an evicted workload's."""
        made = cls(name, doc, labels, registry=self.registry,
                   on_evict=lambda reason, n: self.evicted.labels(reason).inc(n), **kwargs)
        self._families.append(made)
        return made

    def _histogram(self, name: str, doc: str, bounds: list[float], labels: tuple[str, ...] = LABELS) -> HotHistogram:
        return self._family(HotHistogram, name, doc, labels, bounds=bounds)

    def _requests(self, b: HistogramBuckets) -> None:
        """The requests' latencies and tokens, observed as they arrive (measure/latency.py)."""
        # Each a request's figure of the catalog (measure/catalog.py): its series and HELP text are the catalog's.
        latency = {f.key: self._histogram(f.prometheus, f.description, getattr(b, f.key)) for f in per_request()
                   if f.prometheus is not None}
        self.ttft, self.itl, self.tpot = latency["ttft_s"], latency["itl_s"], latency["tpot_s"]
        self.e2e, self.queue, self.dispatch_lag = latency["e2e_s"], latency["queue_s"], latency["dispatch_lag_s"]
        self.prompt_tokens = self._family(HotCounter, "benchd_prompt_tokens", "Prompt tokens of admitted requests.")
        self.generation_tokens = self._family(HotCounter, "benchd_generation_tokens", "Output tokens generated.")
        self.requests = self._family(HotCounter, "benchd_requests",
                               "Finished requests by outcome (success, error, cancelled).", (*LABELS, "outcome"))
        self.request_errors = self._family(HotCounter, "benchd_request_errors", "Failed requests by error type "
                                           "(http_500, timeout, disconnected, malformed_chunk, …).",
                                           (*LABELS, "error_type"))
        self.runs = self._family(HotCounter, "benchd_runs", "Finished runs by status.", (*LABELS, "status"))
        self.engine_restarts = self._family(HotCounter, "benchd_engine_restarts",
                                      "Engines replaced by a new one within their worker during a run, by reason "
                                      "(out_of_memory: a stage ran out of device memory; the next stages ran on "
                                      "the new engine).", (*LABELS, "reason"))

    def _engine(self) -> None:
        """The engine's load, read every 100 ms during a stage; 0 from a run's end to the next (the engine holds no
        request then: a value kept from the run would read as its state now; telemetry/run.py)."""
        self.running = self._family(HotGauge, "benchd_requests_running", "Requests the engine is working on.")
        self.waiting = self._family(HotGauge, "benchd_requests_waiting",
                              "Requests submitted but not yet admitted by the engine.")
        self.kv_usage = self._family(HotGauge, "benchd_kv_cache_usage_ratio",
                               "Used / total blocks of the paged KV cache (0–1); 0 between runs.")
        self.kv_used = self._family(HotGauge, "benchd_kv_cache_used_blocks",
                                    "KV-cache blocks referenced by requests; 0 between runs.")
        self.kv_total = self._family(HotGauge, "benchd_kv_cache_capacity_blocks",
                                     "KV-cache blocks in all, as of the engine's latest run.")

    def _runs(self) -> None:
        """A run's progress, verdict and figures as it ends."""
        self.throughput = self._family(HotGauge, "benchd_run_output_tokens_per_second",
                                 "The current run's output tokens per second over its measured window so far (no "
                                 "series while no run of the workload is in progress).")
        self.in_progress = self._family(HotGauge, "benchd_run_in_progress",
                                        "1 while a run of this workload is in progress.")
        self.energy_per_token = self._family(HotGauge, "benchd_run_energy_per_output_token_joules",
                                       "GPU energy over the latest run's measured window per output token.")
        self.last_success = self._family(HotGauge, "benchd_last_success_timestamp_seconds",
                                   "When a run of this workload last succeeded (Unix time).")
        self.run_valid = self._family(HotGauge, "benchd_run_valid",
                                "1 when the latest generate run of this workload was valid (every stage met its "
                                "validity rules), 0 when it was not.")
        # How far from the hardware (measure/roofline.py), the latest run's last stage whose engine counted steps.
        self.mbu = self._family(HotGauge, "benchd_run_memory_bandwidth_utilization_ratio",
                                "Model bandwidth utilisation (MBU) of the latest run: bytes its steps must move "
                                "per second / the device's measured bandwidth.")
        self.mfu = self._family(HotGauge, "benchd_run_flops_utilization_ratio",
                                "Model FLOPs utilisation (MFU) of the latest run: its steps' matmul FLOP/s / the "
                                "device's measured rate in the run's dtype.")
        self.of_bound = self._family(HotGauge, "benchd_run_roofline_bound_ratio",
                                     "The latest run's fraction of its roofline bound: the fastest its steps could "
                                     "run on the device's measured limits / the time they took (1: at the limits).")
        self.capacity = self._family(HotGauge, "benchd_capacity_requests_per_second",
                               "The highest request rate the latest capacity search found meeting the SLO (0: none).")
        # What a good token costs (measure/cost.py): over the latest run's devices and measured window.
        self.energy_per_good_token = self._family(
            HotGauge, "benchd_run_energy_per_good_token_joules", "The latest run's GPU energy over its good output "
            "tokens (those of requests meeting its SLO; every successful one where it sets none).")
        self.cost_per_good_tokens = self._family(
            HotGauge, "benchd_run_cost_per_million_good_tokens", "The latest run's device-hours and kWh at the "
            "daemon's prices (BENCHD_PRICES__*, in BENCHD_PRICES__CURRENCY) per million good output tokens.")

    def _quality(self) -> None:
        """What the latest run generated and its quality probe (measure/quality.py): beside its speed, and set only
        where the run has the figure (random ids have no probe; a server's tokens no log-probabilities)."""
        self.quality_perplexity = self._family(HotGauge, "benchd_quality_perplexity",
                                               "The latest run's quality probe: the reference text's perplexity "
                                               "under its stack (model, dtype, quantization, attention kernel).")
        self.quality_answer_logprob = self._family(HotGauge, "benchd_quality_probe_answer_logprob",
                                                   "The latest run's quality probe: mean log-probability a token of "
                                                   "its written answers (nats).")
        self.quality_probe_seconds = self._family(HotGauge, "benchd_quality_probe_seconds",
                                                  "What the latest run's quality probe cost after its stages.")
        self.quality_eos = self._family(HotGauge, "benchd_quality_ended_at_eos_ratio",
                                        "The latest run's measured requests that ended at the model's EOS before "
                                        "their output_tokens cap, over those that succeeded.")
        self.quality_logprob = self._family(HotGauge, "benchd_quality_output_logprob_mean",
                                            "The latest run's mean log-probability of a generated token (nats).")

    def _server(self) -> None:
        """An openai run's server, by its own metrics page (openai.metrics_url, measure/server_metrics.py): as of the
        latest read of the workload's latest run (they stay between runs; the timestamp says how old they are)."""
        self.server_kv_usage = self._family(HotGauge, "benchd_server_kv_cache_usage_ratio",
                                      "The server's KV-cache usage (0–1) by its own metrics.")
        self.server_running = self._family(HotGauge, "benchd_server_requests_running",
                                     "Requests the server reports running.")
        self.server_waiting = self._family(HotGauge, "benchd_server_requests_waiting",
                                     "Requests the server reports waiting (queued).")
        self.server_preemptions = self._family(HotGauge, "benchd_server_run_preemptions",
                                         "Requests the server preempted (vLLM) or retracted (SGLang) since the run "
                                         "began.")
        self.server_prefix_hit_rate = self._family(HotGauge, "benchd_server_prefix_cache_hit_ratio",
                                             "Prompt tokens found in the server's prefix cache / looked up, since "
                                             "the run began (SGLang without counters: its latest batch's).")
        self.server_scraped = self._family(HotGauge, "benchd_server_last_scrape_timestamp_seconds",
                                     "When the server's metrics were last read (Unix time).")
        self.server_scrape_failures = self._family(HotCounter, "benchd_server_scrape_failures",
                                             "Reads of the server's metrics that failed (refused, timed out, an "
                                             "HTTP error, not Prometheus text, no known server).")

    def _comparisons(self) -> None:
        """Verdicts against a baseline, between a run's GPUs, and a matrix's variants."""
        self.regression = self._family(HotGauge, "benchd_regression_detected",
                                 "1 when the latest scheduled run is slower than its workload's baseline on this "
                                 "metric (its interval wholly beyond the threshold); 0 when it is not, or the "
                                 "comparison cannot tell.", ("workload", "metric"))
        self.regression_change = self._family(HotGauge, "benchd_regression_relative_change",
                                        "(latest − baseline) / baseline for this metric.", ("workload", "metric"))
        self.quality_different = self._family(
            HotGauge, "benchd_quality_regression_different", "1 when the latest scheduled run's outputs or quality "
            "probe differ from its workload's baseline's beyond the baseline's noise (measure/quality.py).",
            ("workload",))
        self.regression_clocks = self._family(
            HotGauge, "benchd_regression_clock_states_differ", "1 when the latest scheduled run (or a scheduled "
            "matrix's variant) and its baseline ran under different GPU clock states (a clock event's share of "
            "samples 0.2 apart, or mean SM clocks 5 % of their maximum apart): a change between them may be the "
            "GPU's.", ("workload",))
        self.gpu_relative_throughput = self._family(
            HotGauge, "benchd_gpu_relative_throughput", "In the latest run of this workload on every GPU: this GPU's "
            "output tok/s ÷ the median of its siblings'.", ("workload", "gpu"))
        self.gpu_outlier = self._family(HotGauge, "benchd_gpu_outlier", "1 when this GPU was slower than its "
                                        "siblings in the latest run of this workload on every GPU, beyond the "
                                        "threshold and with the interval agreeing.", ("workload", "gpu"))
        # A matrix's variants side by side, from its comparison (the latest matrix of each workload): a variant label
        # is bounded by the matrix's size (benchd.spec.matrix.MAX_VARIANTS), and a workload's earlier variants go when
        # its next matrix is compared.
        variant = ("workload", "variant")
        self.variant_throughput = self._family(HotGauge, "benchd_matrix_variant_output_tokens_per_second",
                                         "A matrix variant's output tokens per second, mean over its runs.", variant)
        self.variant_weight_bytes = self._family(HotGauge, "benchd_matrix_variant_weight_bytes",
                                           "A matrix variant's model weights as stored on the device.", variant)
        self.variant_token_agreement = self._family(HotGauge, "benchd_matrix_variant_token_agreement_ratio",
                                              "Share of a matrix variant's greedy tokens identical to the baseline's "
                                              "for the same prompts.", variant)
        self.variant_change = self._family(HotGauge, "benchd_matrix_variant_relative_change",
                                     "(variant − baseline) / baseline for this metric in the latest matrix.",
                                     (*variant, "metric"))
        self.variant_regression = self._family(HotGauge, "benchd_matrix_variant_regression_detected",
                                         "1 when this variant was significantly slower than the matrix's baseline "
                                         "variant on this metric in the latest matrix.",
                                         (*variant, "baseline", "metric"))
        # A variant's quality against the baseline's (measure/quality.py): beside its speed, "faster but different".
        self.variant_different = self._family(HotGauge, "benchd_quality_variant_different",
                                              "1 when this variant's outputs or quality probe differ from the "
                                              "matrix baseline's beyond the baseline's own noise, 0 when not, in the "
                                              "latest matrix.", variant)
        self.variant_exact_match = self._family(HotGauge, "benchd_quality_variant_exact_match_ratio",
                                                "Share of a matrix variant's requests whose every generated token is "
                                                "the baseline's.", variant)
        self.variant_kl = self._family(HotGauge, "benchd_quality_variant_kl",
                                       "A matrix variant's quality probe against the baseline's: mean KL(baseline "
                                       "‖ variant) a token (nats).", variant)
        self.variant_logprob_diff = self._family(HotGauge, "benchd_quality_variant_logprob_difference",
                                                 "A matrix variant's quality probe: mean per-token log-likelihood, "
                                                 "variant − baseline (nats).", variant)
        self.matrix_families = [self.variant_throughput, self.variant_weight_bytes, self.variant_token_agreement,
                                self.variant_change, self.variant_regression, self.variant_different,
                                self.variant_exact_match, self.variant_kl, self.variant_logprob_diff]

    def _changes(self) -> None:
        """Change points in each workload's series of runs (measure/history.py): the latest one still found per
        figure and GPU model (device: the run metadata's device_name), and how many were found."""
        series = ("workload", "figure", "device")
        self.change_relative = self._family(HotGauge, "benchd_change_point_relative_change",
                                            "The latest change point of this figure in the workload's series: "
                                            "(after − before) / before, of the two segments' geometric means.",
                                            series)
        self.change_direction = self._family(HotGauge, "benchd_change_point_direction",
                                             "The latest change point's direction: 1 for the worse (slower, more "
                                             "energy), -1 for the better.", series)
        self.change_time = self._family(HotGauge, "benchd_change_point_timestamp_seconds",
                                        "When the latest change point's first run of the new segment was created "
                                        "(Unix time).", series)
        self.change_points = self._family(HotCounter, "benchd_change_points",
                                          "Change points found in the workload's series (after each run's "
                                          "analysis), by figure and direction.", ("workload", "figure", "direction"))
        self.change_families = [self.change_relative, self.change_direction, self.change_time]

    def _fleet(self) -> None:
        """This node's place among the nodes of its GPU model, by workload (measure/fleet.py): each daemon exports its
        own node's alone, so a fleet's series grow with its nodes, never as the square of them."""
        place, group = ("workload", "device", "figure"), ("workload", "device")
        self.fleet_value = self._family(HotGauge, "benchd_fleet_node_value", "This node's figure of the workload: the "
                                        "median of its newest runs' (the fleet's distribution is this series' "
                                        "quantiles across nodes).", place)
        self.fleet_relative = self._family(HotGauge, "benchd_fleet_node_relative_ratio", "This node's figure ÷ the "
                                           "median of the other nodes' of its GPU model.", place)
        self.fleet_low = self._family(HotGauge, "benchd_fleet_node_interval_low_ratio", "The deciding rule's "
                                      "interval of this node against the other nodes' median, low end (a latency's "
                                      "or energy's turned over: below 1 is worse).", place)
        self.fleet_high = self._family(HotGauge, "benchd_fleet_node_interval_high_ratio", "The same interval's high "
                                       "end.", place)
        self.fleet_outlier = self._family(HotGauge, "benchd_fleet_node_outlier", "1 when this node is decided worse "
                                          "than its GPU model's other nodes by more than the effect (output tok/s or "
                                          "ITL p50), 0 otherwise.", group)
        self.fleet_nodes = self._family(HotGauge, "benchd_fleet_nodes", "Nodes of the GPU model with valid runs of "
                                        "the workload in the fleet's window.", group)
        self.fleet_energy_good = self._family(HotGauge, "benchd_fleet_node_energy_per_good_token_joules",
                                              "This node's newest runs' GPU energy over their good tokens.", group)
        self.fleet_cost = self._family(HotGauge, "benchd_fleet_node_cost_per_million_good_tokens", "This node's "
                                       "newest runs' device-hours and kWh at the daemon's prices per million good "
                                       "tokens.", group)
        self.fleet_families = [self.fleet_value, self.fleet_relative, self.fleet_low, self.fleet_high,
                               self.fleet_outlier, self.fleet_nodes, self.fleet_energy_good, self.fleet_cost]

    def _timed(self) -> None:
        """Training steps and kernels, timed on the device."""
        self.step_duration = self._histogram("benchd_step_duration_seconds",
                                       "A measured training step's phase (forward, backward, optimizer) and the "
                                       "whole step, timed on the device.", STEP_BUCKETS, ("model", "workload", "phase"))
        self.kernel_duration = self._histogram("benchd_kernel_duration_seconds",
                                         "One measured call of a kernel, timed on the device with the cache flushed.",
                                         KERNEL_BUCKETS, ("workload", "kernel", "implementation", "shape", "dtype"))

    def _daemon(self) -> None:
        """What the daemon is (its build), and its own survival: errors it lived through, workers it replaced, ticks it
        skipped, spans it dropped."""
        Info("benchd_build", "benchd's version and the Python it runs on (value 1).", registry=self.registry).info(
            {"version": benchd.__version__, "python_version": platform.python_version()})
        self.internal_errors = Counter("benchd_internal_errors", "Errors a long-lived part of the daemon survived "
                                       "(a schedule tick, a hook, a store write, …), by component.", ("component",),
                                       registry=self.registry)
        self.worker_restarts = Counter("benchd_worker_restarts", "Worker processes started again after one died or "
                                       "hung, by reason (exit, signal, oom, no_heartbeat, no_progress, start).",
                                       ("reason",), registry=self.registry)
        self.schedule_skips = Counter("benchd_schedule_ticks_skipped", "Schedule ticks that queued nothing: its "
                                      "previous run still queued or running (busy), or no room in the run queue for "
                                      "its run or matrix (queue_full).", ("reason",), registry=self.registry)
        self.spans_dropped = Counter("benchd_spans_dropped",
                                     "Spans not delivered to the collector (queue full, export failed).",
                                     ("reason",), registry=self.registry)

    # The daemon's own counts, by what happened (callers name the event, never a series).
    def internal_error(self, component: str) -> None:
        self.internal_errors.labels(component).inc()

    def worker_restarted(self, reason: str) -> None:
        self.worker_restarts.labels(reason).inc()

    def schedule_skipped(self, reason: str) -> None:
        self.schedule_skips.labels(reason).inc()

    def spans_lost(self, reason: str, n: int) -> None:
        self.spans_dropped.labels(reason).inc(n)

    def tracks(self, workload: str) -> bool:
        """Whether the workload has live series (a run of it started, and it was not evicted since)."""
        with self._lock:
            return workload in self._workloads

    def touch(self, workload: str) -> None:
        """A run of this workload starts: it becomes the most recent; beyond max_workloads the least recent
        workload's series are removed from every family (never the one starting)."""
        with self._lock:
            self._workloads[workload] = None
            self._workloads.move_to_end(workload)
            evicted = []
            while len(self._workloads) > self.max_workloads:
                evicted.append(self._workloads.popitem(last=False)[0])
            self.workloads.set(len(self._workloads))
        for name in evicted:
            for family in self._families:
                family.forget("workload", name)
            self.evicted.labels("max_workloads").inc()
