"""Collecting, in the worker, what identifies the stack a run measured (protocol/metadata.py): versions, device, host
and the user's label."""

from __future__ import annotations

import os
import platform
import socket
from datetime import UTC, datetime

import benchd
from benchd.protocol.metadata import RunMetadata


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def nvidia_versions() -> tuple[str | None, str | None]:
    """The driver's version, and the firmware (VBIOS) of the first GPU the worker sees (CUDA_VISIBLE_DEVICES names
    it by UUID: the daemon pins each worker so)."""
    try:
        import pynvml
    except ImportError:
        return None, None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # no NVML library or no GPU: the run simply has no driver version
        return None, None
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        try:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
            handle = pynvml.nvmlDeviceGetHandleByUUID(visible) if visible.startswith(("GPU-", "MIG-")) else \
                pynvml.nvmlDeviceGetHandleByIndex(int(visible or 0))
            vbios = pynvml.nvmlDeviceGetVbiosVersion(handle)
        except (pynvml.NVMLError, ValueError):  # a MIG instance, an index NVML does not know: no firmware
            vbios = None
        return driver, vbios
    finally:
        pynvml.nvmlShutdown()


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def record_stack(metadata: RunMetadata, spec, loaded) -> None:
    """What the loaded model runs with, once its engine has started (continuous batching switches attention)."""
    metadata.dtype = str(loaded.dtype).removeprefix("torch.")
    metadata.quantization = loaded.quantization
    metadata.quantization_method = loaded.quantized.method if loaded.quantized is not None else None
    metadata.quantized_layers = loaded.quantized.layers if loaded.quantized is not None else 0
    metadata.quantize_s = loaded.quantize_s
    metadata.weight_bytes = loaded.weight_bytes
    metadata.attn_implementation = loaded.model.config._attn_implementation
    metadata.compile = spec.compile


class PeakMemory:
    """torch's allocator peak on a CUDA device from construction to read(); None elsewhere."""

    def __init__(self, device) -> None:
        self.device = device if device is not None and device.type == "cuda" else None
        if self.device is not None:
            import torch

            torch.cuda.reset_peak_memory_stats(self.device)

    def read(self) -> int | None:
        if self.device is None:
            return None
        import torch

        return int(torch.cuda.max_memory_allocated(self.device))

    def reserved(self) -> int | None:
        if self.device is None:
            return None
        import torch

        return int(torch.cuda.max_memory_reserved(self.device))


def collect(device, model: str, label: str | None, model_load_s: float | None = None) -> RunMetadata:
    import torch
    import transformers

    driver = vbios = None
    if device is None:  # a remote server: the runner names it
        device_name = "remote"
    elif device.type == "cuda":
        device_name = torch.cuda.get_device_name(device)
        driver, vbios = nvidia_versions()
    else:
        device_name = platform.processor() or platform.machine()
    return RunMetadata(
        benchd_version=benchd.__version__,
        python_version=platform.python_version(),
        torch_version=torch.__version__,
        transformers_version=transformers.__version__,
        cuda_version=torch.version.cuda,
        driver_version=driver,
        vbios_version=vbios,
        device=str(device) if device is not None else "remote",
        device_name=device_name,
        torch_threads=torch_threads() if device is not None else None,
        host=socket.gethostname(),
        label=label if label is not None else os.environ.get("BENCHD_LABEL"),
        model=model,
        model_load_s=model_load_s,
        started_at=utc_now(),
    )
