"""What the hardware tests share: a reader over the NVML stand-in, a started sampler, its registry."""

from contextlib import contextmanager

from prometheus_client import CollectorRegistry

from benchd.hardware.host import HostReader
from benchd.hardware.nvml import NVMLReader
from benchd.hardware.reader import HardwareReader
from benchd.hardware.sampler import HardwareSampler
from benchd.telemetry.gauges import HardwareCollector
from tests.fake_nvml import (
    FakeNVML,
)
from tests.helpers import wait_for

UUID0, UUID1 = "GPU-aaaaaaaa-0000", "GPU-bbbbbbbb-1111"
H100 = "NVIDIA H100 80GB HBM3"


def reader(*gpus, visible=None, init_error=None, nvml=None):
    nvml_reader = NVMLReader(nvml or FakeNVML(list(gpus), init_error), cuda_visible_devices=visible)
    nvml_reader.start()
    return HardwareReader(nvml_reader, HostReader())


@contextmanager
def sampling(hardware: HardwareReader, interval_s: float = 0.05, **options):
    """A started sampler, once its first snapshot is in."""
    sampler = HardwareSampler(hardware, interval_s, **options)
    sampler.start()
    try:
        wait_for(lambda: sampler.latest is not None, 30, "the first hardware snapshot")
        yield sampler
    finally:
        sampler.stop()


@contextmanager
def scraped(hardware: HardwareReader):
    """A registry serving the hardware through a sampler, as the daemon does."""
    with sampling(hardware) as sampler:
        registry = CollectorRegistry()
        registry.register(HardwareCollector(sampler))
        yield registry


def gpu_value(registry, name, gpu="0", uuid=UUID0, **extra):
    return registry.get_sample_value(name, {"gpu": gpu, "uuid": uuid, "name": H100, **extra})


# A process that keeps four threads busy hashing until its stdin closes.
BUSY_THREADS = """
import hashlib, sys, threading
data = bytes(1 << 20)
def spin():
    while True:
        hashlib.sha256(data).digest()
for _ in range(4):
    threading.Thread(target=spin, daemon=True).start()
sys.stdin.read()
"""
