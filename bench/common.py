"""What the GPU benchmark scripts share: the reference workload, a one-line environment description, and waiting
on a live daemon."""

from __future__ import annotations

import platform
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))  # benchd from this checkout, torch and transformers from the host

# Llama-3.2-1B shape, bf16, random weights, 256 requests × 256 prompt × 256 output tokens, all at once.
REFERENCE = {
    "name": "reference-llama-1b",
    "model": "llama-3.2-1b",
    "dtype": "bfloat16",
    "device": "cuda",
    "seed": 0,
    "workload": {
        "arrivals": {"profile": "concurrent", "concurrency": 256},
        "stop": {"requests": 256},
        "prompt_tokens": {"dist": "fixed", "value": 256},
        "output_tokens": {"dist": "fixed", "value": 256},
    },
}


def environment() -> str:
    import torch
    import transformers

    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        driver = "?"
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor()
    return (f"{gpu}, driver {driver}, torch {torch.__version__}, transformers {transformers.__version__}, "
            f"python {platform.python_version()}, {date.today().isoformat()}")


def wait_ready(http, daemon, timeout_s: float = 900):
    """GET /readyz on a daemon this script started until it answers 200, or exit at once, saying so, if the daemon
    has exited (a missing package on a GPU host: without this the script waited its whole timeout)."""
    def check():
        if daemon.poll() is not None:
            raise SystemExit(f"the daemon exited with {daemon.returncode} before it was ready")
        return http.get("/readyz").status_code == 200

    return wait(check, timeout_s, 0.5)


def free_port() -> int:
    """A loopback port free now (the kernel's pick): a port of its own for each server a script starts, never a
    neighbour of another's, which another process may hold."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(check, timeout_s: float, step_s: float = 0.02):
    """check() until it gives something true (a daemon not yet listening counts as not yet), or exit."""
    import httpx

    deadline = time.perf_counter() + timeout_s
    while True:
        try:
            value = check()
        except httpx.TransportError:
            value = None
        if value:
            return value
        if time.perf_counter() > deadline:
            raise SystemExit("timed out")
        time.sleep(step_s)
