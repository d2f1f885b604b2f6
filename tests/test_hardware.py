"""GPU gauges and health through an injected NVML stand-in, host and process gauges through the real psutil, the
node label, and the live daemon's /metrics."""

import logging
import os
import re
import subprocess
import sys
import time
from contextlib import contextmanager

import psutil
import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

from benchd.hardware.host import HostReader
from benchd.hardware.nvml import NVMLReader, visible_devices
from benchd.hardware.reader import HardwareReader
from benchd.hardware.sampler import HardwareSampler
from benchd.telemetry.exposition import NodeRegistry
from benchd.telemetry.gauges import HardwareCollector
from tests.fake_nvml import (
    FakeGPU,
    FakeMig,
    FakeNVML,
    NVMLError_FunctionNotFound,
    NVMLError_LibraryNotFound,
    NVMLError_NoPermission,
)
from tests.helpers import wait_for

UUID0, UUID1 = "GPU-aaaaaaaa-0000", "GPU-bbbbbbbb-1111"
H100 = "NVIDIA H100 80GB HBM3"


def reader(*gpus, visible=None, init_error=None, nvml=None):
    nvml_reader = NVMLReader(nvml or FakeNVML(list(gpus), init_error), cuda_visible_devices=visible)
    nvml_reader.start()
    return HardwareReader(nvml_reader, HostReader())


@contextmanager
def sampling(hardware: HardwareReader, interval_s: float = 0.05, **options):
    """A started sampler, once its first snapshot is in."""
    sampler = HardwareSampler(hardware, interval_s, **options)
    sampler.start()
    try:
        wait_for(lambda: sampler.latest is not None, 30, "the first hardware snapshot")
        yield sampler
    finally:
        sampler.stop()


@contextmanager
def scraped(hardware: HardwareReader):
    """A registry serving the hardware through a sampler, as the daemon does."""
    with sampling(hardware) as sampler:
        registry = CollectorRegistry()
        registry.register(HardwareCollector(sampler))
        yield registry


def gpu_value(registry, name, gpu="0", uuid=UUID0, **extra):
    return registry.get_sample_value(name, {"gpu": gpu, "uuid": uuid, "name": H100, **extra})


def test_every_gpu_gauge_with_units_and_labels():
    with scraped(reader(FakeGPU(UUID0), FakeGPU(UUID1, util_percent=3))) as registry:
        assert gpu_value(registry, "benchd_gpu_utilization_ratio") == 0.87
        assert gpu_value(registry, "benchd_gpu_utilization_ratio", gpu="1", uuid=UUID1) == 0.03
        assert gpu_value(registry, "benchd_gpu_memory_utilization_ratio") == 0.41
        assert gpu_value(registry, "benchd_gpu_memory_used_bytes") == 40 * 2**30  # v2: as nvidia-smi counts it
        assert gpu_value(registry, "benchd_gpu_memory_free_bytes") == 40 * 2**30 - 512 * 2**20  # less the reserve
        assert gpu_value(registry, "benchd_gpu_memory_total_bytes") == 80 * 2**30
        assert gpu_value(registry, "benchd_gpu_power_watts") == pytest.approx(523.456)  # mW → W
        assert gpu_value(registry, "benchd_gpu_power_limit_watts") == 700.0
        assert gpu_value(registry, "benchd_gpu_energy_joules_total") == 1000.0  # mJ → J, a counter
        assert gpu_value(registry, "benchd_gpu_temperature_celsius") == 61
        assert gpu_value(registry, "benchd_gpu_sm_clock_hertz") == 1980e6  # MHz → Hz
        assert gpu_value(registry, "benchd_gpu_memory_clock_hertz") == 2619e6
        assert gpu_value(registry, "benchd_gpu_pcie_transmit_bytes_per_second") == 1000 * 1024  # KB/s → B/s
        assert gpu_value(registry, "benchd_gpu_pcie_receive_bytes_per_second") == 2000 * 1024
        assert gpu_value(registry, "benchd_gpu_max_sm_clock_hertz") == 1980e6
        # Clock events by DCGM exporter's clock_event names: now, as NVML's mask, and onsets since the start.
        assert gpu_value(registry, "benchd_gpu_clock_event", clock_event="power_cap") == 1
        assert gpu_value(registry, "benchd_gpu_clock_event", clock_event="hw_thermal") == 0
        assert gpu_value(registry, "benchd_gpu_clocks_event_reasons") == 0x4
        assert gpu_value(registry, "benchd_gpu_clock_events_total", clock_event="power_cap") == 1
        assert gpu_value(registry, "benchd_gpu_clock_events_total", clock_event="hw_thermal") == 0
        reasons = {s.labels["clock_event"] for f in registry.collect() if f.name == "benchd_gpu_clock_event"
                   for s in f.samples if s.labels["gpu"] == "0"}
        assert reasons == {"gpu_idle", "clocks_setting", "power_cap", "hw_slowdown", "sync_boost", "sw_thermal",
                           "hw_thermal", "hw_power_brake", "display_clocks"}
        assert gpu_value(registry, "benchd_gpu_sm_activity_ratio") is None  # no GPM on this GPU


