"""The daemon's worker processes, one per device slot (hardware/devices.py), or one per tensor-parallel group while runs
need groups: started, kept warm with the daemon's model, and started again whenever one dies, so a fault fails one
run and the next run finds a worker ready."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from benchd.hardware.devices import Slot, pick, targets
from benchd.hardware.speed import DeviceSpeed
from benchd.models.memory import MEMORY_FRACTION, dtype_bytes, model_shape_and_weights
from benchd.supervisor.environments import CURRENT, EnvironmentProblem, Environments
from benchd.supervisor.handle import Deadline, Death, RunSink, WorkerHandle
from benchd.supervisor.settings import WorkerSettings

log = logging.getLogger("benchd.workers")


class RunPool(Protocol):
    """What a run takes of a pool (daemon/lifecycle.py): the daemon's workers (WorkerPool, below), or one core in the
    caller's process (daemon/inprocess.py, LocalPool)."""

    environments: Environments
    settings: WorkerSettings

    def arrange(self, device: str, placement: str = "one", tensor_parallel: int = 1,
                environment: str = CURRENT) -> list[Slot]: ...

    def submit(self, device: str, run_id: str, spec: dict, faults: dict | None, sink: RunSink,
               environment: str = CURRENT, wait_s: float = 0.0, trace_id: str | None = None,
               confine: dict | None = None, deadline: Deadline | None = None,
               beat: Callable[[], None] = lambda: None) -> None: ...

    def cancel(self, device: str, run_id: str, reason: str) -> None: ...

    def kill(self, device: str, reason: str, cause: str) -> None: ...


