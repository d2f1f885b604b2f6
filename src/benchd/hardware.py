"""What the hardware is doing: GPUs through NVML, the host through psutil. Reading never raises: a missing
library, an unsupported field or a failing GPU means fewer values and one logged warning."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

log = logging.getLogger("benchd.hardware")

# Clock event (throttle) reasons, by NVML's bit masks.
THROTTLE_REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
# The reasons that mean the GPU runs slower than it could for the work it has (idle and settings do not).
SLOWING_REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                   "hw_power_brake_slowdown")

# NVML's GPM metric ids (Hopper and newer: NVML_GPM_METRIC_SM_UTIL, _ANY_TENSOR_UTIL, _DRAM_BW_UTIL), in
# percent over the interval between two samples.
GPM_METRICS = {"sm_activity_ratio": 2, "tensor_activity_ratio": 5, "dram_bandwidth_ratio": 10}


@dataclass(slots=True)
class GPUReading:
    gpu: str  # NVML index, as nvidia-smi and DCGM number GPUs
    uuid: str
    name: str
    values: dict[str, float] = field(default_factory=dict)  # name → value in base units (see GPU_FIELDS)
    throttle: dict[str, bool] = field(default_factory=dict)

    @property
    def throttled(self) -> bool:
        return any(self.throttle.get(reason, False) for reason in SLOWING_REASONS)


@dataclass(slots=True)
class HostReading:
    cpu_ratio: float | None = None
    cpu_core_ratios: list[float] = field(default_factory=list)
    load: tuple[float, float, float] | None = None
    memory_used_bytes: float | None = None
    memory_available_bytes: float | None = None
    memory_total_bytes: float | None = None
    process_cpu_ratio: float | None = None  # benchd's own CPU time as a fraction of the whole machine
    process_resident_bytes: float | None = None


@dataclass(slots=True)
class Snapshot:
    t: float  # perf_counter()
    gpus: list[GPUReading]
    host: HostReading


def visible_devices(value: str | None) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as a list of indices or UUID prefixes; None when unset (all visible)."""
    if value is None:
        return None
    items = [item.strip() for item in value.split(",") if item.strip()]
    visible = []
    for item in items:
        if item.startswith("-") or (item.isdigit() is False and not item.upper().startswith(("GPU-", "MIG-"))):
            break  # CUDA stops at the first invalid entry
        visible.append(item)
    return visible


class _Device:
    __slots__ = ("handle", "index", "uuid", "name", "unsupported", "gpm_sample", "failing")

    def __init__(self, handle: Any, index: int, uuid: str, name: str) -> None:
        self.handle, self.index, self.uuid, self.name = handle, index, uuid, name
        self.unsupported: set[str] = set()
        self.gpm_sample: Any = None  # the previous GPM sample; None where GPM does not work
        self.failing = False