def test_health_counters_and_the_info_series_as_dcgm_users_expect():
    gpu = FakeGPU(UUID0, bus_id="00000000:9A:00.0", ecc={(0, 0): 2, (1, 0): 0, (0, 1): 12, (1, 1): 1},
                  remapped_rows=(3, 1, 1, 0), pcie_replays=7, encoder_percent=3, decoder_percent=5)
    with scraped(reader(gpu)) as registry:
        assert gpu_value(registry, "benchd_gpu_ecc_volatile_errors_total", error_type="correctable") == 2
        assert gpu_value(registry, "benchd_gpu_ecc_volatile_errors_total", error_type="uncorrectable") == 0
        assert gpu_value(registry, "benchd_gpu_ecc_aggregate_errors_total", error_type="correctable") == 12
        assert gpu_value(registry, "benchd_gpu_ecc_aggregate_errors_total", error_type="uncorrectable") == 1
        assert gpu_value(registry, "benchd_gpu_remapped_rows_total", error_type="correctable") == 3
        assert gpu_value(registry, "benchd_gpu_remapped_rows_total", error_type="uncorrectable") == 1
        assert gpu_value(registry, "benchd_gpu_row_remap_pending") == 1
        assert gpu_value(registry, "benchd_gpu_row_remap_failure") == 0
        assert gpu_value(registry, "benchd_gpu_pcie_replays_total") == 7
        assert gpu_value(registry, "benchd_gpu_encoder_utilization_ratio") == 0.03  # % → 0–1
        assert gpu_value(registry, "benchd_gpu_decoder_utilization_ratio") == 0.05
        assert gpu_value(registry, "benchd_gpu_last_xid_code") == 0  # watching, none yet
        assert gpu_value(registry, "benchd_gpu_info", pci_bus_id="00000000:9A:00.0", driver_version="570.133.20",
                         cuda_version="12.8") == 1


