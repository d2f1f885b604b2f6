"""Timing on the device: CUDA events on a GPU, perf_counter on a CPU, with one structure for both."""

from __future__ import annotations

import time

import torch


class DeviceClock:
    """Marks on the device's timeline. On CUDA a mark is an event recorded on the current stream, read after one
    synchronisation; on a CPU, where every op has finished when it returns, a mark is perf_counter()."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def synchronize(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def seconds(self, start, end) -> float:
        """Between two marks; on CUDA only after synchronize()."""
        if not self.cuda:
            return end - start
        return start.elapsed_time(end) / 1e3


class CacheFlusher:
    """Overwrites a buffer larger than the last-level cache, so a repeat finds none of its inputs cached
    (Triton's do_bench does the same with 256 MiB)."""

    def __init__(self, device: torch.device, nbytes: int) -> None:
        self.buffer = torch.empty(nbytes // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()
