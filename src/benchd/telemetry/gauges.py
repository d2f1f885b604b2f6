"""Hardware gauges for Prometheus, built at scrape time from the sampler's latest snapshot (no hardware call)."""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from benchd.hardware.readings import CLOCK_EVENT_OF, GPUInfo, GPUReading, MigInstance, Snapshot
from benchd.hardware.sampler import HardwareSampler
from benchd.hardware.speed import DeviceSpeed
from benchd.models.flops import PRECISIONS, peak_bandwidth, peak_tflops

GPU_LABELS = ("gpu", "uuid", "name")
# A MIG instance's series carry its parent's GPU_LABELS and these, DCGM exporter's names for the GPU instance id and
# profile; the compute instance id is benchd's, in the same style (DCGM exporter exports per GPU instance).
MIG_LABELS = ("GPU_I_ID", "GPU_I_PROFILE", "GPU_CI_ID")

# Reading name → (metric name, type, help). Counters are exported with the _total suffix.
GPU_SERIES = {
    "utilization_ratio": ("benchd_gpu_utilization_ratio", "gauge", "Time a kernel was running, 0–1 (NVML)."),
    "memory_utilization_ratio": ("benchd_gpu_memory_utilization_ratio", "gauge",
                                 "Time device memory was being read or written, 0–1."),
    "memory_used_bytes": ("benchd_gpu_memory_used_bytes", "gauge", "Device memory in use."),
    "memory_free_bytes": ("benchd_gpu_memory_free_bytes", "gauge", "Device memory free."),
    "memory_total_bytes": ("benchd_gpu_memory_total_bytes", "gauge", "Device memory in all."),
    "power_watts": ("benchd_gpu_power_watts", "gauge", "Power draw."),
    "power_limit_watts": ("benchd_gpu_power_limit_watts", "gauge", "Enforced power limit."),
    "energy_joules": ("benchd_gpu_energy_joules", "counter", "Energy consumed since the driver loaded."),
    "temperature_celsius": ("benchd_gpu_temperature_celsius", "gauge", "GPU core temperature."),
    "sm_clock_hertz": ("benchd_gpu_sm_clock_hertz", "gauge", "SM clock."),
    "sm_clock_max_hertz": ("benchd_gpu_max_sm_clock_hertz", "gauge",
                           "The SM clock's maximum (DCGM_FI_DEV_MAX_SM_CLOCK): the SM clock over it is the share "
                           "the GPU runs at."),
    "clocks_event_reasons": ("benchd_gpu_clocks_event_reasons", "gauge",
                             "The clock event reasons now, as NVML's bit mask (DCGM_FI_DEV_CLOCKS_EVENT_REASONS); "
                             "benchd_gpu_clock_event has one series a reason."),
    "memory_clock_hertz": ("benchd_gpu_memory_clock_hertz", "gauge", "Memory clock."),
    "pcie_transmit_bytes_per_second": ("benchd_gpu_pcie_transmit_bytes_per_second", "gauge",
                                       "PCIe TX throughput (NVML's 20 ms sample)."),
    "pcie_receive_bytes_per_second": ("benchd_gpu_pcie_receive_bytes_per_second", "gauge",
                                      "PCIe RX throughput (NVML's 20 ms sample)."),
    "sm_activity_ratio": ("benchd_gpu_sm_activity_ratio", "gauge", "SM activity between samples, 0–1 (GPM, Hopper+)."),
    "tensor_activity_ratio": ("benchd_gpu_tensor_activity_ratio", "gauge",
                              "Tensor-core activity between samples, 0–1 (GPM, Hopper+)."),
    "dram_bandwidth_ratio": ("benchd_gpu_dram_bandwidth_utilization_ratio", "gauge",
                             "DRAM bandwidth used between samples, 0–1 (GPM, Hopper+)."),
    "encoder_utilization_ratio": ("benchd_gpu_encoder_utilization_ratio", "gauge", "Video encoder busy, 0–1."),
    "decoder_utilization_ratio": ("benchd_gpu_decoder_utilization_ratio", "gauge", "Video decoder busy, 0–1."),
    "pcie_replays": ("benchd_gpu_pcie_replays", "counter",
                     "PCIe transfers retried (replayed) since the driver loaded; a growing count is a bad link."),
    "row_remap_pending": ("benchd_gpu_row_remap_pending", "gauge",
                          "1 while remapped memory rows wait for a GPU reset to take effect."),
    "row_remap_failure": ("benchd_gpu_row_remap_failure", "gauge",
                          "1 once a memory row could not be remapped: the GPU needs service."),
    "last_xid_code": ("benchd_gpu_last_xid_code", "gauge",
                      "The latest XID error's code since benchd started; 0: none."),
    "xid_events": ("benchd_gpu_xid_events", "counter",
                   "XID error events since benchd started, every code together: 0 from the start on a GPU whose XIDs "
                   "are watched, so a healthy GPU reads 0 and a first event is an increase."),
}
# Readings with a label of their own: reading name → (metric name, type, label, help).
GPU_LABELLED = {
    "ecc_volatile_errors": ("benchd_gpu_ecc_volatile_errors", "counter", "error_type",
                            "ECC errors since the driver loaded, by error type (correctable, uncorrectable)."),
    "ecc_aggregate_errors": ("benchd_gpu_ecc_aggregate_errors", "counter", "error_type",
                             "ECC errors over the GPU's life, by error type (correctable, uncorrectable)."),
    "remapped_rows": ("benchd_gpu_remapped_rows", "counter", "error_type",
                      "Memory rows remapped over the GPU's life, by the errors that caused it."),
    "nvlink_transmit_bytes": ("benchd_gpu_nvlink_transmit_bytes", "counter", "link",
                              "NVLink data sent, per link; its rate is the link's throughput."),
    "nvlink_receive_bytes": ("benchd_gpu_nvlink_receive_bytes", "counter", "link",
                             "NVLink data received, per link; its rate is the link's throughput."),
    "xid_errors": ("benchd_gpu_xid_errors", "counter", "xid",
                   "XID error events since benchd started, by code (past 1023: other)."),
    "clock_events": ("benchd_gpu_clock_events", "counter", "clock_event",
                     "Clock events since benchd started, by reason (DCGM_EXP_CLOCK_EVENTS_TOTAL's names: power_cap, "
                     "hw_slowdown, sw_thermal, hw_thermal, hw_power_brake, sync_boost, clocks_setting, gpu_idle, "
                     "display_clocks): a reason's onsets, read by the hardware sampler (0 from the start)."),
}


