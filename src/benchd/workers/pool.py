"""The daemon's worker processes, one per device: started, kept warm with the daemon's model, and started again
whenever one dies, so a fault fails one run and the next run finds a worker ready."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from benchd.footprint import dtype_bytes, model_shape_and_weights
from benchd.workers.handle import Death, RunSink, WorkerHandle, WorkerSettings

log = logging.getLogger("benchd.workers")


class WorkerPool:
    def __init__(self, devices: list[str], settings: WorkerSettings, model: tuple[str, str, str] | None = None,
                 on_restart: Callable[[str], None] = lambda reason: None,
                 watch: Callable[[str, int], None] = lambda name, pid: None) -> None:
        """devices: where workers run (cpu, cuda:0, …); model: (ref, dtype, device) loaded in each at start."""
        self.settings, self.model = settings, model
        self.on_restart, self.watch = on_restart, watch
        self.workers: dict[str, WorkerHandle] = {}
        self.load_errors: dict[str, str | None] = {}  # by device: why the daemon's model did not load
        self.restarts = 0
        self.last_restart_s: float | None = None  # death → a new worker ready, the latest
        self._devices = devices
        self._lock = threading.Lock()
        self._closing = False

    def start(self) -> None:
        for device in self._devices:
            self._spawn(device)

    def stop(self, timeout_s: float = 30.0) -> None:
        self._closing = True
        for worker in list(self.workers.values()):
            worker.stop(timeout_s)

    # ---- state -------------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Every worker answers and has tried the daemon's model."""
        return len(self.workers) == len(self._devices) and all(
            w.state == "ready" and w.device in self.load_errors for w in self.workers.values())

    def load_error(self) -> str | None:
        errors = [f"{device}: {error}" for device, error in self.load_errors.items() if error]
        return "; ".join(errors) or None

    def describe(self) -> list[dict[str, Any]]:
        return [{"name": w.name, "device": w.device, "state": w.state, "pid": w.pid, "busy": w.busy,
                 "load_error": self.load_errors.get(w.device)} for w in self.workers.values()]

    def held_bytes(self, device: str) -> int:
        """What the daemon's model, kept loaded on this device, holds (estimated): released before another loads."""
        if self.model is None or device not in self.workers:
            return 0
        ref, dtype, _ = self.model
        _, weights = model_shape_and_weights(ref, dtype_bytes(dtype, "cuda" if device.startswith("cuda") else "cpu"))
        return weights or 0

    # ---- runs --------------------------------------------------------------------------------------

    def worker_for(self, device: str) -> WorkerHandle | None:
        return self.workers.get(device) or (next(iter(self.workers.values()), None) if len(self.workers) == 1
                                            else None)

    def submit(self, device: str, run_id: str, spec: dict, faults: dict | None, sink: RunSink,
               wait_s: float = 0.0, trace_id: str | None = None) -> None:
        """Hand the run to the device's worker, waiting up to wait_s for one being (re)started."""
        deadline = time.perf_counter() + wait_s
        while True:
            worker = self.worker_for(device)
            if worker is not None and worker.state == "ready":
                worker.submit(run_id, spec, faults, sink, trace_id)
                return
            if time.perf_counter() >= deadline:
                state = worker.state if worker is not None else "missing"
                sink.died(f"no worker is ready on {device} ({state})")
                return
            time.sleep(0.05)

    def cancel(self, device: str, run_id: str, reason: str) -> None:
        worker = self.worker_for(device)
        if worker is not None:
            worker.cancel(run_id, reason)

    def kill(self, device: str, reason: str, cause: str) -> None:
        """A worker that does not stop when told: killed (its run fails with the cause) and started again."""
        worker = self.worker_for(device)
        if worker is not None and worker.alive:
            worker.kill(Death(reason, cause))

    # ---- supervision -------------------------------------------------------------------------------

    def _spawn(self, device: str) -> WorkerHandle:
        name = "worker" if device in ("cpu", "auto") else f"worker-{device.replace(':', '')}"
        worker = WorkerHandle(name, device, self.settings, on_death=self._died)
        with self._lock:
            self.workers[device] = worker
            self.load_errors.pop(device, None)
        worker.start()
        threading.Thread(target=self._warm, args=(worker,), name=f"benchd-warm-{name}", daemon=True).start()
        return worker

    def _warm(self, worker: WorkerHandle) -> None:
        if not worker.ready.wait(self.settings.start_timeout_s) or worker.state != "ready":
            return
        self.watch(worker.name, worker.pid)
        if self.model is None:
            self.load_errors[worker.device] = None
            return
        ref, dtype, _ = self.model
        error, _ = worker.warm(ref, dtype, worker.device, self.settings.load_timeout_s)
        if error:
            log.error("%s could not load the daemon's model %s: %s", worker.name, ref, error)
        self.load_errors[worker.device] = error

    def _died(self, worker: WorkerHandle, death: Death) -> None:
        """On the dead worker's thread: count it, and start another in its place (unless the pool is closing)."""
        if self._closing:
            return
        self.restarts += 1
        self.on_restart(death.reason)
        started = time.perf_counter()
        replacement = self._spawn(worker.device)

        def timed() -> None:
            if replacement.ready.wait(self.settings.start_timeout_s):
                self.last_restart_s = time.perf_counter() - started

        threading.Thread(target=timed, daemon=True).start()
