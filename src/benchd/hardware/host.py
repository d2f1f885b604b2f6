"""The host and the processes benchd watches (its own, and the workers it registers) through psutil."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from benchd.hardware.readings import HostReading, ProcessReading

log = logging.getLogger("benchd.hardware.reader")

DAEMON = "daemon"  # the process label of benchd's own process
# A process's CPU ratio is taken over at least this long. Its CPU times move in clock ticks (10 ms each thread), so
# over a few milliseconds a tick of several threads reads as several cores' worth: 2.12 of the machine was seen.
MIN_CPU_WINDOW_S = 0.5


class _Watched:
    """A watched process and the start of its current CPU window."""

    __slots__ = ("process", "window_t", "window_cpu_s", "ratio")

    def __init__(self, process: Any, t: float) -> None:
        self.process = process
        times = process.cpu_times()
        self.window_t, self.window_cpu_s = t, times.user + times.system
        self.ratio = 0.0


class HostReader:
    """The host's CPU figures cover the time since the previous read; a process's, at least MIN_CPU_WINDOW_S (with its
    CPU seconds since it started, exact at any time). Processes are watched by a name that becomes their
    label: "daemon" always, others through watch()/unwatch(), callable from any thread."""

    def __init__(self, psutil_module: ModuleType | None = None, pid: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if psutil_module is None:
            import psutil

            psutil_module = psutil
        self._psutil: ModuleType = psutil_module
        self._cpus = psutil_module.cpu_count() or 1
        self._clock = clock
        self._lock = threading.Lock()  # guards _processes only, never held while reading
        self._processes: dict[str, _Watched] = {}
        psutil_module.cpu_percent(percpu=True)  # the first call only starts the interval
        self.watch(DAEMON, pid if pid is not None else os.getpid())

    def watch(self, name: str, pid: int) -> None:
        """Report this process as {process=name} from the next read on; a name already watched moves to the new
        pid (a restarted worker). A pid that does not exist is logged and ignored."""
        try:
            watched = _Watched(self._psutil.Process(pid), self._clock())  # starts its CPU window
        except self._psutil.Error as error:
            log.warning("process %s (pid %d) cannot be watched: %s", name, pid, error)
            return
        with self._lock:
            self._processes[name] = watched

    def unwatch(self, name: str) -> None:
        """Stop reporting this process (its series leave /metrics at the next read)."""
        with self._lock:
            self._processes.pop(name, None)

    def read(self) -> HostReading:
        ps = self._psutil
        cores = ps.cpu_percent(percpu=True)
        memory = ps.virtual_memory()
        return HostReading(
            cpu_ratio=sum(cores) / len(cores) / 100 if cores else None,
            cpu_core_ratios=[c / 100 for c in cores],
            load=tuple(ps.getloadavg()),
            memory_used_bytes=float(memory.total - memory.available),
            memory_available_bytes=float(memory.available),
            memory_total_bytes=float(memory.total),
            processes=self._read_processes(),
        )

    def _read_processes(self) -> dict[str, ProcessReading]:
        with self._lock:
            processes = dict(self._processes)
        readings = {}
        for name, watched in processes.items():
            process = watched.process
            try:
                with process.oneshot():
                    times = process.cpu_times()
                    resident = float(process.memory_info().rss)
                cores = self._cores(process)
            except self._psutil.Error:  # it exited (or was reaped) since it was watched: stop watching it
                log.info("process %s (pid %d) is gone: no longer reported", name, process.pid)
                with self._lock:
                    if self._processes.get(name) is watched:
                        del self._processes[name]
                continue
            readings[name] = ProcessReading(resident_bytes=resident, cpu_ratio=self._ratio(watched, times, cores),
                                            cpu_user_s=times.user, cpu_system_s=times.system, cores=cores)
        return readings

    def _cores(self, process: Any) -> int:
        """The cores the process may run on: its affinity, where the platform has one."""
        try:
            return len(process.cpu_affinity()) or self._cpus
        except AttributeError:  # no affinity on this platform (macOS)
            return self._cpus

    def _ratio(self, watched: _Watched, times: Any, cores: int) -> float:
        """CPU time over the window since the last ratio, as a share of the cores the process may use, 0–1. Within
        MIN_CPU_WINDOW_S of the last one, the last one stands."""
        now, cpu_s = self._clock(), times.user + times.system
        elapsed = now - watched.window_t
        if elapsed >= MIN_CPU_WINDOW_S:
            watched.ratio = min(max((cpu_s - watched.window_cpu_s) / (elapsed * cores), 0.0), 1.0)
            watched.window_t, watched.window_cpu_s = now, cpu_s
        return watched.ratio