class WorkerPool:
    def __init__(self, slots: list[Slot], settings: WorkerSettings, model: tuple[str, str] | None = None,
                 on_restart: Callable[[str], None] = lambda reason: None,
                 watch: Callable[[str, int], None] = lambda name, pid: None,
                 memory_fraction: float = MEMORY_FRACTION, environments: Environments | None = None) -> None:
        """slots: the devices, a worker each unless a tensor-parallel group holds them; model: (ref, dtype) loaded
        in each at start; memory_fraction: what a run may plan to use of its device (BENCHD_LIMITS__…);
        environments: the Python environments a run may name (supervisor/environments.py): a device's worker runs
        in the environment of the run it last took, the daemon's own until then."""
        self.slots, self.settings, self.model = slots, settings, model
        self.environments = environments if environments is not None else Environments()
        # by slot key: (environment, why its worker could not start there), the latest, for the run that needed it
        self.failures: dict[str, tuple[str, str]] = {}
        self.memory_fraction = memory_fraction
        self.on_restart, self.watch = on_restart, watch
        self.workers: dict[str, WorkerHandle] = {}  # by slot key
        self.load_errors: dict[str, str | None] = {}  # by slot key: why the daemon's model did not load
        self.restarts = 0
        self.last_restart_s: float | None = None  # death → a new worker ready, the latest
        # Each device's speed (benchd.hardware.speed) as its first worker measured it: kept, and handed to the workers
        # that replace it, so that a device is measured once.
        self.speeds: dict[str, DeviceSpeed] = {}
        self._lock = threading.Lock()
        self._closing = False

    def start(self) -> None:
        for slot in self.slots:
            self._spawn(slot)

    def stop(self, timeout_s: float = 30.0) -> None:
        self._closing = True
        self.environments.stop()  # a build in progress ends with the daemon
        for worker in list(self.workers.values()):
            worker.stop(timeout_s)

    # ---- state -------------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Every device has a worker (its own or its group's) that answers and has tried the daemon's model."""
        workers = list(self.workers.values())
        covered = {device for w in workers for device in w.slot.devices}
        return covered >= {s.key for s in self.slots} and all(
            w.state == "ready" and w.slot.key in self.load_errors for w in workers)

    def load_error(self) -> str | None:
        errors = [f"{key}: {error}" for key, error in self.load_errors.items() if error]
        return "; ".join(errors) or None

    def describe(self) -> list[dict[str, Any]]:
        return [{"name": w.name, "device": w.slot.key, "gpu": w.slot.gpu, "state": w.state, "pid": w.pid,
                 "environment": w.environment, "protocol": w.hello.protocol if w.hello else None,
                 "python_version": w.hello.python_version if w.hello else None,
                 "torch_version": w.hello.torch_version if w.hello else None,
                 "transformers_version": w.hello.transformers_version if w.hello else None,
                 "cuda_version": w.hello.cuda_version if w.hello else None,
                 "busy": w.busy, "nice": w.hello.nice if w.hello else None,
                 "dispatch_priority": w.hello.dispatch_priority if w.hello else None,
                 "load_error": self.load_errors.get(w.slot.key),
                 "speed": w.speed.as_dict() if w.speed else None}
                for w in self.workers.values()]

    def speed(self, slot: Slot | str) -> DeviceSpeed | None:
        """The device's speed (a group's: its first member's), as measured by its worker; None before its hello."""
        keys = slot.devices if isinstance(slot, Slot) else tuple(slot.split("+"))
        if known := next((self.speeds[key] for key in keys if key in self.speeds), None):
            return known
        return next((w.speed for w in list(self.workers.values()) if set(keys) & set(w.slot.devices) and w.speed),
                    None)

    def held_bytes(self, device: str) -> int:
        """What benchd holds on this device and releases before another model loads: on a GPU, what its worker's
        allocator reports (the model and its warm engine's KV cache, which transformers sizes to most of the free
        memory); otherwise the daemon's model, estimated. A group's rank holds its share."""
        slot = pick(self.slots, device)
        if slot is None:
            return 0
        holder = next((w for w in list(self.workers.values()) if slot.key in w.slot.devices), None)
        if holder is not None and holder.held_bytes:
            return holder.held_bytes  # rank 0's: every rank holds as much
        if self.model is None:
            return 0
        ref, dtype = self.model
        _, weights = model_shape_and_weights(ref, dtype_bytes(dtype, slot.local))
        return (weights or 0) // (holder.slot.size if holder is not None else 1)

    # ---- runs --------------------------------------------------------------------------------------

    def arrange(self, device: str, placement: str = "one", tensor_parallel: int = 1,
                environment: str = CURRENT) -> list[Slot]:
        """The slots a run takes, each with a worker in the run's environment: a tensor-parallel group's worker
        replaces the single workers on its devices (both cannot hold the GPUs), and single workers come back once a
        run needs them or a group's devices again; a worker of another environment replaces the device's (one
        device, one model in memory: a matrix over environments starts a worker each run). An environment that
        cannot start (a build that failed) leaves the device's worker, and the run fails at submit with why.
        Between runs: the run loop runs one at a time."""
        chosen = targets(self.slots, device, placement, tensor_parallel)
        taken = {d for slot in chosen for d in slot.devices}
        for worker in list(self.workers.values()):
            if (worker.slot not in chosen and taken & set(worker.slot.devices)) or (
                    worker.slot in chosen and worker.environment != environment and self._startable(worker.slot,
                                                                                                   environment)):
                self._retire(worker)
        covered = {d for w in self.workers.values() for d in w.slot.devices}
        for slot in [*chosen, *(s for s in self.slots if s.key not in taken)]:
            if not covered & set(slot.devices):
                self._spawn(slot, environment if slot in chosen and self._startable(slot, environment) else CURRENT)
                covered |= set(slot.devices)
        return chosen

    def _startable(self, slot: Slot, environment: str) -> bool:
        """Whether the environment has an interpreter (built now if it must be); if not, why is kept for the run."""
        try:
            self.environments.interpreter(environment)
        except EnvironmentProblem as problem:
            log.error("%s", problem)
            self.failures[slot.key] = (environment, str(problem))
            return False
        return True

    def measured(self, device: str, placement: str = "one", tensor_parallel: int = 1) -> list[tuple[Slot, Any]]:
        """The slots a run takes, their workers started, each with its device's speed once its worker said hello
        (None: it did not start)."""
        found = []
        for slot in self.arrange(device, placement, tensor_parallel):
            if (worker := self.workers.get(slot.key)) is not None:
                worker.ready.wait(self.settings.start_timeout_s)
            found.append((slot, self.speed(slot)))
        return found

    def worker_for(self, device: str) -> WorkerHandle | None:
        """By slot key (a group's too), or as a spec names a device (auto, cuda)."""
        if (worker := self.workers.get(device)) is not None:
            return worker
        slot = pick(self.slots, device)
        return self.workers.get(slot.key) if slot is not None else None

    def submit(self, device: str, run_id: str, spec: dict, faults: dict | None, sink: RunSink,
               environment: str = CURRENT, wait_s: float = 0.0, trace_id: str | None = None,
               confine: dict | None = None, deadline: Deadline | None = None,
               beat: Callable[[], None] = lambda: None) -> None:
        """Hand the run to the device's worker (which names its device its own way: cpu, or cuda for its only
        visible GPU), waiting up to wait_s for one being (re)started; a worker of another environment than the
        run's (its own did not start: arrange) fails the run with why. environment: the run's (RunSpec's
        worker_environment). confine, deadline: WorkerHandle.submit's; beat(): called as it waits (the caller's
        loop moves)."""
        waited_until = time.perf_counter() + wait_s
        while True:
            beat()
            worker = self.worker_for(device)
            if worker is not None and worker.environment != environment:
                failure = self.failures.get(worker.slot.key)
                sink.died(failure[1] if failure is not None and failure[0] == environment else
                          f"no worker in environment {environment!r} on {device} (its is {worker.environment!r})")
                return
            if worker is not None and worker.state == "ready":
                worker.submit(run_id, {**spec, "device": worker.slot.local}, faults, sink, trace_id, confine, deadline)
                return
            if time.perf_counter() >= waited_until:
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

    def _spawn(self, slot: Slot, environment: str = CURRENT) -> WorkerHandle:
        worker = WorkerHandle(slot, self.settings, on_death=self._died, memory_fraction=self.memory_fraction,
                              speed=self.speed(slot), interpreter=self.environments.interpreter(environment))
        with self._lock:
            self.workers[slot.key] = worker
            self.load_errors.pop(slot.key, None)
        worker.start()
        threading.Thread(target=self._warm, args=(worker,), name=f"benchd-warm-{slot.name}", daemon=True).start()
        return worker

    def _retire(self, worker: WorkerHandle) -> None:
        with self._lock:
            self.workers.pop(worker.slot.key, None)
            self.load_errors.pop(worker.slot.key, None)
        log.info("%s stops: a run needs its devices in another arrangement", worker.name)
        worker.stop()

    def _warm(self, worker: WorkerHandle) -> None:
        if not worker.ready.wait(self.settings.start_timeout_s) or worker.state != "ready":
            return
        if worker.speed is not None:
            for key in worker.slot.devices:
                self.speeds.setdefault(key, worker.speed)
        assert worker.pid is not None  # a ready worker was started (supervisor/handle.py, WorkerHandle.start)
        self.watch(worker.name, worker.pid)
        if self.model is None:
            self.load_errors[worker.slot.key] = None
            return
        ref, dtype = self.model
        error, _ = worker.warm(ref, dtype, worker.slot.local, self.settings.load_timeout_s)
        if error:
            log.error("%s could not load the daemon's model %s: %s", worker.name, ref, error)
        self.load_errors[worker.slot.key] = error

    def _died(self, worker: WorkerHandle, death: Death) -> None:
        """On the dead worker's thread: count it, and start another in its place (unless the pool is closing)."""
        if self._closing or self.workers.get(worker.slot.key) is not worker:  # stopping, or retired
            return
        self.restarts += 1
        self.on_restart(death.reason)
        started = time.perf_counter()
        environment = worker.environment
        if worker.hello is None and environment != CURRENT:  # it never started there: the daemon's own takes over
            self.failures[worker.slot.key] = (environment, f"the worker in environment {environment!r} did not "
                                                           f"start: {death.cause}")
            environment = CURRENT
        elif environment != CURRENT and not self._startable(worker.slot, environment):  # its venv went away
            environment = CURRENT
        replacement = self._spawn(worker.slot, environment)

        def timed() -> None:
            if replacement.ready.wait(self.settings.start_timeout_s):
                self.last_restart_s = time.perf_counter() - started

        threading.Thread(target=timed, daemon=True).start()
