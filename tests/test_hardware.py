"""GPU gauges through an injected NVML stand-in, host gauges through the real psutil, run summaries."""

import logging
import os

import psutil
import pytest
from prometheus_client import CollectorRegistry

from benchd.gauges import HardwareCollector
from benchd.hardware import GPUReading, HardwareReader, HostReader, HostReading, NVMLReader, Snapshot, visible_devices
from benchd.runner import run
from benchd.sampler import HardwareSampler, summarize
from tests.fake_nvml import FakeGPU, FakeNVML, NVMLError_LibraryNotFound
from tests.helpers import make_spec

UUID0, UUID1 = "GPU-aaaaaaaa-0000", "GPU-bbbbbbbb-1111"


def reader(*gpus, visible=None, init_error=None):
    nvml = NVMLReader(FakeNVML(list(gpus), init_error), cuda_visible_devices=visible)
    nvml.start()
    return HardwareReader(nvml, HostReader())


def scrape(hardware: HardwareReader) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(HardwareCollector(hardware))
    return registry


def gpu_value(registry, name, gpu="0", uuid=UUID0, **extra):
    return registry.get_sample_value(name, {"gpu": gpu, "uuid": uuid, "name": "NVIDIA H100 80GB HBM3", **extra})


def test_every_gpu_gauge_with_units_and_labels():
    registry = scrape(reader(FakeGPU(UUID0), FakeGPU(UUID1, util_percent=3)))
    assert gpu_value(registry, "benchd_gpu_utilization_ratio") == 0.87
    assert gpu_value(registry, "benchd_gpu_utilization_ratio", gpu="1", uuid=UUID1) == 0.03
    assert gpu_value(registry, "benchd_gpu_memory_utilization_ratio") == 0.41
    assert gpu_value(registry, "benchd_gpu_memory_used_bytes") == 40 * 2**30  # v2: as nvidia-smi counts it
    assert gpu_value(registry, "benchd_gpu_memory_free_bytes") == 40 * 2**30
    assert gpu_value(registry, "benchd_gpu_memory_total_bytes") == 80 * 2**30
    assert gpu_value(registry, "benchd_gpu_power_watts") == pytest.approx(523.456)  # mW → W
    assert gpu_value(registry, "benchd_gpu_power_limit_watts") == 700.0
    assert gpu_value(registry, "benchd_gpu_energy_joules_total") == 1000.0  # mJ → J, a counter
    assert gpu_value(registry, "benchd_gpu_temperature_celsius") == 61
    assert gpu_value(registry, "benchd_gpu_sm_clock_hertz") == 1980e6  # MHz → Hz
    assert gpu_value(registry, "benchd_gpu_memory_clock_hertz") == 2619e6
    assert gpu_value(registry, "benchd_gpu_pcie_transmit_bytes_per_second") == 1000 * 1024  # KB/s → B/s
    assert gpu_value(registry, "benchd_gpu_pcie_receive_bytes_per_second") == 2000 * 1024
    assert gpu_value(registry, "benchd_gpu_clock_throttle_reason", reason="sw_power_cap") == 1
    assert gpu_value(registry, "benchd_gpu_clock_throttle_reason", reason="hw_thermal_slowdown") == 0
    reasons = {s.labels["reason"] for f in registry.collect() if f.name == "benchd_gpu_clock_throttle_reason"
               for s in f.samples if s.labels["gpu"] == "0"}
    assert len(reasons) == 9
    assert gpu_value(registry, "benchd_gpu_sm_activity_ratio") is None  # no GPM on this GPU


def test_gpm_metrics_on_hopper_class_gpus():
    hardware = reader(FakeGPU(UUID0, gpm=True))
    registry = scrape(hardware)
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
    registry = scrape(hardware)
    with caplog.at_level(logging.WARNING, logger="benchd.hardware"):
        for _ in range(2):  # every get_sample_value is a scrape
            assert gpu_value(registry, "benchd_gpu_power_watts") is None
            assert gpu_value(registry, "benchd_gpu_pcie_transmit_bytes_per_second") is None
            assert gpu_value(registry, "benchd_gpu_temperature_celsius") == 61
    assert sum("does not support power" in r.message for r in caplog.records) == 1


def test_no_nvml_means_no_gpu_gauges_and_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="benchd.hardware"):
        hardware = reader(FakeGPU(UUID0), init_error=NVMLError_LibraryNotFound("libnvidia-ml.so.1 not found"))
    assert not hardware.nvml.available and "NVML is not available" in caplog.text
    registry = scrape(hardware)
    assert not [f for f in registry.collect() if f.name.startswith("benchd_gpu")]
    assert registry.get_sample_value("benchd_host_cpu_utilization_ratio") is not None


def test_a_gpu_failing_mid_run_pauses_its_gauges(caplog):
    bad, good = FakeGPU(UUID0), FakeGPU(UUID1)
    hardware = reader(bad, good)
    assert len(hardware.read().gpus) == 2
    bad.lost = True
    with caplog.at_level(logging.WARNING, logger="benchd.hardware"):
        readings = [hardware.read() for _ in range(3)]
    assert all([g.uuid for g in r.gpus] == [UUID1] for r in readings)
    assert sum("failed to read" in r.message for r in caplog.records) == 1  # said once, not per read
    bad.lost = False
    assert len(hardware.read().gpus) == 2  # and it comes back


