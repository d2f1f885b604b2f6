"""Every visible GPU and MIG instance through NVML. Reading never raises: a missing library, function or field, or a
failing GPU means fewer values and one logged warning."""

from __future__ import annotations

import logging
import re
import threading
import time
from types import ModuleType
from typing import Any

from benchd.hardware.nvml_fields import Field, gpu_fields, mig_fields
from benchd.hardware.readings import CLOCK_EVENT_OF, THROTTLE_REASONS, GPUInfo, GPUReading, MigInstance
from benchd.hardware.xid import XidWatcher

log = logging.getLogger("benchd.hardware.reader")

# NVML's GPM metric ids (Hopper and newer: NVML_GPM_METRIC_SM_UTIL, _ANY_TENSOR_UTIL, _DRAM_BW_UTIL), in
# percent over the interval between two samples.
GPM_METRICS = {"sm_activity_ratio": 2, "tensor_activity_ratio": 5, "dram_bandwidth_ratio": 10}
MIG_ENABLED = 1  # NVML_DEVICE_MIG_ENABLE
ECC_ENABLED = 1  # NVML_FEATURE_ENABLED
# Errors that mean "this GPU, driver or caller cannot have that value": the field is left out, not retried.
ABSENT = ("NVMLError_NotSupported", "NVMLError_FunctionNotFound", "NVMLError_NoPermission")


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
    """A GPU, or a MIG instance of one (mig set, the parent's index and UUID kept for its labels)."""

    __slots__ = ("handle", "index", "uuid", "name", "unsupported", "gpm_sample", "failing", "links", "mig", "migs",
                 "clock_events", "clock_mask")

    def __init__(self, handle: Any, index: int, uuid: str, name: str, mig: MigInstance | None = None) -> None:
        self.handle, self.index, self.uuid, self.name, self.mig = handle, index, uuid, name, mig
        self.unsupported: set[str] = set()
        self.gpm_sample: Any = None  # the previous GPM sample; None where GPM does not work
        self.failing = False
        self.links: list[int] = []  # active NVLinks
        self.migs: list[_Device] = []
        # Clock events' onsets since benchd started, by DCGM's name (a reason active in a read and not in the one
        # before: DCGM_EXP_CLOCK_EVENTS_TOTAL's edge count, at the sampler's resolution); the previous read's mask.
        self.clock_events: dict[str, int] = dict.fromkeys(CLOCK_EVENT_OF.values(), 0)
        self.clock_mask = 0


