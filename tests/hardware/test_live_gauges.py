"""The hardware's series as the daemon serves them: the node label, the live daemon's GPU gauges and stored
hardware summary, ratios within one, and a healthy GPU reading zero on every health series the dashboards use."""

import re
import subprocess
import sys

import pytest
from prometheus_client import Counter
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

from benchd.hardware.reader import HardwareReader
from benchd.hardware.sampler import HardwareSampler
from benchd.telemetry.exposition import NodeRegistry
from benchd.telemetry.gauges import HardwareCollector
from tests.fake_nvml import (
    FakeGPU,
)
from tests.hardware.helpers import BUSY_THREADS, H100, UUID0, reader, scraped
from tests.helpers import wait_for


def test_the_node_label_reaches_every_series_and_exemplars_survive():
    registry = NodeRegistry("node-7")
    requests = Counter("benchd_things", "Things.", ("kind",), registry=registry)
    requests.labels("a").inc(2, exemplar={"trace_id": "abc"})
    registry.register(HardwareCollector(_served(reader(FakeGPU(UUID0)))))
    samples = [s for f in registry.collect() for s in f.samples]
    assert samples and all(s.labels["hostname"] == "node-7" for s in samples)
    assert registry.get_sample_value("benchd_things_total", {"kind": "a", "hostname": "node-7"}) == 2
    assert 'benchd_things_total{hostname="node-7",kind="a"} 2.0 # {trace_id="abc"} 2.0' in \
        openmetrics(registry).decode()
    assert registry.get_sample_value("benchd_gpu_power_watts", {"gpu": "0", "uuid": UUID0, "name": H100,
                                                               "hostname": "node-7"}) == pytest.approx(523.456)


def _served(hardware: HardwareReader) -> HardwareSampler:
    sampler = HardwareSampler(hardware, interval_s=3600)
    sampler.start()
    wait_for(lambda: sampler.latest is not None, 30, "the first hardware snapshot")
    sampler.stop()
    return sampler


def test_live_daemon_exports_gpu_gauges_and_stores_the_hardware_summary(tmp_path):
    from benchd.api import create_app
    from benchd.daemon.settings import Settings
    from tests.helpers import LiveServer, spec, submit

    settings = Settings(database_url=f"sqlite:///{tmp_path}/benchd.db", device="cpu", default_schedule=False,
                        hardware_interval_s=0.05, node_name="gpu-node-3")
    built = []
    app = create_app(settings, hardware_reader=lambda: built.append(1) or reader(FakeGPU(UUID0)))
    with LiveServer(app) as server:
        run = server.wait_status(submit(server, spec(requests=12)), "succeeded", "failed")
        text = server.http.get("/metrics").text
    assert len(built) == 1  # one reader, behind one sampler thread, for scrapes and runs
    assert f'benchd_gpu_power_watts{{gpu="0",hostname="gpu-node-3",name="{H100}",uuid="{UUID0}"}} 523.456' in text
    assert 'benchd_host_process_resident_memory_bytes{hostname="gpu-node-3",process="daemon"}' in text
    assert 'benchd_hardware_sampler_stalled{hostname="gpu-node-3"} 0.0' in text
    series = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert all('hostname="gpu-node-3"' in line for line in series)
    age = next(float(line.split()[-1]) for line in series if line.startswith("benchd_hardware_sample_age_seconds"))
    assert 0 <= age < 10
    assert run["status"] == "succeeded"
    assert run["hardware"]["gpus"][0]["uuid"] == UUID0
    assert run["hardware"]["gpu_utilization_mean"] == pytest.approx(0.87)