class NVMLReader:
    """Every visible GPU through an NVML module: pynvml in production, a stand-in in tests."""

    def __init__(self, nvml: ModuleType | Any | None = None, cuda_visible_devices: str | None = None) -> None:
        self._nvml = nvml
        self._visible = visible_devices(cuda_visible_devices)
        self._devices: list[_Device] = []
        self._readers: dict[str, Callable[[Any], dict[str, float]]] = {}  # built once NVML is loaded
        self._lock = threading.Lock()
        self.available = False

    def start(self) -> None:
        nvml = self._nvml
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError:
                log.warning("nvidia-ml-py is not installed: no GPU gauges")
                return
            self._nvml = nvml
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as error:
            log.warning("NVML is not available (%s): no GPU gauges", error)
            return
        devices = []
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid, name = _text(nvml.nvmlDeviceGetUUID(handle)), _text(nvml.nvmlDeviceGetName(handle))
            except nvml.NVMLError as error:
                log.warning("GPU %d cannot be read (%s): left out", index, error)
                continue
            devices.append(_Device(handle, index, uuid, name))
        if self._visible is not None:
            devices = [d for d in devices if any(_matches(d, v) for v in self._visible)]
        for device in devices:
            self._start_gpm(device)
        self._readers = self._fields()
        self._devices = devices
        self.available = True

    def _start_gpm(self, device: _Device) -> None:
        nvml = self._nvml
        try:
            if not nvml.nvmlGpmQueryDeviceSupport(device.handle).isSupportedDevice:
                return
            device.gpm_sample = nvml.nvmlGpmSampleGet(device.handle, nvml.nvmlGpmSampleAlloc())
        except (nvml.NVMLError, AttributeError) as error:  # older drivers or bindings: no GPM
            log.info("GPU %d: no GPM metrics (%s)", device.index, error)

    def close(self) -> None:
        if self.available:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
            self.available = False

    @property
    def devices(self) -> list[tuple[str, str, str]]:
        return [(str(d.index), d.uuid, d.name) for d in self._devices]

    def read(self) -> list[GPUReading]:
        with self._lock:
            return [reading for d in self._devices if (reading := self._read(d)) is not None]

    def _read(self, device: _Device) -> GPUReading | None:
        nvml = self._nvml
        reading = GPUReading(str(device.index), device.uuid, device.name)
        values = reading.values
        for name, read in self._readers.items():
            if name in device.unsupported:
                continue
            try:
                values.update(read(device.handle))
            except nvml.NVMLError as error:
                if isinstance(error, nvml.NVMLError_NotSupported):
                    device.unsupported.add(name)
                    log.warning("GPU %d does not support %s: that gauge is left out", device.index, name)
                    continue
                # Anything else: the GPU is failing. Keep serving; say so once until it recovers.
                if not device.failing:
                    log.warning("GPU %d failed to read %s (%s): its gauges pause", device.index, name, error)
                device.failing = True
                return None
        device.failing = False
        reasons = values.pop("_throttle_mask", None)
        if reasons is not None:
            reading.throttle = {name: bool(int(reasons) & bit) for name, bit in THROTTLE_REASONS.items()}
        if device.gpm_sample is not None:
            values.update(self._gpm(device))
        return reading

    def _fields(self) -> dict[str, Callable[[Any], dict[str, float]]]:
        nvml = self._nvml

        def utilization(h):
            u = nvml.nvmlDeviceGetUtilizationRates(h)  # percent
            return {"utilization_ratio": u.gpu / 100, "memory_utilization_ratio": u.memory / 100}

        def memory(h):
            # v2 counts the driver's reservation apart from "used", as nvidia-smi does (v1 folds ~0.5 GiB of it
            # into "used" on an H100); v1 where the driver or bindings lack v2.
            version = getattr(nvml, "nvmlMemory_v2", None)
            m = nvml.nvmlDeviceGetMemoryInfo(h, version=version) if version else nvml.nvmlDeviceGetMemoryInfo(h)
            return {"memory_used_bytes": float(m.used), "memory_free_bytes": float(m.free),  # bytes
                    "memory_total_bytes": float(m.total)}

        def throttle(h):
            get = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                nvml.nvmlDeviceGetCurrentClocksThrottleReasons
            return {"_throttle_mask": float(get(h))}

        def pcie(h):  # KB/s
            return {"pcie_transmit_bytes_per_second": nvml.nvmlDeviceGetPcieThroughput(h, nvml.NVML_PCIE_UTIL_TX_BYTES) * 1024.0,
                    "pcie_receive_bytes_per_second": nvml.nvmlDeviceGetPcieThroughput(h, nvml.NVML_PCIE_UTIL_RX_BYTES) * 1024.0}

        return {
            "utilization": utilization,
            "memory": memory,
            "power": lambda h: {"power_watts": nvml.nvmlDeviceGetPowerUsage(h) / 1000.0},  # mW
            "power_limit": lambda h: {"power_limit_watts": nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0},
            "energy": lambda h: {"energy_joules": nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0},  # mJ
            "temperature": lambda h: {"temperature_celsius": float(
                nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU))},
            "clocks": lambda h: {  # MHz
                "sm_clock_hertz": nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM) * 1e6,
                "memory_clock_hertz": nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM) * 1e6},
            "throttle": throttle,
            "pcie": pcie,
        }

    def _gpm(self, device: _Device) -> dict[str, float]:
        """GPM metrics over the interval since this device's previous sample."""
        nvml = self._nvml
        try:
            sample = nvml.nvmlGpmSampleGet(device.handle, nvml.nvmlGpmSampleAlloc())
            request = nvml.c_nvmlGpmMetricsGet_t()
            request.version = nvml.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(GPM_METRICS)
            request.sample1, request.sample2 = device.gpm_sample, sample
            for i, metric_id in enumerate(GPM_METRICS.values()):
                request.metrics[i].metricId = metric_id
            nvml.nvmlGpmMetricsGet(request)
        except nvml.NVMLError as error:
            log.warning("GPU %d: GPM metrics stop (%s)", device.index, error)
            device.gpm_sample = None
            return {}
        previous, device.gpm_sample = device.gpm_sample, sample
        nvml.nvmlGpmSampleFree(previous)
        return {name: request.metrics[i].value / 100 for i, name in enumerate(GPM_METRICS)
                if request.metrics[i].nvmlReturn == 0}


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _matches(device: _Device, visible: str) -> bool:
    return str(device.index) == visible if visible.isdigit() else device.uuid.upper().startswith(visible.upper())


