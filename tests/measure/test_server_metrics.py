"""A server's Prometheus page read into benchd's server series: vLLM, SGLang and TGI pages, reads that fail, and a
run's server timeline and gauges against the mock server's vLLM-style page."""

import json
import os
import time

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from rich.console import Console

from benchd.daemon.inprocess import run_local as run
from benchd.daemon.server_scrape import ServerScrape
from benchd.measure.server_metrics import PageError, increase, read
from benchd.report.outputs import print_summary, write_outputs
from benchd.spec import SpecError, parse_spec
from benchd.telemetry.metrics import Metrics
from benchd.telemetry.run import Telemetry
from tests.helpers import daemon, free_port, wait_for
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def server():
    with OpenAIServer(delay_s=0.01) as s:
        yield s


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"prompt {i}"}) + "\n" for i in range(4)))
    return str(path)


def spec(base_url, metrics_url, prompts, requests=12, output=16, interval_s=0.1, name="served"):
    return parse_spec({"name": name, "engine": "openai", "model": "ok",
                       "workload": {"arrivals": {"profile": "concurrent", "concurrency": 2},
                                    "stop": {"requests": requests}, "dataset": {"format": "jsonl", "path": prompts},
                                    "output_tokens": {"dist": "fixed", "value": output}},
                       "openai": {"base_url": base_url, "metrics_url": metrics_url,
                                  "metrics_interval_s": interval_s}})


# ---- pages as each server writes them --------------------------------------------------------------


def vllm_v1_page(engines=("0", "1"), old_names=False):
    """vLLM V1's page is prometheus_client's: the families as vllm/v1/metrics/loggers.py declares them (names,
    types, labels model_name and engine), written by prometheus_client itself."""
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", labels,
                    registry=registry)
    waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels,
                    registry=registry)
    kv = Gauge("vllm:gpu_cache_usage_perc" if old_names else "vllm:kv_cache_usage_perc",
               "KV-cache usage. 1 means 100 percent usage.", labels, registry=registry)
    prefix = "vllm:gpu_prefix_cache" if old_names else "vllm:prefix_cache"
    queries = Counter(f"{prefix}_queries", "Prefix cache queries, in terms of number of queried tokens.", labels,
                      registry=registry)
    hits = Counter(f"{prefix}_hits", "Prefix cache hits, in terms of number of cached tokens.", labels,
                   registry=registry)
    preemptions = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels,
                          registry=registry)
    ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels,
                     buckets=[0.001, 0.005, 0.01], registry=registry)
    for i, engine in enumerate(engines):
        running.labels("llama", engine).set(3 + i)
        waiting.labels("llama", engine).set(1)
        kv.labels("llama", engine).set(0.2 + 0.4 * i)
        queries.labels("llama", engine).inc(100)
        hits.labels("llama", engine).inc(30 + 10 * i)
        preemptions.labels("llama", engine).inc(2)
        ttft.labels("llama", engine).observe(0.004)
    return generate_latest(registry).decode()


def test_a_vllm_page_of_two_engine_cores():
    reading = read(vllm_v1_page())
    assert reading.server == "vllm"
    assert reading.requests_running == 7 and reading.requests_waiting == 2  # summed over the engines
    assert reading.kv_cache_usage == pytest.approx(0.4)  # their mean
    assert (reading.preemptions_total, reading.prefix_hits_total, reading.prefix_queries_total) == (4, 70, 200)
    assert reading.prefix_hit_rate is None


def test_a_vllm_page_before_0_9_names():
    reading = read(vllm_v1_page(engines=("0",), old_names=True))
    assert reading.server == "vllm" and reading.kv_cache_usage == pytest.approx(0.2)
    assert (reading.prefix_hits_total, reading.prefix_queries_total) == (30, 100)


def sglang_page(counters=True):
    """SGLang's page is prometheus_client's too: SchedulerMetricsCollector's and TokenizerMetricsCollector's
    families as python/sglang/srt/metrics/collector.py declares them."""
    registry = CollectorRegistry()
    labels = ["model_name", "tp_rank"]
    for name, value in (("sglang:num_running_reqs", 5), ("sglang:num_queue_reqs", 3), ("sglang:token_usage", 0.6),
                        ("sglang:cache_hit_rate", 0.5), ("sglang:num_used_tokens", 1200)):
        Gauge(name, name, labels, registry=registry).labels("qwen", "0").set(value)
    if counters:
        Counter("sglang:num_retracted_requests_total", "Total number of retracted requests.", labels,
                registry=registry).labels("qwen", "0").inc(6)
        Counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", labels,
                registry=registry).labels("qwen", "0").inc(400)
        Counter("sglang:cached_tokens_total", "Number of cached prompt tokens.", labels,
                registry=registry).labels("qwen", "0").inc(100)
    return generate_latest(registry).decode()


