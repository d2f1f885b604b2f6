"""benchd's Prometheus series on real runs of the tiny model and from the live daemon: exact histograms, fine
buckets, bounded series, live gauges, both exposition formats."""

import platform
import subprocess
import threading
import time

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from benchd.daemon.inprocess import run_local as run
from benchd.daemon.settings import Settings
from benchd.telemetry.metrics import LAG_BUCKETS, REQUEST_BUCKETS, TOKEN_BUCKETS, Metrics
from benchd.telemetry.run import Telemetry
from tests.helpers import NODE, daemon, free_port, make_spec, serve, spec, submit, wait_for
from tests.otlp import GRPCReceiver
from tests.telemetry.helpers import attributes, latest_metrics, value


def test_histograms_match_the_run_exactly(tiny, registry):
    spec = make_spec(workload={"warmup": {"requests": 3}, "stop": {"requests": 10}})
    outcome = run(spec, loaded=tiny, telemetry=Telemetry(Metrics(registry)))
    s = outcome.summaries()[0]
    measured = [r for r in outcome.stages[0].records if not r.warmup]
    gaps = sum(r.output_tokens - 1 for r in measured)
    for name, stats, count in (
        ("benchd_time_to_first_token_seconds", s.ttft_s, 10),
        ("benchd_inter_token_latency_seconds", s.itl_s, gaps),
        ("benchd_time_per_output_token_seconds", s.tpot_s, s.tpot_s.count),
        ("benchd_request_duration_seconds", s.e2e_s, 10),
        ("benchd_request_queue_seconds", s.queue_s, 10),
        ("benchd_dispatch_lag_seconds", s.dispatch_lag_s, 10),
    ):
        assert value(registry, f"{name}_count") == count == stats.count, name
        assert value(registry, f"{name}_sum") / count == pytest.approx(stats.mean, rel=1e-9), name
        assert value(registry, f"{name}_bucket", le="+Inf") == count
    assert value(registry, "benchd_generation_tokens_total") == s.output_tokens
    assert value(registry, "benchd_prompt_tokens_total") == s.prompt_tokens
    assert value(registry, "benchd_requests_total", outcome="success") == 10
    assert value(registry, "benchd_runs_total", status="succeeded") == 1
    assert value(registry, "benchd_run_in_progress") == 0


def test_buckets_are_fine_and_reach_ten_minutes(tiny, registry):
    for bounds in (REQUEST_BUCKETS, TOKEN_BUCKETS):
        assert any(0.0005 <= b < 0.001 for b in bounds)  # 0.5 ms and 1 ms land in different buckets
    assert REQUEST_BUCKETS[-1] == 600 and LAG_BUCKETS[0] <= 0.00001
    settings = Settings(buckets={"ttft_s": [0.001, 0.01, 1.0]})
    run(make_spec(workload={"stop": {"requests": 2}}), loaded=tiny,
        telemetry=Telemetry(Metrics(registry, settings.buckets)))
    les = {s.labels["le"] for f in registry.collect() if f.name == "benchd_time_to_first_token_seconds"
           for s in f.samples if s.name.endswith("_bucket")}
    assert les == {"0.001", "0.01", "1.0", "+Inf"}
    with pytest.raises(ValueError, match="strictly increasing"):
        Settings(buckets={"itl_s": [0.01, 0.001]})


def test_bucket_boundaries_are_le(registry):
    metrics = Metrics(registry)
    series = metrics.ttft.labels("m", "e", "w")
    for v in (0.0005, 0.0005001, 0.001, 700.0):
        series.observe(v)
    get = lambda le: registry.get_sample_value("benchd_time_to_first_token_seconds_bucket",  # noqa: E731
                                               {"model": "m", "engine": "e", "workload": "w", "le": le})
    assert (get("0.0005"), get("0.00075"), get("0.001"), get("600.0"), get("+Inf")) == (1, 2, 3, 3, 4)


