"""The sampler: one thread for scrapes and runs, scrapes that never wait on the hardware (a hung or slow NVML stand-in),
bounded waits at a run's two ends, exact energy from bracketing reads, and run summaries."""

import socket
import threading
import time

import pytest
from prometheus_client import CollectorRegistry

from benchd.daemon.inprocess import run_local as run
from benchd.hardware.readings import GPUReading, HostReading, MigInstance, Snapshot
from benchd.hardware.sampler import HardwareSampler, summarize
from benchd.telemetry.gauges import HardwareCollector
from tests.fake_nvml import FakeGPU, FakeNVML
from tests.hardware.helpers import H100, UUID0, reader, sampling
from tests.helpers import make_spec, wait_for


def snapshot(t, energy_j, util=0.5, memory=1e9, power=300.0, throttle=False, energy_t=None):
    reading = GPUReading("0", UUID0, "H100", {"utilization_ratio": util, "memory_used_bytes": memory,
                                              "power_watts": power, "energy_joules": energy_j}, t=energy_t)
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


def test_energy_is_placed_at_its_own_read_and_only_given_when_bracketed():
    # Each counter was read 0.5 s after its snapshot began (a slow GPU before it): 100 J/s from t=0.5 on.
    samples = [snapshot(t, 1000.0 + 100.0 * t, energy_t=t + 0.5) for t in (0, 4, 8)]
    assert summarize(samples, 1.0, 7.0, 10).energy_joules == pytest.approx(100.0 * 6)
    # A window the counters do not bracket (a missed read at an end) has no energy, rather than a smaller one.
    assert summarize(samples, 1.0, 9.0, 10).energy_joules is None
    assert summarize(samples, 0.2, 7.0, 10).energy_per_output_token_joules is None


def test_mig_readings_stay_out_of_the_run_summary():
    whole = snapshot(1.0, 1000.0, util=0.6, memory=30e9)
    mig = GPUReading("0", UUID0, "H100", {"memory_used_bytes": 70e9}, mig=MigInstance(1, 0, "3g.40gb", "MIG-1"))
    whole.gpus.append(mig)
    s = summarize([snapshot(0.0, 900.0), whole, snapshot(2.0, 1100.0)], 0.5, 1.5, 100)
    assert len(s.gpus) == 1 and s.gpu_memory_peak_bytes == 30e9 and s.energy_joules == pytest.approx(100.0)


def test_a_scrape_never_waits_on_a_hung_read_and_runs_wait_a_bounded_time():
    nvml = FakeNVML([FakeGPU(UUID0)])
    with sampling(reader(nvml=nvml), interval_s=0.05, stale_after_s=0.5, wait_s=1.0) as sampler:
        registry = CollectorRegistry()
        registry.register(HardwareCollector(sampler))
        power = {"gpu": "0", "uuid": UUID0, "name": H100}
        assert registry.get_sample_value("benchd_gpu_power_watts", power) == pytest.approx(523.456)
        nvml.gate.clear()  # every NVML call hangs from here on
        try:
            calls = len(nvml.calls)
            wait_for(lambda: len(nvml.calls) > calls, 10, "an NVML call to hang")
            scraped = []
            scrape = threading.Thread(target=lambda: scraped.append(
                registry.get_sample_value("benchd_gpu_power_watts", power)))
            scrape.start()
            scrape.join(10)
            assert not scrape.is_alive() and scraped == [pytest.approx(523.456)]  # the latest snapshot, at once
            # A run begins while the read hangs: it waits wait_s at most, then goes on.
            started = time.perf_counter()
            recording = sampler.begin()
            assert time.perf_counter() - started < 5
            wait_for(lambda: registry.get_sample_value("benchd_hardware_sampler_stalled") == 1, 10, "stalled")
            assert registry.get_sample_value("benchd_hardware_sample_age_seconds") > 0.5
            # Stalled: the hardware series leave /metrics (a gap, not a flat line); the info series stay.
            names = {f.name for f in registry.collect()}
            assert "benchd_gpu_power_watts" not in names and "benchd_host_cpu_utilization_ratio" not in names
            assert "benchd_gpu" in names  # benchd_gpu_info
            # Stalled, a run's end does not wait at all; no read bracketed the window's end, so no energy.
            started = time.perf_counter()
            summary = recording.end(time.perf_counter() - 0.1, time.perf_counter(), 10)
            assert time.perf_counter() - started < 0.5  # well under wait_s: it did not wait (room for a loaded CI)
            assert summary.energy_joules is None and summary.gpus[0].power_mean_watts == pytest.approx(523.456)
        finally:
            nvml.gate.set()
        wait_for(lambda: registry.get_sample_value("benchd_hardware_sampler_stalled") == 0, 10, "the recovery")
        assert registry.get_sample_value("benchd_gpu_power_watts", power) == pytest.approx(523.456)