def test_no_ratio_series_of_a_live_daemon_exceeds_one(tmp_path):
    """Every *_ratio series on /metrics, scraped over and over while a run keeps the worker's threads busy, with the
    hardware read every 2 ms (the shorter the window, the larger a CPU ratio's error was)."""
    from prometheus_client.parser import text_string_to_metric_families

    from benchd.api import create_app
    from benchd.daemon.settings import Settings
    from tests.helpers import LiveServer, spec, submit

    settings = Settings(database_url=f"sqlite:///{tmp_path}/benchd.db", device="cpu", dtype="float32",
                        default_schedule=False, hardware_interval_s=0.002, node_name="ratio-node",
                        workers={"log_dir": str(tmp_path / "workers")})
    app = create_app(settings, hardware_reader=lambda: reader(FakeGPU(UUID0)))
    seen: dict[str, float] = {}  # series → the largest value scraped
    busy = subprocess.Popen([sys.executable, "-c", BUSY_THREADS], stdin=subprocess.PIPE)
    with LiveServer(app) as server:
        # A process of four busy threads watched beside the daemon and its worker, as a worker's would be.
        app.state.services.hardware.watch_process("busy", busy.pid)
        run_id = submit(server, spec(requests=24, output=16, concurrency=4))

        def scan() -> bool:
            for family in text_string_to_metric_families(server.http.get("/metrics").text):
                if family.name.endswith("_ratio"):
                    for sample in family.samples:
                        key = f"{sample.name}{{{sample.labels.get('process', '')}}}"
                        seen[key] = max(seen.get(key, sample.value), sample.value)
                        assert 0 <= sample.value <= 1, (sample.name, sample.labels, sample.value)
            return server.http.get(f"/runs/{run_id}").json()["status"] not in ("queued", "running")

        try:
            wait_for(scan, 300, "the run to end, scraping all along")
            scan()
        finally:
            busy.communicate(b"")
    names = {key.split("{")[0] for key in seen}
    assert {"benchd_host_process_cpu_utilization_ratio", "benchd_host_cpu_utilization_ratio",
            "benchd_gpu_utilization_ratio", "benchd_kv_cache_usage_ratio"} <= names, names
    assert {"benchd_host_process_cpu_utilization_ratio{worker}", "benchd_host_process_cpu_utilization_ratio{busy}"} \
        <= set(seen)


def health_expressions() -> list[str]:
    """The expressions of the GPU-health panels, the fleet's health table and the GPU-health alerts."""
    import importlib.util
    from pathlib import Path

    import yaml

    root = Path(__file__).parents[2]
    loaded = importlib.util.spec_from_file_location("dashboards", root / "grafana" / "dashboards.py")
    dashboards = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(dashboards)
    rules = yaml.safe_load((root / "prometheus-rules" / "benchd-gpu-health.yml").read_text())
    return [*(t["expr"] for panel in dashboards.gpu_health() for t in panel["targets"]),
            *(expr for _, _, expr in dashboards.FLEET_HEALTH),
            *(rule["expr"] for group in rules["groups"] for rule in group["rules"])]


def test_a_healthy_gpu_reads_zero_on_every_health_series_the_dashboards_and_alerts_use():
    # As DCGM exporter users see it: no XID, ECC error, remapped row or throttle yet is a 0, not "no data".
    healthy = FakeGPU(UUID0, ecc={(0, 0): 0, (1, 0): 0, (0, 1): 0, (1, 1): 0}, remapped_rows=(0, 0, 0, 0),
                      pcie_replays=0, throttle_mask=0)
    names = {n for expr in health_expressions() for n in re.findall(r"\bbenchd_gpu_\w+", expr)}
    names -= {"benchd_gpu_nvlink_transmit_bytes_total", "benchd_gpu_nvlink_receive_bytes_total"}  # NVLink GPUs only
    assert {"benchd_gpu_xid_errors_total", "benchd_gpu_xid_events_total", "benchd_gpu_ecc_volatile_errors_total",
            "benchd_gpu_row_remap_pending", "benchd_gpu_clock_event"} <= names
    counts = names - {"benchd_gpu_info", "benchd_gpu_pcie_transmit_bytes_per_second",
                      "benchd_gpu_pcie_receive_bytes_per_second", "benchd_gpu_encoder_utilization_ratio",
                      "benchd_gpu_decoder_utilization_ratio"}
    with scraped(reader(healthy)) as registry:
        samples = {}
        for family in registry.collect():
            for sample in family.samples:
                if sample.labels.get("uuid") == UUID0:
                    samples.setdefault(sample.name, []).append(sample.value)
    # A code's own series comes with its first event; every code together reads 0 from the start.
    assert "benchd_gpu_xid_errors_total" not in samples and samples["benchd_gpu_xid_events_total"] == [0]
    for name in sorted(names - {"benchd_gpu_xid_errors_total"}):
        assert name in samples, f"{name}: no data on a healthy GPU"
    for name in sorted(counts - {"benchd_gpu_xid_errors_total"}):
        assert set(samples[name]) == {0}, (name, samples[name])