def test_series_stay_bounded_over_many_runs(tiny, registry):
    telemetry = Telemetry(Metrics(registry))
    spec = make_spec(workload={"stop": {"requests": 2}})

    def series():
        return {(s.name, tuple(sorted(s.labels.items()))) for f in registry.collect() for s in f.samples}

    for _ in range(2):
        run(spec, loaded=tiny, telemetry=telemetry)
    before = series()
    for _ in range(4):  # a series per run or per request would be there after the first
        run(spec, loaded=tiny, telemetry=telemetry)
    assert series() == before
    assert not any("run_id" in dict(labels) or "request_id" in dict(labels) for _, labels in before)


def test_series_stay_bounded_whatever_workload_names_clients_send(registry):
    """150 runs, each with its own name: at most max_workloads names keep series; the least recently run go."""
    from benchd.measure.records import RequestRecord

    metrics = Metrics(registry, max_workloads=50)
    telemetry = Telemetry(metrics)
    for i in range(150):
        observer = telemetry.for_run(f"run{i}", "tiny", "transformers", f"workload-{i}")
        observer.run_started(0.0)
        record = RequestRecord(index=0, request_id="r", warmup=False, prompt_tokens=4, max_new_tokens=2,
                               scheduled_s=0.0, submitted_s=0.0, admitted_s=0.001)
        observer.submitted(record)
        observer.admitted(record)
        for t in (0.01, 0.02):
            record.arrival_s.append(t)
            record.arrival_tokens.append(1)
            observer.arrivals(record, len(record.arrival_s) - 1)
        record.finished_s = 0.02
        observer.finished(record)
        observer.run_finished(0.03, "succeeded", None)
    page = generate_latest(registry).decode()
    workloads = {s.labels["workload"] for f in registry.collect() for s in f.samples if "workload" in s.labels}
    assert workloads == {f"workload-{i}" for i in range(100, 150)}
    assert registry.get_sample_value("benchd_series_evicted_total", {"reason": "max_workloads"}) == 100
    assert registry.get_sample_value("benchd_workloads_tracked") == 50
    per_workload = page.count('workload="workload-149"')
    assert len(page.splitlines()) < 60 * (per_workload + 1)


def test_the_daemon_caps_its_workloads(tmp_path):
    with daemon(tmp_path, metrics={"max_workloads": 2}) as server:
        server.wait_ready()
        for name in ("one", "two", "three"):
            server.wait_status(submit(server, spec(requests=1, output=2, name=name)), "succeeded")
        page = server.http.get("/metrics").text
        assert 'workload="one"' not in page and 'workload="two"' in page and 'workload="three"' in page
        assert 'benchd_series_evicted_total{hostname="test-node",reason="max_workloads"} 1.0' in page


def test_gauges_are_live_during_a_run(tiny, registry):
    spec = make_spec(workload={"arrivals": {"profile": "concurrent", "concurrency": 4}, "stop": {"requests": 24},
                               "output_tokens": {"dist": "fixed", "value": 48}})
    thread = threading.Thread(target=run, args=(spec,), kwargs={"loaded": tiny,
                                                                  "telemetry": Telemetry(Metrics(registry))})
    thread.start()
    seen = {"in_progress": 0, "running": 0, "kv": 0, "throughput": 0, "kv_total": 0}
    while thread.is_alive():
        seen["in_progress"] = max(seen["in_progress"], value(registry, "benchd_run_in_progress") or 0)
        seen["running"] = max(seen["running"], value(registry, "benchd_requests_running") or 0)
        seen["kv"] = max(seen["kv"], value(registry, "benchd_kv_cache_usage_ratio") or 0)
        seen["kv_total"] = max(seen["kv_total"], value(registry, "benchd_kv_cache_capacity_blocks") or 0)
        seen["throughput"] = max(seen["throughput"], value(registry, "benchd_run_output_tokens_per_second") or 0)
        time.sleep(0.005)
    thread.join()
    assert seen["in_progress"] == 1 and seen["running"] >= 2 and 0 < seen["kv"] <= 1
    assert seen["kv_total"] == 64 and seen["throughput"] > 0
    assert value(registry, "benchd_run_in_progress") == 0 and value(registry, "benchd_requests_running") == 0
    # After the run: the engine holds no request (its load reads 0, not the last sample's), and the run's throughput
    # so far has no run to describe: its series is gone, so Prometheus marks it stale.
    assert value(registry, "benchd_kv_cache_usage_ratio") == 0 and value(registry, "benchd_kv_cache_used_blocks") == 0
    assert value(registry, "benchd_run_output_tokens_per_second") is None
    assert value(registry, "benchd_kv_cache_capacity_blocks") == 64  # the warm engine's cache, as of its last run