def test_what_a_gpu_driver_or_binding_lacks_is_absent_never_an_error(caplog):
    class OldBindings(FakeNVML):  # nvidia-ml-py from before row remapping and NVLink field values
        def __getattribute__(self, name):
            if name in ("nvmlDeviceGetRemappedRows", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX"):
                raise AttributeError(name)
            return super().__getattribute__(name)

    gpu = FakeGPU(UUID0, ecc_enabled=False, nvlink_kib={0: (1, 2)}, event_types=0x1,
                  unsupported={"nvmlDeviceGetEncoderUtilization"},
                  errors={"nvmlDeviceGetPcieReplayCounter": NVMLError_FunctionNotFound,
                          "nvmlDeviceGetDecoderUtilization": NVMLError_NoPermission})
    with caplog.at_level(logging.INFO, logger="benchd.hardware.reader"):
        hardware = reader(gpu, nvml=OldBindings([gpu]))
        with scraped(hardware) as registry:
            names = {f.name for f in registry.collect()}
            assert gpu_value(registry, "benchd_gpu_power_watts") == pytest.approx(523.456)  # the rest is served
    for absent in ("benchd_gpu_ecc_volatile_errors", "benchd_gpu_remapped_rows", "benchd_gpu_row_remap_pending",
                   "benchd_gpu_nvlink_transmit_bytes", "benchd_gpu_pcie_replays",
                   "benchd_gpu_encoder_utilization_ratio", "benchd_gpu_decoder_utilization_ratio",
                   "benchd_gpu_xid_errors", "benchd_gpu_last_xid_code"):
        assert absent not in names
    assert "ECC is off" in caplog.text and "lacks nvmlDeviceGetRemappedRows" in caplog.text
    assert "reports no XID events" in caplog.text


def test_nvlink_bytes_per_active_link():
    with scraped(reader(FakeGPU(UUID0, nvlink_kib={0: (100, 200), 2: (300, 400)}), FakeGPU(UUID1))) as registry:
        assert gpu_value(registry, "benchd_gpu_nvlink_transmit_bytes_total", link="0") == 100 * 1024  # KiB → B
        assert gpu_value(registry, "benchd_gpu_nvlink_receive_bytes_total", link="0") == 200 * 1024
        assert gpu_value(registry, "benchd_gpu_nvlink_receive_bytes_total", link="2") == 400 * 1024
        links = {(s.labels["gpu"], s.labels["link"]) for f in registry.collect()
                 if f.name == "benchd_gpu_nvlink_transmit_bytes" for s in f.samples}
        assert links == {("0", "0"), ("0", "2")}  # link 1 is down; the second GPU has no NVLink


def test_xid_events_are_counted_by_code_with_a_bounded_label_set():
    gpus = [FakeGPU(UUID0), FakeGPU(UUID1), FakeGPU("GPU-cccc")]
    nvml = FakeNVML(gpus)
    hardware = reader(nvml=nvml, visible="0,1")
    for code in (79, 79, 48, 5000):
        nvml.emit(gpus[0], 0x8, code)
    nvml.emit(gpus[0], 0x1, 0)  # a single-bit ECC event: not an XID
    nvml.emit(gpus[2], 0x8, 13)  # a GPU benchd does not watch
    first = {g.uuid: g for g in hardware.read().gpus}
    assert first[UUID0].labelled["xid_errors"] == {"79": 2, "48": 1, "other": 1}
    assert first[UUID0].values["last_xid_code"] == 5000
    assert first[UUID1].labelled["xid_errors"] == {} and first[UUID1].values["last_xid_code"] == 0
    assert first[UUID0].values["xid_events"] == 4 and first[UUID1].values["xid_events"] == 0  # every code together
    nvml.emit(gpus[1], 0x8, 31)
    second = {g.uuid: g for g in hardware.read().gpus}
    assert second[UUID0].labelled["xid_errors"] == {"79": 2, "48": 1, "other": 1}  # counts since start
    assert second[UUID1].labelled["xid_errors"] == {"31": 1} and second[UUID1].values["last_xid_code"] == 31
    with scraped(hardware) as registry:
        assert gpu_value(registry, "benchd_gpu_xid_errors_total", xid="79") == 2
        assert gpu_value(registry, "benchd_gpu_xid_errors_total", gpu="1", uuid=UUID1, xid="31") == 1
        assert gpu_value(registry, "benchd_gpu_xid_events_total") == 4


def test_mig_instances_with_dcgm_labels_and_their_own_memory():
    migs = [FakeMig(1, 0, "3g.40gb", "MIG-1111", memory_used=5 * 2**30, memory_total=40 * 2**30),
            FakeMig(2, 0, "1g.10gb", "MIG-2222"), FakeMig(2, 1, "1g.10gb", "MIG-3333")]
    hardware = reader(FakeGPU(UUID0, mig=migs))
    with scraped(hardware) as registry:
        labels = {"GPU_I_ID": "1", "GPU_I_PROFILE": "3g.40gb", "GPU_CI_ID": "0"}
        assert gpu_value(registry, "benchd_gpu_memory_used_bytes", **labels) == 5 * 2**30
        assert gpu_value(registry, "benchd_gpu_memory_total_bytes", **labels) == 40 * 2**30
        assert gpu_value(registry, "benchd_gpu_memory_used_bytes") == 40 * 2**30  # the whole GPU, no MIG labels
        assert gpu_value(registry, "benchd_gpu_utilization_ratio") is None  # N/A in MIG mode
        assert gpu_value(registry, "benchd_gpu_power_watts") == pytest.approx(523.456)
        assert gpu_value(registry, "benchd_gpu_mig_info", mig_uuid="MIG-3333", GPU_I_ID="2", GPU_I_PROFILE="1g.10gb",
                         GPU_CI_ID="1") == 1
        instances = {(s.labels.get("GPU_I_ID"), s.labels.get("GPU_CI_ID")) for f in registry.collect()
                     if f.name == "benchd_gpu_memory_used_bytes" for s in f.samples}
        assert instances == {(None, None), ("1", "0"), ("2", "0"), ("2", "1")}
    # CUDA_VISIBLE_DEVICES naming one MIG device: its GPU stays (its health is the instance's), with that instance.
    only = reader(FakeGPU(UUID0, mig=migs), visible="MIG-2222")
    assert [(gpu, m.uuid) for gpu, m in only.nvml.migs] == [("0", "MIG-2222")]
    old_style = reader(FakeGPU(UUID0, mig=migs), visible=f"MIG-{UUID0}/2/1")
    assert [m.uuid for _, m in old_style.nvml.migs] == ["MIG-3333"]


def test_gpm_metrics_on_hopper_class_gpus():
    with scraped(reader(FakeGPU(UUID0, gpm=True))) as registry:
        assert gpu_value(registry, "benchd_gpu_sm_activity_ratio") == 0.55
        assert gpu_value(registry, "benchd_gpu_tensor_activity_ratio") == 0.33
        assert gpu_value(registry, "benchd_gpu_dram_bandwidth_utilization_ratio") == 0.22


def test_cuda_visible_devices_is_respected():
    gpus = [FakeGPU(UUID0), FakeGPU(UUID1), FakeGPU("GPU-cccc")]
    assert [d[0] for d in reader(*gpus, visible="2,0").nvml.devices] == ["0", "2"]
    assert [d[1] for d in reader(*gpus, visible="GPU-bbbb").nvml.devices] == [UUID1]
    assert reader(*gpus, visible="").nvml.devices == []
    assert visible_devices("1,-1,0") == ["1"]  # CUDA stops at the first invalid entry
    assert visible_devices(None) is None


def test_unsupported_fields_are_left_out_once(caplog):
    gpu = FakeGPU(UUID0, unsupported={"nvmlDeviceGetPowerUsage", "nvmlDeviceGetPcieThroughput"})
    hardware = reader(gpu)
    with caplog.at_level(logging.WARNING, logger="benchd.hardware.reader"):
        for _ in range(3):
            values = hardware.read().gpus[0].values
            assert "power_watts" not in values and "pcie_transmit_bytes_per_second" not in values
            assert values["temperature_celsius"] == 61
    assert sum("does not support power" in r.message for r in caplog.records) == 1


def test_no_nvml_means_no_gpu_gauges_and_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="benchd.hardware.reader"):
        hardware = reader(FakeGPU(UUID0), init_error=NVMLError_LibraryNotFound("libnvidia-ml.so.1 not found"))
    assert not hardware.nvml.available and "NVML is not available" in caplog.text
    with scraped(hardware) as registry:
        assert not [f for f in registry.collect() if f.name.startswith("benchd_gpu")]
        assert registry.get_sample_value("benchd_host_cpu_utilization_ratio") is not None


