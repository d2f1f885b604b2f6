"""The host and the processes benchd watches (its own, and the workers it registers) through psutil."""

from __future__ import annotations

import logging
import os
import threading
from types import ModuleType
from typing import Any

from benchd.readings import HostReading, ProcessReading

log = logging.getLogger("benchd.hardware")

DAEMON = "daemon"  # the process label of benchd's own process


class HostReader:
    """CPU figures cover the time since the previous read. Processes are watched by a name that becomes their
    label: "daemon" always, others through watch()/unwatch(), callable from any thread."""

    def __init__(self, psutil_module: ModuleType | None = None, pid: int | None = None) -> None:
        if psutil_module is None:
            import psutil as psutil_module
        self._psutil = psutil_module
        self._cpus = psutil_module.cpu_count() or 1
        self._lock = threading.Lock()  # guards _processes only, never held while reading
        self._processes: dict[str, Any] = {}
        psutil_module.cpu_percent(percpu=True)  # the first call only starts the interval
        self.watch(DAEMON, pid if pid is not None else os.getpid())

    def watch(self, name: str, pid: int) -> None:
        """Report this process as {process=name} from the next read on; a name already watched moves to the new
        pid (a restarted worker). A pid that does not exist is logged and ignored."""
        try:
            process = self._psutil.Process(pid)
            process.cpu_percent()  # starts its CPU interval
        except self._psutil.Error as error:
            log.warning("process %s (pid %d) cannot be watched: %s", name, pid, error)
            return
        with self._lock:
            self._processes[name] = process

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
        for name, process in processes.items():
            try:
                with process.oneshot():
                    readings[name] = ProcessReading(resident_bytes=float(process.memory_info().rss),
                                                    cpu_ratio=process.cpu_percent() / 100 / self._cpus)
            except self._psutil.Error:  # it exited (or was reaped) since it was watched: stop watching it
                log.info("process %s (pid %d) is gone: no longer reported", name, process.pid)
                with self._lock:
                    if self._processes.get(name) is process:
                        del self._processes[name]
        return readings