def test_exposition_formats_and_exemplars(tiny, registry):
    run(make_spec(workload={"stop": {"requests": 4}}), loaded=tiny, telemetry=Telemetry(Metrics(registry)))
    classic = generate_latest(registry).decode()
    assert "# EOF" not in classic and "#" not in classic.split("benchd_time_to_first_token_seconds_bucket")[1][:200]
    families = {f.name: f for f in parse_text(classic)}
    assert families["benchd_time_to_first_token_seconds"].type == "histogram"
    om = {f.name: f for f in parse_openmetrics(generate_openmetrics(registry).decode())}
    exemplars = [s.exemplar for s in om["benchd_time_to_first_token_seconds"].samples if s.exemplar]
    assert exemplars and all(len(e.labels["run_id"]) == 32 for e in exemplars)  # untraced: the run id only
    assert "trace_id" not in exemplars[0].labels
    for name in ("benchd_inter_token_latency_seconds", "benchd_request_duration_seconds"):
        assert any(s.exemplar for s in om[name].samples), name
    check = subprocess.run(["promtool", "check", "metrics"], input=classic, capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout + check.stderr == "", check.stdout + check.stderr


# ---- the live daemon -----------------------------------------------------------------------------


def test_live_daemon_metrics_in_both_formats(tmp_path):
    with daemon(tmp_path) as server:
        run_id = submit(server, spec(requests=40, output=32, concurrency=4))
        gauges = set()
        while server.http.get(f"/runs/{run_id}").json()["status"] in ("queued", "running"):
            families = {f.name: f for f in parse_text(server.http.get("/metrics").text)}
            for name in ("benchd_run_in_progress", "benchd_requests_running", "benchd_kv_cache_usage_ratio"):
                for sample in families[name].samples if name in families else []:
                    if sample.value > 0:
                        gauges.add(name)
            time.sleep(0.01)
        assert gauges == {"benchd_run_in_progress", "benchd_requests_running", "benchd_kv_cache_usage_ratio"}
        summary = server.http.get(f"/runs/{run_id}").json()["summary"][0]

        om_response = server.http.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        assert om_response.headers["content-type"].startswith("application/openmetrics-text")
        assert om_response.text.endswith("# EOF\n")
        text_response = server.http.get("/metrics")
        assert text_response.headers["content-type"].startswith("text/plain")
        labels = {"model": "tiny", "engine": "transformers", "workload": "short", "gpu": "", "hostname": NODE}
        for families in (parse_openmetrics(om_response.text), parse_text(text_response.text)):
            samples = {(s.name, tuple(sorted(s.labels.items()))): s for f in families for s in f.samples}

            def get(name, samples=samples, **extra):
                return samples[(name, tuple(sorted({**labels, **extra}.items())))].value

            assert get("benchd_time_to_first_token_seconds_count") == 40
            assert get("benchd_inter_token_latency_seconds_count") == 40 * 31 == summary["itl_s"]["count"]
            assert get("benchd_time_to_first_token_seconds_sum") / 40 == pytest.approx(summary["ttft_s"]["mean"])
            assert get("benchd_request_duration_seconds_sum") / 40 == pytest.approx(summary["e2e_s"]["mean"])
            assert get("benchd_runs_total", status="succeeded") == 1
        om_ttft = [s for f in parse_openmetrics(om_response.text) for s in f.samples
                   if s.name == "benchd_time_to_first_token_seconds_bucket" and s.exemplar]
        assert om_ttft and all(s.exemplar.labels["run_id"] == run_id for s in om_ttft)
        check = subprocess.run(["promtool", "check", "metrics"], input=text_response.text, capture_output=True,
                               text=True)
        assert check.returncode == 0, check.stderr
        import benchd

        build = [line for line in text_response.text.splitlines() if line.startswith("benchd_build_info{")]
        assert build == [f'benchd_build_info{{hostname="{NODE}",python_version="{platform.python_version()}",'
                         f'version="{benchd.__version__}"}} 1.0'], build


def test_daemon_exports_spans_configured_by_otel_variables(tmp_path):
    with GRPCReceiver() as receiver:
        process, url = serve(tmp_path, free_port(), OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
                             OTEL_EXPORTER_OTLP_PROTOCOL="grpc", OTEL_SERVICE_NAME="benchd-node-7",
                             OTEL_TRACES_SAMPLER="always_on", OTEL_METRIC_EXPORT_INTERVAL="200")
        try:
            run_id = httpx.post(f"{url}/runs", json=spec(requests=5)).json()["id"]
            wait_for(lambda: httpx.get(f"{url}/runs/{run_id}").json()["status"] == "succeeded", 60)
            spans = receiver.wait_for_spans(6)
            run = httpx.get(f"{url}/runs/{run_id}").json()

            def counted():  # the periodic export, while the daemon runs
                ttft = latest_metrics(receiver).get("gen_ai.server.time_to_first_token")
                return ttft is not None and ttft.histogram.data_points[0].count == 5

            wait_for(counted, 30, "the run's five TTFTs exported")
        finally:
            process.terminate()
            process.wait(60)
    assert receiver.resource_attributes()["service.name"] == "benchd-node-7"
    (run_span,) = [s for s in spans if s.name == "benchd.run short"]
    assert attributes(run_span)["benchd.run_id"] == run_id
    assert run["metadata"]["trace_id"] == run_span.trace_id.hex()


def test_arrivals_observed_in_runs_are_what_they_would_be_one_at_a_time(registry):
    """Token arrivals reach the daemon in batches: every series, and which gaps carry exemplars, must be what the
    same arrivals one at a time would give; an arrival of k tokens is k equal gaps."""
    from benchd.measure.records import RecordBook

    stamps = [1.0, 1.01, 1.03, 1.035, 1.2, 1.21, 1.22, 1.5, 1.5001]
    counts = [1, 1, 1, 1, 3, 1, 1, 1, 1]
    registries = {"one at a time": registry, "in runs": CollectorRegistry()}
    exemplar_gaps = {}
    for mode, reg in registries.items():
        observer = Telemetry(Metrics(reg)).for_run("run-1", "tiny", "transformers", "test")
        book = RecordBook()
        record = book.request(0, "r0", False, 4, 11, 0.9, submitted_s=0.9)
        observer.submitted(record)
        runs = [(i, i + 1) for i in range(9)] if mode == "one at a time" else [(0, 1), (1, 4), (4, 4), (4, 9)]
        for start, end in runs:
            changed = book.tokens("r0", stamps[start:end], counts[start:end], list(range(100 + start, 100 + end)))
            if changed is not None:  # an empty run changes nothing
                observer.arrivals(*changed)
        assert record.arrival_s == stamps and record.token_ids == list(range(100, 109))
        assert record.arrival_tokens == counts and book.measured_tokens == 11
        families = {f.name: f for f in parse_openmetrics(generate_openmetrics(reg).decode())}
        exemplar_gaps[mode] = sorted(round(s.exemplar.value, 9) for s in
                                     families["benchd_inter_token_latency_seconds"].samples if s.exemplar)
    one, runs = ([line for line in generate_latest(r).decode().splitlines() if "_created" not in line]
                 for r in registries.values())
    assert one == runs
    assert value(registry, "benchd_inter_token_latency_seconds_count") == 10  # 8 gaps, the chunk's split in 3
    assert value(registry, "benchd_generation_tokens_total") == 11
    assert exemplar_gaps["one at a time"] == exemplar_gaps["in runs"] != []
