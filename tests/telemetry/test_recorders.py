"""A run's recorders, one a backend (telemetry/recorder.py): the fan-out holds those that are on, each alone records
what the run's telemetry recorded, and none changes what it observes; a request's trace is ingest's to give."""

import pickle

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from benchd.daemon.ingest import RunIngest
from benchd.engines import EngineLoad
from benchd.measure.outcome import RunOutcome
from benchd.measure.records import CUT, RequestRecord
from benchd.protocol import events
from benchd.telemetry.genai import GenAIMetrics
from benchd.telemetry.metrics import Metrics
from benchd.telemetry.otel import OTelRecorder
from benchd.telemetry.prometheus import PrometheusRecorder
from benchd.telemetry.recorder import RunLabels
from benchd.telemetry.run import Telemetry
from benchd.telemetry.tracing import build_tracer_provider
from tests.helpers import make_spec
from tests.telemetry.helpers import SERVER_ATTRIBUTES, value

TRACE = "ab" * 16


def requests() -> list[RequestRecord]:
    """A measured success of three arrivals (1, 2 and 3 tokens), a failure, one cut by benchd, a warmup."""
    ok = RequestRecord(0, "q0", False, 8, 8, scheduled_s=1.0, submitted_s=1.001, admitted_s=1.01,
                       arrival_s=[1.1, 1.2, 1.5], arrival_tokens=[1, 2, 3], finished_s=1.5, trace_id=TRACE)
    failed = RequestRecord(1, "q1", False, 8, 8, scheduled_s=1.0, submitted_s=1.002, admitted_s=1.02,
                           arrival_s=[1.3], arrival_tokens=[1], finished_s=1.4, error="timeout: no data for 60 s")
    cut = RequestRecord(2, "q2", False, 8, 8, scheduled_s=1.0, submitted_s=1.003, admitted_s=1.03,
                        arrival_s=[1.2], arrival_tokens=[1], finished_s=1.6, error=CUT)
    warm = RequestRecord(3, "q3", True, 8, 8, scheduled_s=0.5, submitted_s=0.5, admitted_s=0.5,
                         arrival_s=[0.6, 0.7], arrival_tokens=[1, 1], finished_s=0.7)
    return [ok, failed, cut, warm]


def observe(observer, records: list[RequestRecord]) -> None:
    """Each request's observations in the order ingest makes them, its arrivals in one batch."""
    for record in records:
        observer.submitted(record)
        observer.admitted(record)
        observer.prompt_counted(record, 2)
        observer.arrivals(record, 0)
        observer.finished(record)


def test_a_backend_that_is_off_is_not_in_the_fan_out(registry):
    metrics, genai, spec = Metrics(registry), GenAIMetrics(), make_spec()
    kernel = make_spec(kind="kernel", kernel={"op": "matmul", "shapes": [{"m": 8, "n": 8, "k": 8}]})

    def kinds(telemetry, run_spec=spec):
        return [type(r) for r in telemetry.for_run("r", "tiny", "transformers", "test", spec=run_spec).recorders]

    assert kinds(Telemetry()) == []
    assert kinds(Telemetry(metrics)) == [PrometheusRecorder]
    assert kinds(Telemetry(None, None, genai)) == [OTelRecorder]
    assert kinds(Telemetry(metrics, None, genai)) == [PrometheusRecorder, OTelRecorder]
    assert kinds(Telemetry(metrics, None, genai), kernel) == [PrometheusRecorder]  # a timed run has no tokens
    assert Telemetry(None, None, genai).for_run("r", "tiny", "transformers", "test").server_gauges() is None


def test_observing_a_run_leaves_its_records_as_they_were(registry):
    """Every backend on, the run traced: no observation changes a byte of a record, nor the outcome."""
    provider = build_tracer_provider(lambda reason, n: None, exporter=InMemorySpanExporter())
    telemetry = Telemetry(Metrics(registry), provider, GenAIMetrics())
    observer = telemetry.for_run("r", "tiny", "transformers", "test", spec=make_spec())
    trace_id = observer.run_started(0.0)
    assert trace_id is not None and len(trace_id) == 32  # traced
    records = requests()
    records[0].trace_id = None  # a request its ingest gave no trace: the observers give it none either
    for record in records:
        before = pickle.dumps(record)
        observe(observer, [record])
        assert pickle.dumps(record) == before, record.request_id
    outcome = RunOutcome("r", make_spec(), "succeeded", None, None, None, [], True, None, None, None, [])
    before = pickle.dumps(outcome)
    observer.record(outcome)
    observer.spans.requests(records)
    observer.run_finished(2.0, "succeeded", None)
    assert pickle.dumps(outcome) == before
    assert [r.trace_id for r in records] == [None] * 4
    provider.shutdown()