class NVMLReader:
    """Every visible GPU through an NVML module: pynvml in production, a stand-in in tests."""

    def __init__(self, nvml: ModuleType | Any | None = None, cuda_visible_devices: str | None = None) -> None:
        # pynvml, which has no types (pyproject.toml, [tool.mypy]), or a stand-in; None until start() imports it
        self._nvml: Any = nvml
        self._visible = visible_devices(cuda_visible_devices)
        self._devices: list[_Device] = []
        self._fields: dict[str, Field] = {}  # built once NVML is loaded
        self._mig_fields: dict[str, Field] = {}
        self._absent: tuple[type[BaseException], ...] = ()
        self._lock = threading.Lock()
        self.xids: XidWatcher | None = None
        self.info: list[GPUInfo] = []
        self.available = False

    def start(self) -> None:
        nvml = self._nvml
        if nvml is None:
            try:
                import pynvml
            except ImportError:
                log.warning("nvidia-ml-py is not installed: no GPU gauges")
                return
            self._nvml = nvml = pynvml
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as error:
            log.warning("NVML is not available (%s): no GPU gauges", error)
            return
        self._absent = tuple(cls for name in ABSENT if isinstance(cls := getattr(nvml, name, None), type))
        devices = []
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid, name = _text(nvml.nvmlDeviceGetUUID(handle)), _text(nvml.nvmlDeviceGetName(handle))
            except nvml.NVMLError as error:
                log.warning("GPU %d cannot be read (%s): left out", index, error)
                continue
            device = _Device(handle, index, uuid, name)
            device.migs = self._find_migs(device)
            devices.append(device)
        if self._visible is not None:
            devices = [d for d in devices if _keep(d, self._visible)]
        self._fields = _usable(gpu_fields(nvml), nvml)
        self._mig_fields = _usable(mig_fields(nvml), nvml)
        versions = self._versions()
        self.xids = XidWatcher(nvml)
        for device in devices:
            self._start_gpm(device)
            device.links = self._find_links(device)
            if "ecc" in self._fields and not self._ecc_enabled(device):
                device.unsupported.add("ecc")
            self.xids.register(device.handle, device.uuid, device.index)
        self.info = [GPUInfo(str(d.index), d.uuid, d.name, self._bus_id(d), *versions) for d in devices]
        self._devices = devices
        self.available = True

    def _versions(self) -> tuple[str, str]:
        nvml = self._nvml
        driver = cuda = ""
        try:
            driver = _text(nvml.nvmlSystemGetDriverVersion())
            version = nvml.nvmlSystemGetCudaDriverVersion_v2()  # 12080 → 12.8, as nvidia-smi shows it
            cuda = f"{version // 1000}.{version % 1000 // 10}"
        except (nvml.NVMLError, AttributeError) as error:
            log.info("driver or CUDA version unknown (%s)", error)
        return driver, cuda

    def _bus_id(self, device: _Device) -> str:
        try:
            return _text(self._nvml.nvmlDeviceGetPciInfo(device.handle).busId)
        except (self._nvml.NVMLError, AttributeError) as error:
            log.info("GPU %d: PCI bus id unknown (%s)", device.index, error)
            return ""

    def _find_migs(self, device: _Device) -> list[_Device]:
        """The GPU's MIG devices, as they are now (a layout changed later is read at the next start)."""
        nvml = self._nvml
        try:
            if nvml.nvmlDeviceGetMigMode(device.handle)[0] != MIG_ENABLED:
                return []
            slots = nvml.nvmlDeviceGetMaxMigDeviceCount(device.handle)
        except (nvml.NVMLError, AttributeError):  # pre-Ampere GPUs, older drivers or bindings: no MIG
            return []
        migs = []
        for slot in range(slots):
            try:
                handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(device.handle, slot)
            except nvml.NVMLError:  # NotFound: an empty slot
                continue
            try:
                name = _text(nvml.nvmlDeviceGetName(handle))
                instance = MigInstance(nvml.nvmlDeviceGetGpuInstanceId(handle),
                                       nvml.nvmlDeviceGetComputeInstanceId(handle), _profile(name),
                                       _text(nvml.nvmlDeviceGetUUID(handle)))
            except nvml.NVMLError as error:
                log.warning("GPU %d: MIG device %d cannot be read (%s): left out", device.index, slot, error)
                continue
            migs.append(_Device(handle, device.index, device.uuid, device.name, instance))
        return migs

    def _find_links(self, device: _Device) -> list[int]:
        nvml = self._nvml
        if "nvlink" not in self._fields:
            return []
        links = []
        for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                if nvml.nvmlDeviceGetNvLinkState(device.handle, link):
                    links.append(link)
            except nvml.NVMLError:  # NotSupported on GPUs without NVLink, InvalidArgument past the last link
                break
        return links

    def _ecc_enabled(self, device: _Device) -> bool:
        try:
            enabled = self._nvml.nvmlDeviceGetEccMode(device.handle)[0] == ECC_ENABLED
        except self._nvml.NVMLError:
            enabled = False
        if not enabled:
            log.info("GPU %d: ECC is off or unsupported: no ECC counters", device.index)
        return enabled

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
            if self.xids is not None:
                self.xids.close()
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
            self.available = False

    @property
    def devices(self) -> list[tuple[str, str, str]]:
        return [(str(d.index), d.uuid, d.name) for d in self._devices]

    @property
    def migs(self) -> list[tuple[str, MigInstance]]:
        """(GPU index, instance) of every visible MIG instance."""
        return [(str(d.index), m.mig) for d in self._devices for m in d.migs if m.mig is not None]

    def read(self) -> list[GPUReading]:
        with self._lock:
            if self.xids is not None:
                self.xids.drain()
            readings = []
            for device in self._devices:
                reading = self._read(device, self._fields)
                if reading is None:
                    continue
                readings.append(reading)
                readings.extend(r for mig in device.migs if (r := self._read(mig, self._mig_fields)) is not None)
            return readings

    def _read(self, device: _Device, fields: dict[str, Field]) -> GPUReading | None:
        reading = GPUReading(str(device.index), device.uuid, device.name, mig=device.mig)
        what = f"GPU {device.index}" + (f" MIG {device.mig.uuid}" if device.mig else "")
        for name, read in fields.items():
            if name in device.unsupported:
                continue
            started = time.perf_counter()
            try:
                values = read(device.handle, device.links)
            except self._absent as error:
                device.unsupported.add(name)
                log.warning("%s does not support %s (%s): that gauge is left out", what, name, error)
                continue
            except self._nvml.NVMLError as error:
                # Anything else: the GPU is failing. Keep serving; say so once until it recovers.
                if not device.failing:
                    log.warning("%s failed to read %s (%s): its gauges pause", what, name, error)
                device.failing = True
                return None
            if name == "energy":
                reading.t = (started + time.perf_counter()) / 2
            for key, value in values.items():
                if isinstance(value, dict):
                    reading.labelled[key] = value
                else:
                    reading.values[key] = value
        device.failing = False
        reasons = reading.values.pop("_throttle_mask", None)
        if reasons is not None:
            mask = int(reasons)
            reading.throttle = {name: bool(mask & bit) for name, bit in THROTTLE_REASONS.items()}
            reading.values["clocks_event_reasons"] = float(mask)
            for name, bit in THROTTLE_REASONS.items():
                if mask & bit and not device.clock_mask & bit:
                    device.clock_events[CLOCK_EVENT_OF[name]] += 1
            device.clock_mask = mask
            reading.labelled["clock_events"] = {event: float(n) for event, n in device.clock_events.items()}
        if device.gpm_sample is not None:
            reading.values.update(self._gpm(device))
        if device.mig is None and self.xids is not None and device.uuid in self.xids.counts:
            counts = self.xids.counts[device.uuid]
            reading.labelled["xid_errors"] = {code: float(n) for code, n in counts.items()}
            reading.values["xid_events"] = float(sum(counts.values()))  # 0 from registration: a healthy GPU reads 0
            reading.values["last_xid_code"] = float(self.xids.last[device.uuid])
        return reading

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


