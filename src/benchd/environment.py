"""What identifies the stack a run measured: versions, device, host and the user's label."""

from __future__ import annotations

import os
import platform
import socket
from datetime import datetime, timezone

from pydantic import BaseModel

import benchd


class RunMetadata(BaseModel):
    run_id: str | None = None
    trace_id: str | None = None  # the run's trace (its span and every request's), when traced
    benchd_version: str
    python_version: str
    torch_version: str
    transformers_version: str
    cuda_version: str | None = None
    driver_version: str | None = None
    device: str
    device_name: str
    torch_threads: int | None = None  # torch's intra-op CPU threads for the run (a CUDA engine sets its own)
    host: str
    label: str | None = None
    model: str
    model_load_s: float | None = None
    engine_settings: dict = {}
    started_at: str
    finished_at: str | None = None


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def nvidia_driver_version() -> str | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # no NVML library or no GPU: the run simply has no driver version
        return None
    try:
        return pynvml.nvmlSystemGetDriverVersion()
    finally:
        pynvml.nvmlShutdown()


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def collect(device, model: str, label: str | None, model_load_s: float | None = None) -> RunMetadata:
    import torch
    import transformers

    if device is None:  # a remote server: the runner names it
        device_name, driver = "remote", None
    elif device.type == "cuda":
        device_name = torch.cuda.get_device_name(device)
        driver = nvidia_driver_version()
    else:
        device_name = platform.processor() or platform.machine()
        driver = None
    return RunMetadata(
        benchd_version=benchd.__version__,
        python_version=platform.python_version(),
        torch_version=torch.__version__,
        transformers_version=transformers.__version__,
        cuda_version=torch.version.cuda,
        driver_version=driver,
        device=str(device) if device is not None else "remote",
        device_name=device_name,
        torch_threads=torch_threads() if device is not None else None,
        host=socket.gethostname(),
        label=label if label is not None else os.environ.get("BENCHD_LABEL"),
        model=model,
        model_load_s=model_load_s,
        started_at=utc_now(),
    )