def test_the_prometheus_recorder_alone_records_the_runs_series(registry):
    recorder = PrometheusRecorder(Metrics(registry), RunLabels("r", "tiny", "transformers", "test"))
    recorder.run_started(0.0, TRACE)
    assert value(registry, "benchd_run_in_progress") == 1
    records = requests()
    observe(recorder, records[:3])  # the fan-out leaves warmup requests out; a recorder alone is not told of them
    recorder.sample(EngineLoad(3, 1, 5, 10), 42.0)
    assert (value(registry, "benchd_requests_running"), value(registry, "benchd_kv_cache_usage_ratio")) == (3, 0.5)
    recorder.engine_restarted("oom")
    recorder.timing("train_step", "forward", 0.25, None, None)
    assert value(registry, "benchd_time_to_first_token_seconds_count") == 3
    assert value(registry, "benchd_time_to_first_token_seconds_sum") == pytest.approx(0.1 + 0.3 + 0.2)
    assert value(registry, "benchd_inter_token_latency_seconds_count") == 5  # the success's gaps: 2 then 3 tokens
    assert value(registry, "benchd_inter_token_latency_seconds_sum") == pytest.approx(2 * 0.05 + 3 * 0.1)
    assert value(registry, "benchd_request_duration_seconds_count") == 1  # successes only
    assert value(registry, "benchd_time_per_output_token_seconds_sum") == pytest.approx(0.4 / 5)
    assert value(registry, "benchd_request_queue_seconds_sum") == pytest.approx(0.06)
    assert value(registry, "benchd_dispatch_lag_seconds_sum") == pytest.approx(0.006)
    assert value(registry, "benchd_prompt_tokens_total") == 3 * (8 + 2)
    assert value(registry, "benchd_generation_tokens_total") == 8
    assert [value(registry, "benchd_requests_total", outcome=o) for o in ("success", "error", "cancelled")] == \
        [1, 1, 1]
    assert value(registry, "benchd_request_errors_total", error_type="timeout") == 1
    assert value(registry, "benchd_engine_restarts_total", reason="oom") == 1
    recorder.run_finished(2.0, "succeeded", None)
    assert value(registry, "benchd_run_in_progress") == 0 and value(registry, "benchd_requests_running") == 0
    assert value(registry, "benchd_runs_total", status="succeeded") == 1
    assert value(registry, "benchd_run_output_tokens_per_second") is None  # the run's throughput is gone with it
    families = {f.name: f for f in parse_openmetrics(generate_openmetrics(registry).decode())}
    exemplars = [s.exemplar.labels for name in ("benchd_time_to_first_token_seconds", "benchd_step_duration_seconds")
                 for s in families[name].samples if s.exemplar]
    # The success's exemplars carry its record's trace; the failure's, which has none, the run alone; a timed
    # repetition's, the run's trace.
    assert {tuple(sorted(e.items())) for e in exemplars} == {
        (("run_id", "r"), ("trace_id", TRACE)), (("run_id", "r"),)}


def test_the_otel_recorder_alone_records_the_runs_genai_series():
    genai = GenAIMetrics()
    recorder = OTelRecorder(genai, RunLabels("r", "tiny", "transformers", "test", spec=make_spec()))
    observe(recorder, requests()[:3])
    recorder.run_finished(2.0, "succeeded", None)
    metrics = {m.name: m.data.data_points for m in
               genai.collect(Resource.create({})).resource_metrics[0].scope_metrics[0].metrics}
    (ttft,) = metrics["gen_ai.server.time_to_first_token"]
    assert dict(ttft.attributes) == SERVER_ATTRIBUTES and (ttft.count, ttft.sum) == (1, pytest.approx(0.1))
    (tpot,) = metrics["gen_ai.server.time_per_output_token"]
    assert (tpot.count, tpot.sum) == (1, pytest.approx(0.08))
    durations = {dict(p.attributes).get("error.type"): (p.count, p.sum)
                 for p in metrics["gen_ai.server.request.duration"]}
    # The success to its last token, the failure to its end with its kind; benchd's own cut is no operation's end.
    assert durations == {None: (1, pytest.approx(0.5)), "timeout": (1, pytest.approx(0.4))}


def test_each_recorder_alone_records_what_the_fan_out_does():
    """The same observations through one backend's recorder and through a fan-out of both: the same series."""
    alone, together = CollectorRegistry(), CollectorRegistry()
    genai_alone, genai_together = GenAIMetrics(), GenAIMetrics()
    run = RunLabels("r", "tiny", "transformers", "test", spec=make_spec())
    recorders = [PrometheusRecorder(Metrics(alone), run), OTelRecorder(genai_alone, run)]
    observer = Telemetry(Metrics(together), None, genai_together).for_run("r", "tiny", "transformers", "test",
                                                                          spec=make_spec())
    for each in (*recorders, observer):
        each.run_started(0.0, None) if each is not observer else each.run_started(0.0)
        observe(each, [r for r in requests() if each is observer or not r.warmup])
        each.run_finished(2.0, "succeeded", None)

    def page(registry):  # but the moment of the last success, which is each one's own
        return [line for line in generate_latest(registry).decode().splitlines()
                if not line.startswith("benchd_last_success_timestamp_seconds{")]
    assert page(alone) == page(together)

    def points(genai):
        return [(m.name, [(sorted(dict(p.attributes).items()), p.count, p.sum, list(p.bucket_counts))
                          for p in m.data.data_points])
                for m in genai.collect(Resource.create({})).resource_metrics[0].scope_metrics[0].metrics]
    assert points(genai_alone) == points(genai_together)


def test_ingest_gives_every_request_it_sends_the_runs_trace():
    """The record is ingest's: a request the engine is sent joins the run's trace, a warmup one too; one never sent
    has none; an untraced run's, none."""
    def ingest(trace_id):
        observer = Telemetry(Metrics(CollectorRegistry())).for_run("r", "tiny", "transformers", "test")
        run = RunIngest(make_spec(), observer, trace_id=trace_id)
        run.events([events.StageStart(0, "s", 0.0),
                    events.Request(0, 0, "sent", False, 8, 8, 1.0, 1.0, None),
                    events.Request(0, 1, "warm", True, 8, 8, 0.5, 0.5, None),
                    events.Request(0, 2, "later", False, 8, 8, 1.0, None, None), events.Submitted("later", 1.1),
                    events.Request(0, 3, "never", False, 8, 8, 1.0, None, None)])
        return {r.request_id: r.trace_id for r in run.result.stages[0].records}

    assert ingest(TRACE) == {"sent": TRACE, "warm": TRACE, "later": TRACE, "never": None}
    assert ingest(None) == dict.fromkeys(("sent", "warm", "later", "never"))