def test_no_nvml_call_in_the_scrape_path_even_with_slow_pcie_reads():
    # On an H100 each PCIe throughput read blocks ~20 ms: here 0.2 s, so a read takes at least 0.4 s.
    nvml = FakeNVML([FakeGPU(UUID0, delays={"nvmlDeviceGetPcieThroughput": 0.2})])
    with sampling(reader(nvml=nvml), interval_s=3600) as sampler:  # after the first read, none until the end
        registry = CollectorRegistry()
        registry.register(HardwareCollector(sampler))
        calls = len(nvml.calls)
        for _ in range(20):
            families = list(registry.collect())
        assert len(nvml.calls) == calls  # twenty scrapes, not one NVML call
        assert any(f.name == "benchd_gpu_pcie_transmit_bytes_per_second" for f in families)
        assert registry.get_sample_value("benchd_hardware_sample_duration_seconds") >= 0.4


class LinearEnergy(FakeNVML):
    """A GPU drawing exactly 250 W: its energy counter is a function of the time it is read at."""

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu) -> int:
        return int(1e9 + 250_000 * time.perf_counter())


def test_a_run_gets_fresh_reads_at_both_ends_whatever_the_interval():
    with sampling(reader(nvml=LinearEnergy([FakeGPU(UUID0)])), interval_s=3600) as sampler:  # no periodic read
        recording = sampler.begin()
        window_start = time.perf_counter()
        time.sleep(0.2)
        window_end = time.perf_counter()
        summary = recording.end(window_start, window_end, 10)
    # Without the reads at begin() and end() no counter would bracket the window, and there would be no figure.
    assert summary.energy_joules == pytest.approx(250.0 * (window_end - window_start), rel=0.01)


def test_run_summary_through_the_sampler(tiny):
    gpu = FakeGPU(UUID0)
    hardware = reader(gpu)
    original = hardware.nvml.read

    def read_with_energy():  # the counter grows 200 J per read, as a busy GPU's would
        gpu.energy_mj += 200_000
        return original()

    hardware.nvml.read = read_with_energy
    with sampling(hardware, interval_s=0.05) as sampler:
        outcome = run(make_spec(workload={"stop": {"requests": 8}}), loaded=tiny, hardware=sampler)
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
    original = hardware.nvml.read
    calls = {"n": 0}

    def failing():
        calls["n"] += 1
        gpu.lost = calls["n"] > 2
        return original()

    hardware.nvml.read = failing
    with sampling(hardware, interval_s=0.01) as sampler:
        outcome = run(make_spec(workload={"stop": {"requests": 6}}), loaded=tiny, hardware=sampler)
    assert outcome.status == "succeeded" and outcome.hardware is not None


def test_a_stale_threshold_within_one_interval_is_refused_naming_both_settings():
    from pydantic import ValidationError

    from benchd.daemon.settings import Settings

    with pytest.raises(ValidationError, match="hardware_stale_after_s .* must be longer than hardware_interval_s"):
        Settings(hardware_interval_s=2.0, hardware_stale_after_s=1.5)
    assert Settings(hardware_interval_s=2.0).hardware_stale_after_s is None  # max(5 s, 3 intervals)
    assert HardwareSampler(reader(), interval_s=2.0).stale_after_s == 6.0
    assert Settings(node_name="").node_name == socket.gethostname()  # BENCHD_NODE_NAME= means the host's name


def test_a_run_whose_gpu_waited_on_the_host_says_the_host_bounds_it():
    """static generate() ran kernels 17 % of an H100's time (docs/benchmarks/roofline.md): under half, the hardware
    line says the host bounds the run; a busy GPU, or none, gets no such words."""
    from benchd.hardware.sampler import GPUSummary, HardwareSummary
    from benchd.report.tables import hardware_line

    gpu = GPUSummary(gpu="0", uuid="GPU-0", name="H100")
    idle = HardwareSummary(samples=10, window_s=10.0, gpu_utilization_mean=0.17, gpus=[gpu])
    assert ("the GPU ran kernels 17% of the time: the host (Python, kernel launches) bounds this run"
            in hardware_line(idle))
    busy = idle.model_copy(update={"gpu_utilization_mean": 0.81})
    assert "bounds this run" not in hardware_line(busy)
    assert "bounds this run" not in hardware_line(HardwareSummary(samples=10, window_s=10.0, cpu_utilization_mean=0.1))
