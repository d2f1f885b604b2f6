"""A device's speed, measured once per device by a short probe in its worker: the matmul rate per dtype (a GEMM)
and the memory bandwidth (a copy larger than the caches). Admission and the supervisor size a run's time with it
(benchd.models.duration); a roofline builds on it. The daemon reads it from the worker's hello, never measures it (no
torch there). Kept in a file per device model and driver (the workers' directory): a worker on a device measured
before reads it instead of measuring again."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DTYPES = ("float32", "bfloat16", "float16")  # and tf32 on CUDA
CALL_S = 0.005  # a GEMM is grown until one call takes this long: long enough to reach the device's rate
REPEATS = 5  # the best of these calls (and copies) is the figure: what the device can do, not what a neighbour left
MAX_SIDE = {"cpu": 2048, "cuda": 8192}
COPY_BYTES = {"cpu": 64 << 20, "cuda": 512 << 20}  # larger than a CPU's last-level cache, or an H100's 50 MB L2


@dataclass(frozen=True, slots=True)
class DeviceSpeed:
    device: str  # the worker's device: cpu, cuda
    matmul_flops_per_s: dict[str, float] = field(default_factory=dict)  # by dtype; a dtype the device lacks: absent
    copy_bytes_per_s: float = 0.0  # bytes read and written per second by a device-to-device copy
    copy_bytes: int = 0  # the copy's size: a working set below it may run from the caches, faster
    probe_s: float = 0.0  # what measuring took
    name: str = ""  # the device's model as its driver names it (NVIDIA H100 80GB HBM3), or the CPU's
    driver: str = ""  # the GPU driver's version ("" on a CPU)

    @property
    def key(self) -> str:
        """What a cached measurement is kept under: the device model and its driver."""
        return f"{self.device} | {self.name} | driver {self.driver or '-'}"

    def flops_per_s(self, dtype: str) -> float | None:
        """The matmul rate in this dtype (auto: bfloat16 on CUDA, float32 on a CPU, as runs resolve it)."""
        return self.matmul_flops_per_s.get(self._resolved(dtype))

    def describe(self, dtype: str | None = None) -> str:
        """Its rates as people read them: the matmul rate in dtype (None: in each), and the copy bandwidth."""
        if dtype is not None:
            dtype = self._resolved(dtype)
        rates = ", ".join(f"{rate / 1e9:,.0f} GFLOP/s {name}" for name, rate in self.matmul_flops_per_s.items()
                          if dtype is None or name == dtype)
        return f"{rates} and {self.copy_bytes_per_s / 1e9:,.1f} GB/s"

    def _resolved(self, dtype: str) -> str:
        return ("bfloat16" if self.device.startswith("cuda") else "float32") if dtype == "auto" else dtype

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, data: dict[str, Any] | None) -> DeviceSpeed | None:
        return None if not data else cls(**data)


_MEASURED: dict[str, DeviceSpeed] = {}  # by device, for this process's life: measured once


def measure(device: str, cache: Path | None = None) -> DeviceSpeed:
    """The device's speed (cpu, or cuda: the worker's only visible GPU); measured at the first call, in about a
    second at most, then kept; with a cache file, read from it when this device model and driver were measured
    before, and written to it when not."""
    if device not in _MEASURED:
        name, driver = identity(device)
        known = _cached(cache)
        entry = known.get(DeviceSpeed(device=device, name=name, driver=driver).key)
        try:
            speed = DeviceSpeed.of(entry) if isinstance(entry, dict) else None
        except TypeError:  # written by another version of benchd: measured again
            speed = None
        if speed is None:
            speed = _probe(device, name, driver)
            if cache is not None:
                _store(cache, {**known, speed.key: speed.as_dict()})
        _MEASURED[device] = speed
    return _MEASURED[device]


def identity(device: str) -> tuple[str, str]:
    """The device's model and driver version: CUDA's name for the GPU and NVML's driver version; the CPU's model
    from /proc/cpuinfo (or the platform's)."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(), _driver()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    except OSError:
        names = []
    import platform

    return (names[0] if names else platform.processor() or platform.machine()), ""


def _driver() -> str:
    try:
        import pynvml
    except ImportError:
        return ""
    try:
        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError:  # no NVML library in a container: the key has no driver
        return ""
    return version.decode() if isinstance(version, bytes) else str(version)


def _cached(cache: Path | None) -> dict[str, dict[str, Any]]:
    if cache is None:
        return {}
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):  # none yet, or torn: measured again
        return {}
    return known if isinstance(known, dict) else {}


