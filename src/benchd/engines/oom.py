"""Out of device memory: recognised in what an engine's thread raised, and told with the allocator's figures."""

from __future__ import annotations

import torch

from benchd.engines.base import EngineFailure

GIB = 2**30


def is_out_of_memory(error: BaseException | None) -> bool:
    """torch's out-of-memory error, CUDA's or the host's (a CPU build raises it too)."""
    return isinstance(error, torch.OutOfMemoryError)


def failure_of(error: BaseException, device: torch.device) -> EngineFailure:
    """An engine thread's fatal error as the stage reports it: out of memory with the allocator's figures now."""
    if not is_out_of_memory(error):
        return EngineFailure(f"{type(error).__name__}: {error}")
    cause = str(error).split(". GPU ")[0].split(" (")[0]  # "CUDA out of memory. Tried to allocate 540.00 MiB"
    where = "GPU" if device.type == "cuda" else "device"
    return EngineFailure(f"out of {where} memory: {cause} ({figures(device)})", out_of_memory=True)


def private_pool_bytes(device: torch.device) -> int:
    """Bytes torch's allocator holds in private pools: CUDA graphs' memory (one snapshot of the segments)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return sum(segment["total_size"] for segment in torch.cuda.memory_snapshot()
               if segment.get("device") == index and tuple(segment.get("segment_pool_id", (0, 0))) != (0, 0))


def figures(device: torch.device) -> str:
    """The allocator's state as the engine left it: what tensors hold, what the allocator keeps, and how much of it
    CUDA graphs' pools hold; on a CPU, nothing to tell."""
    if device.type != "cuda":
        return "no device allocator figures on a CPU"
    free, total = torch.cuda.mem_get_info(device)
    return (f"allocated {torch.cuda.memory_allocated(device) / GIB:.2f} GiB, reserved "
            f"{torch.cuda.memory_reserved(device) / GIB:.2f} GiB of which graph pools "
            f"{private_pool_bytes(device) / GIB:.2f} GiB, peak reserved "
            f"{torch.cuda.max_memory_reserved(device) / GIB:.2f} GiB; {free / GIB:.2f} of {total / GIB:.2f} GiB free "
            "on the device")