class _Families:
    """Families by name, created on first use; samples carry their own label sets (a MIG instance's has more)."""

    def __init__(self) -> None:
        self.by_name: dict[str, Metric] = {}

    def add(self, name: str, kind: str, doc: str, labels: dict[str, str], value: float) -> None:
        family = self.by_name.get(name)
        if family is None:
            family = self.by_name[name] = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(name, doc)
        family.add_sample(name + ("_total" if kind == "counter" else ""), labels, value)


def _labels(reading: GPUReading) -> dict[str, str]:
    labels = {"gpu": reading.gpu, "uuid": reading.uuid, "name": reading.name}
    if reading.mig is not None:
        labels.update(zip(MIG_LABELS, (str(reading.mig.gpu_instance_id), reading.mig.profile,
                                       str(reading.mig.compute_instance_id))))
    return labels


def families(snapshot: Snapshot) -> list[Metric]:
    out = _Families()
    for reading in snapshot.gpus:
        labels = _labels(reading)
        for key, value in reading.values.items():
            if key in GPU_SERIES:
                out.add(*GPU_SERIES[key], labels, value)
        for key, per_label in reading.labelled.items():
            if key in GPU_LABELLED:
                name, kind, label, doc = GPU_LABELLED[key]
                for label_value, value in per_label.items():
                    out.add(name, kind, doc, {**labels, label: label_value}, value)
        for reason, active in reading.throttle.items():
            out.add("benchd_gpu_clock_event", "gauge", "1 while this clock event reason is active (DCGM exporter's "
                    "clock_event names); its mean over time is the share of time under it.",
                    {**labels, "clock_event": CLOCK_EVENT_OF[reason]}, float(active))

    host = snapshot.host
    for name, doc, figure in (
        ("benchd_host_cpu_utilization_ratio", "CPU busy across all cores, 0–1.", host.cpu_ratio),
        ("benchd_host_memory_used_bytes", "Host memory in use (total − available).", host.memory_used_bytes),
        ("benchd_host_memory_available_bytes", "Host memory available.", host.memory_available_bytes),
        ("benchd_host_memory_total_bytes", "Host memory in all.", host.memory_total_bytes),
    ):
        if figure is not None:
            out.add(name, "gauge", doc, {}, figure)
    for core, ratio in enumerate(host.cpu_core_ratios):
        out.add("benchd_host_cpu_core_utilization_ratio", "gauge", "CPU busy per core, 0–1.", {"core": str(core)},
                ratio)
    if host.load is not None:
        for period, value in zip(("1m", "5m", "15m"), host.load):
            out.add("benchd_host_load_average", "gauge", "Run-queue load average.", {"period": period}, value)
    for process, own in host.processes.items():
        out.add("benchd_host_process_cpu_utilization_ratio", "gauge",
                "A benchd process's CPU time as a share of the cores it may use (its affinity), 0–1, over the last "
                "half second or more (process: daemon, worker…).", {"process": process}, own.cpu_ratio)
        for mode, seconds in (("user", own.cpu_user_s), ("system", own.cpu_system_s)):
            out.add("benchd_host_process_cpu_seconds", "counter",
                    "A benchd process's CPU time since it started, by mode (user, system), as "
                    "process_cpu_seconds_total counts it: its rate is the cores it keeps busy.",
                    {"process": process, "mode": mode}, seconds)
        out.add("benchd_host_process_cpu_cores", "gauge", "The cores a benchd process may run on (its affinity).",
                {"process": process}, own.cores)
        out.add("benchd_host_process_resident_memory_bytes", "gauge",
                "A benchd process's resident memory (process: daemon, worker…).", {"process": process},
                own.resident_bytes)
    return list(out.by_name.values())