class HostReader:
    """The host and benchd's own process through psutil; CPU figures cover the time since the previous read."""

    def __init__(self, psutil_module: ModuleType | None = None, pid: int | None = None) -> None:
        if psutil_module is None:
            import psutil as psutil_module
        self._psutil = psutil_module
        self._process = psutil_module.Process(pid if pid is not None else os.getpid())
        self._cpus = psutil_module.cpu_count() or 1
        psutil_module.cpu_percent(percpu=True)  # the first call only starts the interval
        self._process.cpu_percent()

    def read(self) -> HostReading:
        ps = self._psutil
        cores = ps.cpu_percent(percpu=True)
        memory = ps.virtual_memory()
        return HostReading(
            cpu_ratio=sum(cores) / len(cores) / 100 if cores else None,
            cpu_core_ratios=[c / 100 for c in cores],
            load=tuple(ps.getloadavg()),
            memory_used_bytes=float(memory.total - memory.available),
            memory_available_bytes=float(memory.available),
            memory_total_bytes=float(memory.total),
            process_cpu_ratio=self._process.cpu_percent() / 100 / self._cpus,
            process_resident_bytes=float(self._process.memory_info().rss),
        )


class HardwareReader:
    """One reader for both paths: the scrape-time collector and the sampler each own an instance."""

    def __init__(self, nvml: NVMLReader, host: HostReader) -> None:
        self.nvml, self.host = nvml, host

    @classmethod
    def default(cls) -> HardwareReader:
        nvml = NVMLReader(cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
        nvml.start()
        return cls(nvml, HostReader())

    def read(self) -> Snapshot:
        return Snapshot(time.perf_counter(), self.nvml.read(), self.host.read())


NVIDIA_SMI_FIELDS = ("index", "uuid", "utilization.gpu", "utilization.memory", "memory.used", "memory.total",
                     "power.draw", "enforced.power.limit", "temperature.gpu", "clocks.sm", "clocks.mem",
                     "total_energy_consumption")


def parse_nvidia_smi(text: str) -> list[dict[str, float | str]]:
    """`nvidia-smi --query-gpu=<NVIDIA_SMI_FIELDS> --format=csv,noheader,nounits` in benchd's base units:
    % → 0–1, MiB → bytes, MHz → Hz, mJ → J (watts and °C stay). The GPU check compares the gauges with it."""
    scale = {"utilization.gpu": 0.01, "utilization.memory": 0.01, "memory.used": 2**20, "memory.total": 2**20,
             "clocks.sm": 1e6, "clocks.mem": 1e6, "total_energy_consumption": 1e-3}
    rows = []
    for line in text.strip().splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        row: dict[str, float | str] = {"index": cells[0], "uuid": cells[1]}
        for name, cell in zip(NVIDIA_SMI_FIELDS[2:], cells[2:]):
            if cell not in ("[N/A]", "[Not Supported]", "N/A"):
                row[name] = float(cell) * scale.get(name, 1.0)
        rows.append(row)
    return rows