def test_a_gpu_failing_mid_run_pauses_its_gauges(caplog):
    bad, good = FakeGPU(UUID0), FakeGPU(UUID1)
    hardware = reader(bad, good)
    assert len(hardware.read().gpus) == 2
    bad.lost = True
    with caplog.at_level(logging.WARNING, logger="benchd.hardware.reader"):
        readings = [hardware.read() for _ in range(3)]
    assert all([g.uuid for g in r.gpus] == [UUID1] for r in readings)
    assert sum("failed to read" in r.message for r in caplog.records) == 1  # said once, not per read
    bad.lost = False
    assert len(hardware.read().gpus) == 2  # and it comes back


def test_host_gauges_from_real_psutil():
    with scraped(HardwareReader(NVMLReader(FakeNVML([])), HostReader())) as registry:
        get = registry.get_sample_value
        assert 0 <= get("benchd_host_cpu_utilization_ratio") <= 1
        cores = [get("benchd_host_cpu_core_utilization_ratio", {"core": str(i)}) for i in range(psutil.cpu_count())]
        assert all(0 <= c <= 1 for c in cores)
        total = psutil.virtual_memory().total
        assert get("benchd_host_memory_total_bytes") == total
        assert 0 < get("benchd_host_memory_used_bytes") < total
        assert 0 < get("benchd_host_memory_available_bytes") <= total
        assert get("benchd_host_load_average", {"period": "1m"}) >= 0
        rss = psutil.Process(os.getpid()).memory_info().rss
        assert 0.5 * rss < get("benchd_host_process_resident_memory_bytes", {"process": "daemon"}) < 2 * rss
        assert 0 <= get("benchd_host_process_cpu_utilization_ratio", {"process": "daemon"}) <= 1
        user = get("benchd_host_process_cpu_seconds_total", {"process": "daemon", "mode": "user"})
        times = psutil.Process(os.getpid()).cpu_times()
        assert 0 < user <= times.user  # read a moment before
        assert get("benchd_host_process_cpu_seconds_total", {"process": "daemon", "mode": "system"}) <= times.system
        assert get("benchd_host_process_cpu_cores", {"process": "daemon"}) == len(os.sched_getaffinity(0))