def test_an_sglang_page():
    reading = read(sglang_page())
    assert reading.server == "sglang"
    assert (reading.requests_running, reading.requests_waiting, reading.kv_cache_usage) == (5, 3, 0.6)
    assert (reading.preemptions_total, reading.prefix_hits_total, reading.prefix_queries_total) == (6, 100, 400)
    assert reading.prefix_hit_rate == 0.5
    older = read(sglang_page(counters=False))
    assert older.preemptions_total is None and older.prefix_queries_total is None and older.prefix_hit_rate == 0.5


# TGI's page: metrics-exporter-prometheus (Rust) writes TYPE lines and bare samples, no HELP; names from
# docs/source/reference/metrics.md of huggingface/text-generation-inference.
TGI_PAGE = """# TYPE tgi_request_count counter
tgi_request_count 14
# TYPE tgi_queue_size gauge
tgi_queue_size 4
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 9
# TYPE tgi_batch_current_max_tokens gauge
tgi_batch_current_max_tokens 4096
# TYPE tgi_request_duration histogram
tgi_request_duration_bucket{le="0.5"} 2
tgi_request_duration_bucket{le="+Inf"} 14
tgi_request_duration_sum 21.5
tgi_request_duration_count 14
"""


def test_a_tgi_page_has_only_running_and_waiting():
    reading = read(TGI_PAGE)
    assert (reading.server, reading.requests_running, reading.requests_waiting) == ("tgi", 9, 4)
    assert reading.kv_cache_usage is None and reading.preemptions_total is None and reading.prefix_hit_rate is None


@pytest.mark.parametrize("page, message", [
    ("<html><body>Not here</body></html>", "no metric of a known server"),
    ("# TYPE process_cpu_seconds counter\nprocess_cpu_seconds_total 3\n", "no metric of a known server"),
    ("vllm:num_requests_running{model_name=\"m\" 3\n", "not Prometheus text"),
    ("vllm:num_requests_running many\n", "not Prometheus text"),
])
def test_pages_benchd_cannot_read(page, message):
    with pytest.raises(PageError, match=message):
        read(page)


def test_counter_increase_across_a_server_restart():
    assert increase(10, 15) == 5 and increase(10, 3) == 3 and increase(None, 3) is None


@pytest.mark.parametrize("field, value, message", [
    ("metrics_url", "ftp://host/metrics", "openai.metrics_url"),
    ("metrics_interval_s", 0.01, "openai.metrics_interval_s"),
    ("metrics_interval_s", 61, "openai.metrics_interval_s"),
])
def test_bad_metrics_options_name_the_field(field, value, message):
    with pytest.raises(SpecError, match=message.replace(".", r"\.")):
        parse_spec({"engine": "openai", "openai": {field: value}})


# ---- reads during a run ---------------------------------------------------------------------------------


def test_a_run_stores_the_servers_timeline_and_exports_its_gauges(server, prompts):
    registry = CollectorRegistry()
    url = server.base_url.removesuffix("/v1") + "/metrics"
    reads_before = server.metrics_reads
    outcome = run(spec(server.base_url, url, prompts, requests=16, output=24), telemetry=Telemetry(Metrics(registry)))
    assert outcome.status == "succeeded", outcome.error
    timeline = outcome.timeline["server"]
    assert timeline["server"] == "vllm" and timeline["url"] == url and timeline["failures"] == 0
    assert timeline["warning"] is None and timeline["scrapes"] >= 3
    n = timeline["scrapes"]
    assert all(len(timeline[key]) == n for key in ("t", "kv_cache_usage", "requests_running", "requests_waiting",
                                                   "preemptions", "preemptions_per_s", "prefix_cache_hit_rate"))
    assert timeline["t"] == sorted(timeline["t"]) and timeline["t"][0] < 0.5
    # The mock's k-th read: engine 0 at 0.05·k, engine 1 at 0.25 (the mean is stored); preemptions k + 1.
    ks = [round((2 * kv - 0.25) / 0.05) for kv in timeline["kv_cache_usage"]]
    assert ks == list(range(ks[0], ks[0] + n)) and ks[0] >= reads_before
    assert timeline["kv_cache_usage"] == pytest.approx([(0.05 * k + 0.25) / 2 for k in ks])
    assert timeline["requests_waiting"] == [2.0] * n
    assert all(r >= 1 for r in timeline["requests_running"]) and max(timeline["requests_running"]) > 1
    assert timeline["preemptions"] == [float(k - ks[0]) for k in ks] and timeline["preemptions_total"] == n - 1
    assert all(rate > 0 for rate in timeline["preemptions_per_s"][1:])
    assert timeline["prefix_cache_hit_rate"] == [None] + [0.25] * (n - 1)
    assert timeline["prefix_cache_hit_rate_run"] == 0.25
    labels = {"model": "ok", "engine": "openai", "workload": "served", "gpu": ""}
    value = lambda name: registry.get_sample_value(name, labels)  # noqa: E731
    assert value("benchd_server_kv_cache_usage_ratio") == pytest.approx(timeline["kv_cache_usage"][-1])
    assert value("benchd_server_requests_waiting") == 2.0
    assert value("benchd_server_run_preemptions") == timeline["preemptions_total"]
    assert value("benchd_server_prefix_cache_hit_ratio") == 0.25
    assert abs(value("benchd_server_last_scrape_timestamp_seconds") - time.time()) < 60
    assert value("benchd_server_scrape_failures_total") == 0