def info_families(gpus: list[GPUInfo], migs: list[tuple[GPUInfo, MigInstance]]) -> list[Metric]:
    """What the GPUs are: driver, PCI bus id, MIG layout. Read once at start, so served even while stalled."""
    out: list[Metric] = []
    if gpus:
        info = InfoMetricFamily("benchd_gpu", "A GPU: its PCI bus id and driver (value 1).")
        for g in gpus:
            info.add_sample("benchd_gpu_info", {
                "gpu": g.gpu, "uuid": g.uuid, "name": g.name, "pci_bus_id": g.pci_bus_id,
                "driver_version": g.driver_version, "cuda_version": g.cuda_version}, 1.0)
        out.append(info)
    if migs:
        info = InfoMetricFamily("benchd_gpu_mig", "A MIG device: its GPU instance, profile and compute instance "
                                                  "(value 1).")
        for g, mig in migs:
            info.add_sample("benchd_gpu_mig_info", {
                "gpu": g.gpu, "uuid": g.uuid, "name": g.name, "mig_uuid": mig.uuid,
                **dict(zip(MIG_LABELS, (str(mig.gpu_instance_id), mig.profile, str(mig.compute_instance_id))))}, 1.0)
        out.append(info)
    return out


def limit_families(speeds: dict[str, DeviceSpeed]) -> list[Metric]:
    """Each device's limits as its worker measured them (benchd.hardware.speed), and the datasheet's beside them
    where the model is known (source: measured, datasheet); speeds by the gpu label of the device's series (NVML's
    index; "" for the CPU, as its runs' series carry). A GPU's under benchd_gpu_peak_*, the CPU's under
    benchd_cpu_peak_*: no CPU is a GPU's series."""
    families: dict[str, list[GaugeMetricFamily]] = {}
    for kind, what in (("gpu", "GPU"), ("cpu", "CPU")):
        families[kind] = [
            GaugeMetricFamily(f"benchd_{kind}_peak_memory_bandwidth_bytes_per_second",
                              f"The {what}'s memory bandwidth: bytes read and written per second by a copy larger "
                              "than its caches (measured), or its datasheet's.", labels=("gpu", "name", "source")),
            GaugeMetricFamily(f"benchd_{kind}_peak_flops_per_second",
                              f"The {what}'s dense matmul rate, FLOP/s, by dtype: a large GEMM's (measured), or its "
                              "datasheet's.", labels=("gpu", "name", "dtype", "source"))]
    for gpu, speed in sorted(speeds.items()):
        bandwidth, flops = families["cpu" if speed.device == "cpu" else "gpu"]
        bandwidth.add_metric((gpu, speed.name, "measured"), speed.copy_bytes_per_s)
        if (sheet := peak_bandwidth(speed.name)) is not None:
            bandwidth.add_metric((gpu, speed.name, "datasheet"), sheet)
        for dtype, rate in speed.matmul_flops_per_s.items():
            flops.add_metric((gpu, speed.name, dtype, "measured"), rate)
            if (tflops := peak_tflops(speed.name, PRECISIONS.get(dtype, dtype))) is not None:
                flops.add_metric((gpu, speed.name, dtype, "datasheet"), tflops * 1e12)
    return [family for pair in families.values() for family in pair if family.samples]


class LimitsCollector(Collector):
    """Serves the devices' measured limits, as the workers' hellos gave them (speeds: by gpu label, read at
    scrape)."""

    def __init__(self, speeds: Callable[[], dict[str, DeviceSpeed]]) -> None:
        self.speeds = speeds

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> list[Metric]:
        return limit_families(dict(self.speeds()))


class HardwareCollector(Collector):
    """Serves the sampler's latest snapshot with its age. Once the sampler is stalled, the snapshot's series are
    left out (a gap, not a flat line) and benchd_hardware_sampler_stalled says why."""

    def __init__(self, sampler: HardwareSampler) -> None:
        self.sampler = sampler
        nvml = sampler.reader.nvml
        by_index = {g.gpu: g for g in nvml.info}
        self._info = info_families(nvml.info, [(by_index[gpu], mig) for gpu, mig in nvml.migs if gpu in by_index])

    def describe(self) -> list[Metric]:
        return []  # families vary with the hardware; nothing to check against other collectors' names

    def collect(self) -> list[Metric]:
        now = time.perf_counter()
        snapshot, stalled = self.sampler.latest, self.sampler.stalled(now)
        state = [GaugeMetricFamily("benchd_hardware_sampler_stalled",
                                   "1 while no hardware read has completed for the stale threshold (a hung driver "
                                   "call): the hardware series are left out meanwhile.", value=float(stalled))]
        if snapshot is not None:
            state.append(GaugeMetricFamily("benchd_hardware_sample_age_seconds",
                                           "Time since the served hardware snapshot was read.", value=now - snapshot.t))
            state.append(GaugeMetricFamily("benchd_hardware_sample_duration_seconds",
                                           "How long the served snapshot's read took.", value=snapshot.duration_s))
        served = families(snapshot) if snapshot is not None and not stalled else []
        return [*state, *self._info, *served]