# A process whose threads each keep a core busy: hashlib releases the GIL while it hashes a large buffer.
BUSY_THREADS = """
import hashlib, sys, threading
data = bytes(1 << 20)
def spin():
    while True:
        hashlib.sha256(data).digest()
for _ in range(4):
    threading.Thread(target=spin, daemon=True).start()
sys.stdin.read()
"""


def test_a_process_busy_on_every_core_reads_at_most_one_however_often_it_is_read():
    # Four busy threads on this machine's cores, read back to back: CPU times move in clock ticks of each thread,
    # so a ratio taken over a millisecond read several machines' worth (2.12 was seen on two cores).
    child = subprocess.Popen([sys.executable, "-c", BUSY_THREADS], stdin=subprocess.PIPE)
    try:
        host = HostReader()
        host.watch("worker", child.pid)
        readings = []
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            readings.append(host.read().processes["worker"])
        cores = len(os.sched_getaffinity(child.pid))
    finally:
        child.communicate(b"")
    ratios = [r.cpu_ratio for r in readings]
    assert all(0 <= r <= 1 for r in ratios), max(ratios)
    seconds = [r.cpu_user_s + r.cpu_system_s for r in readings]
    assert ratios[-1] > 0 and seconds == sorted(seconds) and seconds[-1] > seconds[0]
    assert readings[-1].cores == cores


