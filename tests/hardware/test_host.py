"""Host and process gauges through the real psutil: the host's, a process busy on every core, a worker beside the
daemon."""

import os
import subprocess
import sys
import time

import psutil

from benchd.hardware.host import HostReader
from benchd.hardware.nvml import NVMLReader
from benchd.hardware.reader import HardwareReader
from tests.fake_nvml import (
    FakeNVML,
)
from tests.hardware.helpers import BUSY_THREADS, sampling, scraped
from tests.helpers import wait_for


def test_host_gauges_from_real_psutil():
    with scraped(HardwareReader(NVMLReader(FakeNVML([])), HostReader())) as registry:
        get = registry.get_sample_value
        assert 0 <= get("benchd_host_cpu_utilization_ratio") <= 1
        cores = [get("benchd_host_cpu_core_utilization_ratio", {"core": str(i)}) for i in range(psutil.cpu_count())]
        assert all(0 <= c <= 1 for c in cores)
        total = psutil.virtual_memory().total
        assert get("benchd_host_memory_total_bytes") == total
        assert 0 < get("benchd_host_memory_used_bytes") < total
        assert 0 < get("benchd_host_memory_available_bytes") <= total
        assert get("benchd_host_load_average", {"period": "1m"}) >= 0
        rss = psutil.Process(os.getpid()).memory_info().rss
        assert 0.5 * rss < get("benchd_host_process_resident_memory_bytes", {"process": "daemon"}) < 2 * rss
        assert 0 <= get("benchd_host_process_cpu_utilization_ratio", {"process": "daemon"}) <= 1
        user = get("benchd_host_process_cpu_seconds_total", {"process": "daemon", "mode": "user"})
        times = psutil.Process(os.getpid()).cpu_times()
        assert 0 < user <= times.user  # read a moment before
        assert get("benchd_host_process_cpu_seconds_total", {"process": "daemon", "mode": "system"}) <= times.system
        assert get("benchd_host_process_cpu_cores", {"process": "daemon"}) == len(os.sched_getaffinity(0))


# A process whose threads each keep a core busy: hashlib releases the GIL while it hashes a large buffer.
def test_a_process_busy_on_every_core_reads_at_most_one_however_often_it_is_read():
    # Four busy threads on this machine's cores, read back to back: CPU times move in clock ticks of each thread,
    # so a ratio taken over a millisecond read several machines' worth (2.12 was seen on two cores).
    child = subprocess.Popen([sys.executable, "-c", BUSY_THREADS], stdin=subprocess.PIPE)
    try:
        host = HostReader()
        host.watch("worker", child.pid)
        readings = []
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            readings.append(host.read().processes["worker"])
        cores = len(os.sched_getaffinity(child.pid))
    finally:
        child.communicate(b"")
    ratios = [r.cpu_ratio for r in readings]
    assert all(0 <= r <= 1 for r in ratios), max(ratios)
    seconds = [r.cpu_user_s + r.cpu_system_s for r in readings]
    assert ratios[-1] > 0 and seconds == sorted(seconds) and seconds[-1] > seconds[0]
    assert readings[-1].cores == cores


def test_a_worker_process_is_reported_beside_the_daemon_while_watched():
    # A child that holds 64 MiB, as a worker holds its model.
    child = subprocess.Popen([sys.executable, "-c", "import sys; b = bytearray(64 << 20); sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    hardware = HardwareReader(NVMLReader(FakeNVML([])), HostReader())
    with sampling(hardware) as sampler:
        try:
            wait_for(lambda: psutil.Process(child.pid).memory_info().rss > 64 << 20, 30, "the child's memory")
            sampler.watch_process("worker", child.pid)
            wait_for(lambda: "worker" in sampler.latest.host.processes, 10, "a read with the worker")
            worker = sampler.latest.host.processes["worker"]
            assert worker.resident_bytes > 64 << 20 and 0 <= worker.cpu_ratio <= 1
            assert "daemon" in sampler.latest.host.processes
            sampler.unwatch_process("worker")
            wait_for(lambda: "worker" not in sampler.latest.host.processes, 10, "a read without the worker")
            sampler.watch_process("worker", child.pid)
            wait_for(lambda: "worker" in sampler.latest.host.processes, 10, "the worker watched again")
        finally:
            child.communicate(b"")
        # An exited worker leaves by itself.
        wait_for(lambda: "worker" not in sampler.latest.host.processes, 10, "the exited worker to leave")
        sampler.watch_process("gone", child.pid)  # a pid that no longer exists: logged, never raised
        assert "gone" not in sampler.latest.host.processes
