"""An NVML stand-in with pynvml's names and units, for machines without a GPU (the GPU run checks the real one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's name
    pass


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
    pass


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801
    pass


@dataclass
class FakeGPU:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    util_percent: int = 87
    mem_util_percent: int = 41
    memory_used: int = 40 * 2**30  # bytes, as nvmlDeviceGetMemoryInfo gives them
    memory_total: int = 80 * 2**30
    power_mw: int = 523_456
    power_limit_mw: int = 700_000
    energy_mj: int = 1_000_000
    temperature_c: int = 61
    sm_mhz: int = 1980
    mem_mhz: int = 2619
    throttle_mask: int = 0x4  # sw_power_cap
    pcie_tx_kbs: int = 1000
    pcie_rx_kbs: int = 2000
    unsupported: set[str] = field(default_factory=set)  # function names that answer NotSupported
    lost: bool = False  # every call fails as a lost GPU would
    gpm: bool = False


class FakeNVML:
    """Module-shaped: the reader calls it exactly as it calls pynvml."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1
    NVML_GPM_METRICS_GET_VERSION = 1

    def __init__(self, gpus: list[FakeGPU], init_error: Exception | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.initialized = False
        self.gpm_values = {2: 55.0, 5: 33.0, 10: 22.0}
        self.memory_versions: list[int | None] = []

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        if self.init_error is not None:
            raise self.init_error
        self.initialized = True

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.initialized = False

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGPU:  # noqa: N802
        return self.gpus[index]

    def _check(self, gpu: FakeGPU, name: str) -> None:
        if gpu.lost:
            raise NVMLError_GpuIsLost("GPU is lost")
        if name in gpu.unsupported:
            raise NVMLError_NotSupported("Not Supported")

    def nvmlDeviceGetUUID(self, gpu: FakeGPU) -> str:  # noqa: N802
        return gpu.uuid

    def nvmlDeviceGetName(self, gpu: FakeGPU) -> bytes:  # noqa: N802 - old bindings return bytes
        return gpu.name.encode()

    def nvmlDeviceGetUtilizationRates(self, gpu):  # noqa: N802
        self._check(gpu, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=gpu.util_percent, memory=gpu.mem_util_percent)

    nvmlMemory_v2 = 33554472

    def nvmlDeviceGetMemoryInfo(self, gpu, version=None):  # noqa: N802
        self._check(gpu, "nvmlDeviceGetMemoryInfo")
        self.memory_versions.append(version)
        reserved = 0 if version else 512 * 2**20  # v1 counts the driver's reservation as used
        return SimpleNamespace(used=gpu.memory_used + reserved, free=gpu.memory_total - gpu.memory_used - reserved,
                               total=gpu.memory_total)

    def nvmlDeviceGetPowerUsage(self, gpu) -> int:  # noqa: N802
        self._check(gpu, "nvmlDeviceGetPowerUsage")
        return gpu.power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, gpu) -> int:  # noqa: N802
        self._check(gpu, "nvmlDeviceGetEnforcedPowerLimit")
        return gpu.power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu) -> int:  # noqa: N802
        self._check(gpu, "nvmlDeviceGetTotalEnergyConsumption")
        return gpu.energy_mj

    def nvmlDeviceGetTemperature(self, gpu, sensor) -> int:  # noqa: N802
        self._check(gpu, "nvmlDeviceGetTemperature")
        return gpu.temperature_c

    def nvmlDeviceGetClockInfo(self, gpu, clock) -> int:  # noqa: N802
        self._check(gpu, "nvmlDeviceGetClockInfo")
        return gpu.sm_mhz if clock == self.NVML_CLOCK_SM else gpu.mem_mhz

    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu) -> int:  # noqa: N802
        self._check(gpu, "nvmlDeviceGetCurrentClocksEventReasons")
        return gpu.throttle_mask

    def nvmlDeviceGetPcieThroughput(self, gpu, counter) -> int:  # noqa: N802
        self._check(gpu, "nvmlDeviceGetPcieThroughput")
        return gpu.pcie_tx_kbs if counter == self.NVML_PCIE_UTIL_TX_BYTES else gpu.pcie_rx_kbs

    # GPM (Hopper and newer)
    def nvmlGpmQueryDeviceSupport(self, gpu):  # noqa: N802
        return SimpleNamespace(isSupportedDevice=int(gpu.gpm))

    def nvmlGpmSampleAlloc(self):  # noqa: N802
        return SimpleNamespace()

    def nvmlGpmSampleGet(self, gpu, sample):  # noqa: N802
        self._check(gpu, "nvmlGpmSampleGet")
        return sample

    def nvmlGpmSampleFree(self, sample) -> None:  # noqa: N802
        pass

    def c_nvmlGpmMetricsGet_t(self):  # noqa: N802
        return SimpleNamespace(metrics=[SimpleNamespace(metricId=0, value=0.0, nvmlReturn=0) for _ in range(8)])

    def nvmlGpmMetricsGet(self, request):  # noqa: N802
        for metric in request.metrics[:request.numMetrics]:
            metric.value = self.gpm_values[metric.metricId]
        return request