def test_a_server_refusing_its_metrics_never_fails_the_run(tmp_path, server, prompts):
    registry = CollectorRegistry()
    url = f"http://127.0.0.1:{free_port()}/metrics"
    outcome = run(spec(server.base_url, url, prompts, requests=4, output=8), telemetry=Telemetry(Metrics(registry)))
    assert outcome.status == "succeeded", outcome.error
    assert outcome.summaries()[0].requests == 4 and outcome.summaries()[0].errors == 0
    timeline = outcome.timeline["server"]
    assert timeline["scrapes"] == 0 and timeline["failures"] >= 1 and timeline["server"] is None
    assert "ConnectionRefusedError" in timeline["warning"] and "no server timeline" in timeline["warning"]
    assert timeline["t"] == [] and timeline["preemptions_per_s"] == [] and timeline["preemptions_total"] is None
    labels = {"model": "ok", "engine": "openai", "workload": "served", "gpu": ""}
    assert registry.get_sample_value("benchd_server_scrape_failures_total", labels) == timeline["failures"]
    console = Console(record=True, width=200)
    print_summary(outcome, console)
    assert f"warning: {timeline['failures']} of {timeline['failures']} reads" in console.export_text()
    write_outputs(outcome, tmp_path)
    page = (tmp_path / "report.html").read_text()
    assert "id=server" in page and "ConnectionRefusedError" in page


@pytest.mark.parametrize("path, message", [("/metrics-html", "no metric of a known server"),
                                           ("/nothing", "http 404 not found"), ("/metrics-slow", "timeout")])
def test_failed_reads_are_counted_and_never_wait(server, path, message):
    scrape = ServerScrape(server.base_url.removesuffix("/v1") + path, interval_s=0.1).start()
    wait_for(lambda: scrape.failures >= 1, 30, "a failed read")
    began = time.perf_counter()
    scrape.stop()  # a read under way (the slow page) is not waited for
    assert time.perf_counter() - began < 0.5  # the slow page answers after 3 s (room for a loaded CI)
    timeline = scrape.timeline(began)
    assert timeline["scrapes"] == 0 and message in timeline["warning"].lower().replace("timed out", "timeout")


def test_gauges_of_a_run_on_a_live_daemon(tmp_path, server, prompts):
    url = server.base_url.removesuffix("/v1") + "/metrics"
    with daemon(tmp_path, model_roots=[os.path.dirname(prompts)]) as live:
        live.wait_ready()
        body = spec(server.base_url, url, prompts, requests=8, output=16, name="remote").model_dump(mode="json")
        created = live.http.post("/runs", json=body)
        assert created.status_code == 202, created.text
        row = live.wait_status(created.json()["id"], "succeeded", "failed")
        assert row["status"] == "succeeded", row.get("error")
        page = live.http.get("/metrics").text
        report = live.http.get(f"/runs/{row['id']}/report").text
    assert 'id=server' in report and "Server KV-cache usage" in report and "vllm, by its own metrics" in report
    assert "prefix-cache hit rate over the run: 25" in report
    lines = {line.split(" ")[0]: float(line.split(" ")[1]) for line in page.splitlines()
             if line.startswith("benchd_server_")}
    found = {name.split("{")[0] for name in lines if 'workload="remote"' in name}
    assert {"benchd_server_kv_cache_usage_ratio", "benchd_server_requests_running", "benchd_server_requests_waiting",
            "benchd_server_run_preemptions", "benchd_server_prefix_cache_hit_ratio",
            "benchd_server_last_scrape_timestamp_seconds"} <= found, page[-3000:]
    waiting = [v for name, v in lines.items() if name.startswith("benchd_server_requests_waiting{")
               and 'workload="remote"' in name]
    assert waiting == [2.0]