def _usable(fields: dict[str, tuple[tuple[str, ...], Field]], nvml: Any) -> dict[str, Field]:
    """The fields whose functions and constants these bindings have (older nvidia-ml-py lacks some)."""
    usable = {}
    for name, (needs, read) in fields.items():
        missing = [n for n in needs if not hasattr(nvml, n)]
        if missing:
            log.info("nvidia-ml-py lacks %s: no %s gauges", ", ".join(missing), name)
        else:
            usable[name] = read
    return usable


def _keep(device: _Device, visible: list[str]) -> bool:
    """Whether CUDA_VISIBLE_DEVICES names the GPU or one of its MIG devices (then only those MIG devices stay; the
    GPU's own gauges too, as its health is theirs)."""
    if any(device.uuid.upper().startswith(v.upper()) if not v.isdigit() else str(device.index) == v
           for v in visible):
        return True
    device.migs = [m for m in device.migs if m.mig is not None and any(
        _mig_matches(m.mig, device.uuid, v) for v in visible)]
    return bool(device.migs)


def _mig_matches(mig: MigInstance, parent_uuid: str, visible: str) -> bool:
    v = visible.upper()
    if v.startswith("MIG-GPU-"):  # drivers before R470: MIG-<GPU uuid>/<GPU instance>/<compute instance>
        return v == f"MIG-{parent_uuid}/{mig.gpu_instance_id}/{mig.compute_instance_id}".upper()
    return v.startswith("MIG-") and mig.uuid.upper().startswith(v)


def _profile(name: str) -> str:
    """A MIG device's profile from its NVML name: "NVIDIA H100 80GB HBM3 MIG 1g.10gb" → "1g.10gb"."""
    match = re.search(r"\bMIG (\S+)$", name)
    return match.group(1) if match else ""


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value