def _store(cache: Path, known: dict[str, dict[str, Any]]) -> None:
    """Written whole and renamed into place: a worker reading it beside sees the old file or the new one. A disk
    that takes no writes (full, failing, read-only) keeps no cache: the next worker measures again."""
    partial = cache.with_name(f"{cache.name}.{os.getpid()}")
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(known, indent=1))
        partial.replace(cache)
    except OSError as error:
        print(f"benchd: the device's speed was not cached ({error})", file=sys.stderr, flush=True)
        partial.unlink(missing_ok=True)


def _probe(device: str, name: str = "", driver: str = "") -> DeviceSpeed:
    import torch

    started = time.perf_counter()
    target = torch.device(device)
    kind = target.type

    def timed(call) -> float:
        if kind == "cuda":
            torch.cuda.synchronize(target)
        begun = time.perf_counter()
        call()
        if kind == "cuda":
            torch.cuda.synchronize(target)
        return time.perf_counter() - begun

    def gemm(dtype) -> float:
        """FLOP/s of a square matmul grown until one call takes CALL_S: the best of REPEATS calls."""
        side = 256
        while True:
            a = torch.randn(side, side, device=target).to(dtype)
            b = torch.randn(side, side, device=target).to(dtype)
            timed(lambda: torch.matmul(a, b))  # noqa: B023 (called here) the first call at a size: warm-up
            seconds = timed(lambda: torch.matmul(a, b))  # noqa: B023 (called here)
            if seconds >= CALL_S or side >= MAX_SIDE[kind]:
                break
            side *= 2
        best = min(seconds, *(timed(lambda: torch.matmul(a, b)) for _ in range(REPEATS - 1)))
        return 2 * side ** 3 / best

    # On a CPU, one thread, counted once for each of the worker's threads: a parallel GEMM on cores another process
    # is busy on is slowed many times over (each step waits for the slowest thread), which measures that moment's
    # neighbours, not the device. The product is what the threads could do at best together: times stay lower bounds.
    threads = torch.get_num_threads() if kind == "cpu" else 1
    if kind == "cpu":
        torch.set_num_threads(1)
    try:
        rates = {}
        for dtype in DTYPES:
            try:
                rates[dtype] = threads * gemm(getattr(torch, dtype))
            except RuntimeError:  # a dtype this device has no matmul for (bfloat16 before Ampere): left out
                continue
        if kind == "cuda":  # float32 on TF32 tensor cores: what a kernel run's tf32 implementation uses
            before = torch.get_float32_matmul_precision()
            torch.set_float32_matmul_precision("high")
            try:
                rates["tf32"] = gemm(torch.float32)
            finally:
                torch.set_float32_matmul_precision(before)
        size = COPY_BYTES[kind]
        source = torch.empty(size // 4, dtype=torch.float32, device=target).fill_(1.0)
        sink = torch.empty_like(source)
        sink.copy_(source)
        best = min(timed(lambda: sink.copy_(source)) for _ in range(REPEATS))
        # released before the cache is emptied (the lambda above holds them: no del)
        source = sink = None  # type: ignore[assignment]
    finally:
        if kind == "cpu":
            torch.set_num_threads(threads)
    if kind == "cuda":
        torch.cuda.empty_cache()  # the probe's tensors are not memory the worker holds
    return DeviceSpeed(device=kind, matmul_flops_per_s=rates, copy_bytes_per_s=threads * 2 * size / best,
                       copy_bytes=size, probe_s=time.perf_counter() - started, name=name, driver=driver)
