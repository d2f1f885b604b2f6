"""An NVML stand-in with pynvml's names, signatures and units, for machines without a GPU (the GPU run checks the
real one): device queries, health counters, the event API, field values and MIG device handles."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

NO_INSTANCE = 0xFFFFFFFF  # an event's gpuInstanceId/computeInstanceId when it is not a MIG instance's


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_GpuIsLost(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_Timeout(NVMLError):
    pass


class NVMLError_NotFound(NVMLError):
    pass


class NVMLError_InvalidArgument(NVMLError):
    pass


class NVMLError_FunctionNotFound(NVMLError):
    pass


class NVMLError_NoPermission(NVMLError):
    pass


@dataclass
class FakeMig:
    """A MIG device handle: it answers for its identity and memory; other queries are NotSupported, as on a GPU."""

    gpu_instance_id: int
    compute_instance_id: int
    profile: str = "1g.10gb"
    uuid: str = "MIG-00000000-0000-0000-0000-000000000000"
    memory_used: int = 2 * 2**30
    memory_total: int = 10 * 2**30
    parent: FakeGPU | None = field(default=None, repr=False, compare=False)  # set by the GPU that holds it


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
    sm_max_mhz: int = 1980  # nvmlDeviceGetMaxClockInfo's (an H100 SXM's boost maximum)
    throttle_mask: int = 0x4  # sw_power_cap
    pcie_tx_kbs: int = 1000
    pcie_rx_kbs: int = 2000
    bus_id: str = "00000000:17:00.0"
    encoder_percent: int = 3
    decoder_percent: int = 5
    pcie_replays: int = 7
    ecc_enabled: bool = True
    # (error type: 0 corrected, 1 uncorrected; counter: 0 volatile, 1 aggregate) → count
    ecc: dict[tuple[int, int], int] = field(default_factory=lambda: {(0, 0): 2, (1, 0): 0, (0, 1): 12, (1, 1): 1})
    remapped_rows: tuple[int, int, int, int] = (3, 1, 0, 0)  # correctable, uncorrectable, pending, failure
    nvlink_kib: dict[int, tuple[int, int]] = field(default_factory=dict)  # active link → (TX, RX) KiB so far
    mig: list[FakeMig] = field(default_factory=list)  # MIG devices; MIG mode is on when there are any
    event_types: int = 0x8 | 0x1 | 0x2  # what nvmlDeviceGetSupportedEventTypes reports (XID, ECC)
    unsupported: set[str] = field(default_factory=set)  # function names that answer NotSupported
    errors: dict[str, type[NVMLError]] = field(default_factory=dict)  # function name → the error it raises
    lost: bool = False  # every call fails as a lost GPU would
    gpm: bool = False
    delays: dict[str, float] = field(default_factory=dict)  # function name → seconds each call blocks

    def __post_init__(self) -> None:
        for mig in self.mig:
            mig.parent = self


class FakeNVML:
    """Module-shaped: the reader calls it exactly as it calls pynvml. gate: while cleared, every device call blocks
    until it is set again (a hung driver)."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_Timeout = NVMLError_Timeout
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_NoPermission = NVMLError_NoPermission
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1
    NVML_NVLINK_MAX_LINKS = 18
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 138, 139
    nvmlEventTypeXidCriticalError = 0x8
    nvmlMemory_v2 = 33554472

    def __init__(self, gpus: list[FakeGPU], init_error: Exception | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.initialized = False
        self.gpm_values = {2: 55.0, 5: 33.0, 10: 22.0}
        self.memory_versions: list[int | None] = []
        self.driver_version = "570.133.20"
        self.cuda_version = 12080
        self.gate = threading.Event()
        self.gate.set()
        self.calls: list[str] = []
        self._event_sets: list[_EventSet] = []

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.cuda_version

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGPU:
        return self.gpus[index]

    def _check(self, gpu: FakeGPU | FakeMig, name: str) -> FakeGPU:
        self.calls.append(name)
        self.gate.wait()
        if isinstance(gpu, FakeMig):
            raise NVMLError_NotSupported("Not Supported")  # a MIG device answers only what it overrides below
        if gpu.lost:
            raise NVMLError_GpuIsLost("GPU is lost")
        if name in gpu.unsupported:
            raise NVMLError_NotSupported("Not Supported")
        if name in gpu.errors:
            raise gpu.errors[name](name)
        if name in gpu.delays:
            time.sleep(gpu.delays[name])
        return gpu

    def nvmlDeviceGetUUID(self, gpu) -> str:
        return gpu.uuid

    def nvmlDeviceGetName(self, gpu) -> bytes:
        if isinstance(gpu, FakeMig):
            return f"{gpu.parent.name} MIG {gpu.profile}".encode()
        return gpu.name.encode()

    def nvmlDeviceGetPciInfo(self, gpu):
        self._check(gpu, "nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=gpu.bus_id.encode(), busIdLegacy=gpu.bus_id[4:].encode())

    def nvmlDeviceGetUtilizationRates(self, gpu):
        self._check(gpu, "nvmlDeviceGetUtilizationRates")
        if gpu.mig:
            raise NVMLError_NotSupported("Not Supported")  # in MIG mode the whole GPU's utilization is N/A
        return SimpleNamespace(gpu=gpu.util_percent, memory=gpu.mem_util_percent)

    def nvmlDeviceGetMemoryInfo(self, gpu, version=None):
        if isinstance(gpu, FakeMig):
            self.gate.wait()
            return SimpleNamespace(used=gpu.memory_used, free=gpu.memory_total - gpu.memory_used,
                                   total=gpu.memory_total)
        self._check(gpu, "nvmlDeviceGetMemoryInfo")
        self.memory_versions.append(version)
        reserved = 512 * 2**20  # the driver's: v2 reports it apart, v1 counts it as used
        free = gpu.memory_total - gpu.memory_used - reserved
        if version:
            return SimpleNamespace(version=version, total=gpu.memory_total, reserved=reserved, free=free,
                                   used=gpu.memory_used)
        return SimpleNamespace(total=gpu.memory_total, free=free, used=gpu.memory_used + reserved)

    def nvmlDeviceGetPowerUsage(self, gpu) -> int:
        return self._check(gpu, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, gpu) -> int:
        return self._check(gpu, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu) -> int:
        return self._check(gpu, "nvmlDeviceGetTotalEnergyConsumption").energy_mj

    def nvmlDeviceGetTemperature(self, gpu, sensor) -> int:
        return self._check(gpu, "nvmlDeviceGetTemperature").temperature_c

    def nvmlDeviceGetClockInfo(self, gpu, clock) -> int:
        self._check(gpu, "nvmlDeviceGetClockInfo")
        return gpu.sm_mhz if clock == self.NVML_CLOCK_SM else gpu.mem_mhz

    def nvmlDeviceGetMaxClockInfo(self, gpu, clock) -> int:
        self._check(gpu, "nvmlDeviceGetMaxClockInfo")
        return gpu.sm_max_mhz if clock == self.NVML_CLOCK_SM else gpu.mem_mhz

    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu) -> int:
        return self._check(gpu, "nvmlDeviceGetCurrentClocksEventReasons").throttle_mask

    def nvmlDeviceGetPcieThroughput(self, gpu, counter) -> int:
        self._check(gpu, "nvmlDeviceGetPcieThroughput")
        return gpu.pcie_tx_kbs if counter == self.NVML_PCIE_UTIL_TX_BYTES else gpu.pcie_rx_kbs

    def nvmlDeviceGetEncoderUtilization(self, gpu) -> list[int]:
        return [self._check(gpu, "nvmlDeviceGetEncoderUtilization").encoder_percent, 167_000]

    def nvmlDeviceGetDecoderUtilization(self, gpu) -> list[int]:
        return [self._check(gpu, "nvmlDeviceGetDecoderUtilization").decoder_percent, 167_000]

    def nvmlDeviceGetPcieReplayCounter(self, gpu) -> int:
        return self._check(gpu, "nvmlDeviceGetPcieReplayCounter").pcie_replays

    def nvmlDeviceGetEccMode(self, gpu) -> list[int]:
        mode = int(self._check(gpu, "nvmlDeviceGetEccMode").ecc_enabled)
        return [mode, mode]

    def nvmlDeviceGetTotalEccErrors(self, gpu, error_type, counter_type) -> int:
        return self._check(gpu, "nvmlDeviceGetTotalEccErrors").ecc[(error_type, counter_type)]

    def nvmlDeviceGetRemappedRows(self, gpu) -> tuple[int, int, int, int]:
        return self._check(gpu, "nvmlDeviceGetRemappedRows").remapped_rows

    def nvmlDeviceGetNvLinkState(self, gpu, link) -> int:
        self._check(gpu, "nvmlDeviceGetNvLinkState")
        if not gpu.nvlink_kib:
            raise NVMLError_NotSupported("Not Supported")  # a GPU without NVLink
        if link >= self.NVML_NVLINK_MAX_LINKS:
            raise NVMLError_InvalidArgument("Invalid Argument")
        return int(link in gpu.nvlink_kib)

    def nvmlDeviceGetFieldValues(self, gpu, field_ids):
        self._check(gpu, "nvmlDeviceGetFieldValues")
        values = []
        for field_id, scope in (f if isinstance(f, tuple) else (f, 0) for f in field_ids):
            counts = gpu.nvlink_kib.get(scope)
            known = field_id in (self.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, self.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
            kib = 0 if counts is None else counts[field_id == self.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX]
            values.append(SimpleNamespace(fieldId=field_id, scopeId=scope, timestamp=0, latencyUsec=0, valueType=4,
                                          nvmlReturn=0 if known and counts is not None else 3,  # 3: NOT_SUPPORTED
                                          value=SimpleNamespace(ullVal=kib)))
        return values

    # MIG
    def nvmlDeviceGetMigMode(self, gpu) -> list[int]:
        self._check(gpu, "nvmlDeviceGetMigMode")
        return [int(bool(gpu.mig))] * 2

    def nvmlDeviceGetMaxMigDeviceCount(self, gpu) -> int:
        return 7 if self._check(gpu, "nvmlDeviceGetMaxMigDeviceCount").mig else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, gpu, index) -> FakeMig:
        self._check(gpu, "nvmlDeviceGetMigDeviceHandleByIndex")
        if index >= len(gpu.mig):
            raise NVMLError_NotFound("Not Found")
        return gpu.mig[index]

    def nvmlDeviceGetGpuInstanceId(self, mig: FakeMig) -> int:
        if not isinstance(mig, FakeMig):
            raise NVMLError_InvalidArgument("Invalid Argument")
        return mig.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, mig: FakeMig) -> int:
        if not isinstance(mig, FakeMig):
            raise NVMLError_InvalidArgument("Invalid Argument")
        return mig.compute_instance_id

    # Events
    def nvmlDeviceGetSupportedEventTypes(self, gpu) -> int:
        return self._check(gpu, "nvmlDeviceGetSupportedEventTypes").event_types

    def nvmlEventSetCreate(self) -> _EventSet:
        event_set = _EventSet()
        self._event_sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(self, gpu, event_types, event_set) -> None:
        self._check(gpu, "nvmlDeviceRegisterEvents")
        if event_types & ~gpu.event_types:
            raise NVMLError_NotSupported("Not Supported")
        event_set.registered[id(gpu)] = event_set.registered.get(id(gpu), 0) | event_types

    def nvmlEventSetWait(self, event_set, timeoutms):
        self.calls.append("nvmlEventSetWait")
        self.gate.wait()
        with event_set.lock:
            if event_set.queue:
                return event_set.queue.pop(0)
        time.sleep(timeoutms / 1000)
        raise NVMLError_Timeout("Timeout")

    nvmlEventSetWait_v2 = nvmlEventSetWait

    def nvmlEventSetFree(self, event_set) -> None:
        self._event_sets.remove(event_set)

    def emit(self, gpu: FakeGPU, event_type: int, data: int) -> None:
        """What the driver does when an event happens: every set that registered for it on this GPU gets it."""
        for event_set in self._event_sets:
            if event_set.registered.get(id(gpu), 0) & event_type:
                with event_set.lock:
                    event_set.queue.append(SimpleNamespace(device=gpu, eventType=event_type, eventData=data,
                                                           gpuInstanceId=NO_INSTANCE, computeInstanceId=NO_INSTANCE))

    # GPM (Hopper and newer)
    def nvmlGpmQueryDeviceSupport(self, gpu):
        return SimpleNamespace(isSupportedDevice=int(gpu.gpm))

    def nvmlGpmSampleAlloc(self):
        return SimpleNamespace()

    def nvmlGpmSampleGet(self, gpu, sample):
        self._check(gpu, "nvmlGpmSampleGet")
        return sample

    def nvmlGpmSampleFree(self, sample) -> None:
        pass

    def c_nvmlGpmMetricsGet_t(self):
        return SimpleNamespace(metrics=[SimpleNamespace(metricId=0, value=0.0, nvmlReturn=0) for _ in range(8)])

    def nvmlGpmMetricsGet(self, request):
        for metric in request.metrics[:request.numMetrics]:
            metric.value = self.gpm_values[metric.metricId]
        return request


class _EventSet:
    def __init__(self) -> None:
        self.registered: dict[int, int] = {}  # id(GPU) → event types
        self.queue: list[SimpleNamespace] = []
        self.lock = threading.Lock()
