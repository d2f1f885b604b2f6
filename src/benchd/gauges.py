"""Hardware gauges for Prometheus, read at scrape time (a Collector builds fresh families each scrape)."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from benchd.hardware import HardwareReader, Snapshot

GPU_LABELS = ("gpu", "uuid", "name")

# Reading name → (metric name, help). Energy is a counter; the rest are gauges.
GPU_GAUGES = {
    "utilization_ratio": ("benchd_gpu_utilization_ratio", "Time a kernel was running, 0–1 (NVML)."),
    "memory_utilization_ratio": ("benchd_gpu_memory_utilization_ratio",
                                 "Time device memory was being read or written, 0–1."),
    "memory_used_bytes": ("benchd_gpu_memory_used_bytes", "Device memory in use."),
    "memory_free_bytes": ("benchd_gpu_memory_free_bytes", "Device memory free."),
    "memory_total_bytes": ("benchd_gpu_memory_total_bytes", "Device memory in all."),
    "power_watts": ("benchd_gpu_power_watts", "Power draw."),
    "power_limit_watts": ("benchd_gpu_power_limit_watts", "Enforced power limit."),
    "temperature_celsius": ("benchd_gpu_temperature_celsius", "GPU core temperature."),
    "sm_clock_hertz": ("benchd_gpu_sm_clock_hertz", "SM clock."),
    "memory_clock_hertz": ("benchd_gpu_memory_clock_hertz", "Memory clock."),
    "pcie_transmit_bytes_per_second": ("benchd_gpu_pcie_transmit_bytes_per_second", "PCIe TX throughput."),
    "pcie_receive_bytes_per_second": ("benchd_gpu_pcie_receive_bytes_per_second", "PCIe RX throughput."),
    "sm_activity_ratio": ("benchd_gpu_sm_activity_ratio", "SM activity between scrapes, 0–1 (GPM, Hopper+)."),
    "tensor_activity_ratio": ("benchd_gpu_tensor_activity_ratio",
                              "Tensor-core activity between scrapes, 0–1 (GPM, Hopper+)."),
    "dram_bandwidth_ratio": ("benchd_gpu_dram_bandwidth_utilization_ratio",
                             "DRAM bandwidth used between scrapes, 0–1 (GPM, Hopper+)."),
}


def families(snapshot: Snapshot) -> list[GaugeMetricFamily | CounterMetricFamily]:
    out: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}

    def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
        if name not in out:
            out[name] = GaugeMetricFamily(name, doc, labels=labels)
        return out[name]

    for reading in snapshot.gpus:
        labels = [reading.gpu, reading.uuid, reading.name]
        for key, value in reading.values.items():
            if key == "energy_joules":
                if "benchd_gpu_energy_joules" not in out:
                    out["benchd_gpu_energy_joules"] = CounterMetricFamily(
                        "benchd_gpu_energy_joules", "Energy consumed since the driver loaded.", labels=GPU_LABELS)
                out["benchd_gpu_energy_joules"].add_metric(labels, value)
            elif key in GPU_GAUGES:
                name, doc = GPU_GAUGES[key]
                gauge(name, doc, GPU_LABELS).add_metric(labels, value)
        for reason, active in reading.throttle.items():
            gauge("benchd_gpu_clock_throttle_reason", "1 while this clock event (throttle) reason is active.",
                  (*GPU_LABELS, "reason")).add_metric([*labels, reason], float(active))

    host = snapshot.host
    for name, doc, value in (
        ("benchd_host_cpu_utilization_ratio", "CPU busy across all cores, 0–1.", host.cpu_ratio),
        ("benchd_host_memory_used_bytes", "Host memory in use (total − available).", host.memory_used_bytes),
        ("benchd_host_memory_available_bytes", "Host memory available.", host.memory_available_bytes),
        ("benchd_host_memory_total_bytes", "Host memory in all.", host.memory_total_bytes),
        ("benchd_host_process_cpu_utilization_ratio", "benchd's own CPU time as a fraction of all cores.",
         host.process_cpu_ratio),
        ("benchd_host_process_resident_memory_bytes", "benchd's resident memory.", host.process_resident_bytes),
    ):
        if value is not None:
            gauge(name, doc).add_metric([], value)
    for core, ratio in enumerate(host.cpu_core_ratios):
        gauge("benchd_host_cpu_core_utilization_ratio", "CPU busy per core, 0–1.", ("core",)).add_metric(
            [str(core)], ratio)
    if host.load is not None:
        for period, value in zip(("1m", "5m", "15m"), host.load):
            gauge("benchd_host_load_average", "Run-queue load average.", ("period",)).add_metric([period], value)
    return list(out.values())


class HardwareCollector(Collector):
    def __init__(self, reader: HardwareReader) -> None:
        self.reader = reader

    def collect(self):
        return families(self.reader.read())