def test_host_gauges_from_real_psutil():
    registry = scrape(HardwareReader(NVMLReader(FakeNVML([])), HostReader()))
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
    assert 0.5 * rss < get("benchd_host_process_resident_memory_bytes") < 2 * rss
    assert 0 <= get("benchd_host_process_cpu_utilization_ratio") <= 1


def snapshot(t, energy_j, util=0.5, memory=1e9, power=300.0, throttle=False):
    reading = GPUReading("0", UUID0, "H100", {"utilization_ratio": util, "memory_used_bytes": memory,
                                              "power_watts": power, "energy_joules": energy_j})
    reading.throttle = {"sw_power_cap": throttle, "gpu_idle": False}
    return Snapshot(t, [reading], HostReading(cpu_ratio=0.25))


def test_energy_per_token_from_known_counters():
    # 100 J/s between t=0 and t=10; the window [2, 7] holds 500 J: 1000 output tokens → 0.5 J/token.
    samples = [snapshot(t, 1000.0 + 100.0 * t, util=u, memory=m, throttle=th)
               for t, u, m, th in ((0, 0.1, 1e9, False), (3, 0.8, 5e9, True), (6, 0.9, 4e9, False),
                                   (10, 0.2, 1e9, False))]
    s = summarize(samples, start=2.0, end=7.0, output_tokens=1000)
    assert s.energy_joules == pytest.approx(500.0)
    assert s.energy_per_output_token_joules == pytest.approx(0.5)
    assert s.samples == 2 and s.window_s == 5.0
    assert s.gpu_utilization_mean == pytest.approx(0.85) and s.gpu_utilization_max == 0.9
    assert s.gpu_memory_peak_bytes == 5e9
    assert s.throttled_fraction == 0.5 and s.power_mean_watts == 300.0
    assert s.cpu_utilization_mean == 0.25
    assert s.gpus[0].energy_joules == pytest.approx(500.0)


def test_run_summary_through_the_sampler(tiny):
    gpu = FakeGPU(UUID0)
    hardware = reader(gpu)
    sampler = HardwareSampler(hardware, interval_s=0.05)
    sampler.start()

    original = hardware.nvml.read

    def read_with_energy():  # the counter grows 200 J per read, as a busy GPU's would
        gpu.energy_mj += 200_000
        return original()

    hardware.nvml.read = read_with_energy
    try:
        outcome = run(make_spec(workload={"stop": {"requests": 8}}), loaded=tiny, hardware=sampler)
    finally:
        sampler.stop()
    hw = outcome.hardware
    assert hw is not None and hw.samples >= 1
    assert hw.gpus[0].uuid == UUID0 and hw.gpu_utilization_mean == pytest.approx(0.87)
    tokens = outcome.summaries()[0].output_tokens
    assert hw.energy_joules > 0
    assert hw.energy_per_output_token_joules == pytest.approx(hw.energy_joules / tokens)
    assert hw.throttled_fraction == 1.0  # the stand-in is power-capped throughout
    assert outcome.to_json()["hardware"]["energy_joules"] == hw.energy_joules


def test_a_gpu_failing_during_a_run_never_fails_it(tiny):
    gpu = FakeGPU(UUID0)
    hardware = reader(gpu)
    sampler = HardwareSampler(hardware, interval_s=0.01)
    sampler.start()
    original = hardware.nvml.read
    calls = {"n": 0}

    def failing():
        calls["n"] += 1
        gpu.lost = calls["n"] > 2
        return original()

    hardware.nvml.read = failing
    try:
        outcome = run(make_spec(workload={"stop": {"requests": 6}}), loaded=tiny, hardware=sampler)
    finally:
        sampler.stop()
    assert outcome.status == "succeeded" and outcome.hardware is not None


def test_nvidia_smi_readings_in_base_units():
    from benchd.hardware import parse_nvidia_smi

    text = ("0, GPU-aaaaaaaa-0000, 87, 41, 40960, 81559, 523.45, 700.00, 61, 1980, 2619, 123456789\n"
            "1, GPU-bbbbbbbb-1111, 0, 0, 0, 81559, [N/A], 700.00, 30, 345, 2619, [N/A]\n")
    first, second = parse_nvidia_smi(text)
    assert first["uuid"] == UUID0 and first["utilization.gpu"] == 0.87
    assert first["memory.used"] == 40960 * 2**20  # MiB → bytes
    assert first["clocks.sm"] == 1980e6 and first["total_energy_consumption"] == pytest.approx(123456.789)
    assert first["power.draw"] == 523.45
    assert "power.draw" not in second and "total_energy_consumption" not in second


def test_live_daemon_exports_gpu_gauges_and_stores_the_hardware_summary(tmp_path):
    from benchd.api import create_app
    from benchd.config import Settings
    from tests.helpers import LiveServer, spec, submit

    settings = Settings(database_url=f"sqlite:///{tmp_path}/benchd.db", device="cpu", default_schedule=False,
                        hardware_interval_s=0.05)
    app = create_app(settings, hardware_reader=lambda: reader(FakeGPU(UUID0)))
    with LiveServer(app) as server:
        run = server.wait_status(submit(server, spec(requests=12)), "succeeded", "failed")
        text = server.http.get("/metrics").text
    assert f'benchd_gpu_power_watts{{gpu="0",name="NVIDIA H100 80GB HBM3",uuid="{UUID0}"}} 523.456' in text
    assert "benchd_host_cpu_utilization_ratio" in text
    assert run["status"] == "succeeded"
    assert run["hardware"]["gpus"][0]["uuid"] == UUID0 and run["hardware"]["gpu_utilization_mean"] == pytest.approx(0.87)
