"""What the hardware is doing, in one read: every visible GPU through NVML, the host and watched processes through
psutil."""

from __future__ import annotations

import os
import time

from benchd.hardware.host import HostReader
from benchd.hardware.nvml import NVMLReader
from benchd.hardware.readings import Snapshot


class HardwareReader:
    """Both readers behind one read(); the sampler's thread is its only caller in the daemon."""

    def __init__(self, nvml: NVMLReader, host: HostReader) -> None:
        self.nvml, self.host = nvml, host

    @classmethod
    def default(cls) -> HardwareReader:
        nvml = NVMLReader(cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
        nvml.start()
        return cls(nvml, HostReader())

    def read(self) -> Snapshot:
        t = time.perf_counter()
        gpus, host = self.nvml.read(), self.host.read()
        return Snapshot(t, gpus, host, time.perf_counter() - t)