def test_a_worker_process_is_reported_beside_the_daemon_while_watched():
    # A child that holds 64 MiB, as a worker holds its model.
    child = subprocess.Popen([sys.executable, "-c", "import sys; b = bytearray(64 << 20); sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    hardware = HardwareReader(NVMLReader(FakeNVML([])), HostReader())
    with sampling(hardware) as sampler:
        try:
            wait_for(lambda: psutil.Process(child.pid).memory_info().rss > 64 << 20, 30, "the child's memory")
            sampler.watch_process("worker", child.pid)
            wait_for(lambda: "worker" in sampler.latest.host.processes, 10, "a read with the worker")
            worker = sampler.latest.host.processes["worker"]
            assert worker.resident_bytes > 64 << 20 and 0 <= worker.cpu_ratio <= 1
            assert "daemon" in sampler.latest.host.processes
            sampler.unwatch_process("worker")
            wait_for(lambda: "worker" not in sampler.latest.host.processes, 10, "a read without the worker")
            sampler.watch_process("worker", child.pid)
            wait_for(lambda: "worker" in sampler.latest.host.processes, 10, "the worker watched again")
        finally:
            child.communicate(b"")
        # An exited worker leaves by itself.
        wait_for(lambda: "worker" not in sampler.latest.host.processes, 10, "the exited worker to leave")
        sampler.watch_process("gone", child.pid)  # a pid that no longer exists: logged, never raised
        assert "gone" not in sampler.latest.host.processes


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

    root = Path(__file__).parent.parent
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


# ---- clock events in the verdict ---------------------------------------------------------------------------------

CLOCK_EVENT_BITS = [(0x1, "gpu_idle"), (0x2, "clocks_setting"), (0x4, "power_cap"), (0x8, "hw_slowdown"),
                    (0x10, "sync_boost"), (0x20, "sw_thermal"), (0x40, "hw_thermal"), (0x80, "hw_power_brake"),
                    (0x100, "display_clocks")]


def judged(clocks, **rules):
    """A healthy closed-loop stage's verdict with these GPU clocks."""
    from benchd.measure.records import RequestRecord, summarize
    from benchd.spec.validity import ValidityRules

    records = [RequestRecord(index=i, request_id=f"r{i}", warmup=False, prompt_tokens=4, max_new_tokens=2,
                             scheduled_s=i * 0.1, submitted_s=i * 0.1, arrival_s=[i * 0.1 + 0.02, i * 0.1 + 0.03],
                             arrival_tokens=[1, 1], finished_s=i * 0.1 + 0.03) for i in range(30)]
    return summarize("concurrent=1", "succeeded", records, rules=ValidityRules(**rules), clocks=clocks)


@pytest.mark.parametrize(("bit", "event"), CLOCK_EVENT_BITS)
def test_each_clock_event_nvml_reports_gives_its_documented_verdict(bit, event):
    """Thermal and hardware slowdown (hw_slowdown, sw_thermal, hw_thermal, hw_power_brake) beyond the share make a
    stage INVALID: throttled, naming the reason; the power cap and the rest are shown, not judged."""
    from benchd.hardware.clocks import SLOWDOWN_EVENTS, stage_clocks

    hardware = reader(FakeGPU(UUID0, throttle_mask=bit, sm_mhz=1485), FakeGPU(UUID1, throttle_mask=0))
    snapshots = [hardware.read() for _ in range(8)]
    (clocks,) = stage_clocks(snapshots, snapshots[0].t, snapshots[-1].t, ["0"])  # the stage's GPU only
    assert clocks.gpu == "0" and clocks.samples == 8
    assert clocks.events[event] == 1.0 and sum(clocks.events.values()) == 1.0
    assert clocks.sm_clock_ratio == pytest.approx(0.75)  # 1,485 of 1,980 MHz
    summary = judged([clocks])
    assert summary.clocks == [clocks]
    if event in SLOWDOWN_EVENTS:
        assert summary.valid is False and [i.check for i in summary.invalid] == ["throttled"]
        assert summary.invalid[0].message.startswith("throttled: GPU 0: ") and \
            f"({event}) in 100% of 8 samples, over 5%" in summary.invalid[0].message
    else:
        assert summary.valid is True, summary.invalid


def test_a_stage_throttled_in_a_share_of_its_samples_is_judged_by_that_share():
    from benchd.hardware.clocks import stage_clocks

    gpu = FakeGPU(UUID0, throttle_mask=0x4)
    hardware = reader(gpu)

    def stage(thermal):  # 40 reads at its power cap all along, thermally slowed in those given
        snapshots = []
        for i in range(40):
            gpu.throttle_mask = 0x4 | (0x40 if i in thermal else 0)
            snapshots.append(hardware.read())
        (clocks,) = stage_clocks(snapshots, snapshots[0].t, snapshots[-1].t, ["0"])
        return clocks, snapshots

    some, _ = stage((10, 11))
    assert some.events["hw_thermal"] == 0.05 and some.events["power_cap"] == 1.0
    assert judged([some]).valid is True  # 5 %: at the rule, not over it
    more, snapshots = stage((10, 11, 30))
    assert more.events["hw_thermal"] == 0.075
    summary = judged([more])
    assert "thermal slowdown (HW) (hw_thermal) in 8% of 40 samples, over 5%" in summary.invalid[0].message
    assert judged([more], max_slowdown_share=0.1).valid is True  # the share is a rule
    assert judged([more], max_slowdown_share=None).valid is True
    # Each onset counted, as DCGM exporter's clock-event total counts them: 1 in the first stage, 2 in the second.
    assert snapshots[-1].gpus[0].labelled["clock_events"]["hw_thermal"] == 3
    assert snapshots[-1].gpus[0].labelled["clock_events"]["power_cap"] == 1


def test_comparisons_say_when_the_two_sides_ran_under_different_clock_states():
    from benchd.hardware.clocks import GPUClocks, clock_difference

    def gpu(power_cap, sm_hz=1980e6):
        events = {"power_cap": power_cap, "gpu_idle": 1 - power_cap}
        return GPUClocks(gpu="0", samples=100, events=events, sm_clock_mean_hertz=sm_hz, sm_clock_max_hertz=1980e6)

    assert clock_difference([[gpu(0.98, 1700e6)]], [[gpu(0.98, 1710e6)]]) is None
    assert clock_difference([[gpu(0.98)]], [[]]) is None  # no samples on B: nothing to say
    found = clock_difference([[gpu(0.98, 1700e6)], [gpu(0.96, 1690e6)]], [[gpu(0.0)]])
    assert found == ("the two sides ran under different clock states: power cap (power_cap) in 97% of A's samples "
                     "against 0% of B's; mean SM clock 86% of its maximum on A against 100% on B")
    # A regression comparison (and a matrix's, which is made of them) carries it, from each run's first stage.
    from benchd.measure.compare import Side, compare

    def side(name, clocks):
        return Side(run_ids=[name], samples={}, output_tokens_per_s=[], energy_per_token_j=[],
                    clocks=[[c.model_dump(mode="json") for c in clocks]])

    assert compare(side("a", [gpu(0.98)]), side("b", [gpu(0.97)])).clock_states is None
    assert compare(side("a", [gpu(0.98)]), side("b", [gpu(0.1)])).clock_states.startswith(
        "the two sides ran under different clock states: power cap (power_cap) in 98% of A's samples")
