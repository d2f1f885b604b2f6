"""A run in this process: a worker's core behind the pool's interface, run through the daemon's lifecycle (the same
core, messages and batches without a process boundary). The daemon and `benchd run` always use worker processes
(supervisor/pool.py); this is for the scripts of bench/ that measure the engine in-process (dispatch lag, telemetry's
cost) and for tests. torch loads when a pool is made, not with this module."""

from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING, Any

from benchd.daemon.lifecycle import Lifecycle
from benchd.hardware.devices import Slot
from benchd.loadgen import priority
from benchd.protocol.messages import BATCH_S, Done, Events, Report
from benchd.stopping import StopSignal
from benchd.supervisor.environments import CURRENT, Environments
from benchd.supervisor.handle import Deadline, RunSink
from benchd.supervisor.settings import WorkerSettings
from benchd.telemetry.run import Telemetry

if TYPE_CHECKING:
    from benchd.models.loading import LoadedModel


class LocalPool:
    def __init__(self, loaded: LoadedModel | None = None, settings: WorkerSettings | None = None) -> None:
        """loaded: a model the core uses for runs that name it (its ref, dtype and device), as if warmed."""
        from benchd.worker.core import WorkerCore  # torch loads here

        self.settings = settings or WorkerSettings()
        self.slots = [Slot("cpu", "cpu", "")]
        self.environments = Environments()  # this process's own only: a run of another fails at submit
        self._sink: RunSink | None = None
        self._lock = threading.Lock()
        self.core = WorkerCore(self._emit, loader=self._load,
                               dispatch_priority=priority.allowed(self.settings.dispatch_priority))
        self._given = loaded
        self._closing = threading.Event()
        threading.Thread(target=self._pulse, name="benchd-local-pulse", daemon=True).start()

    def _load(self, ref: str, dtype: str, device: str, seed: int = 0, **kwargs: Any) -> LoadedModel:
        given = self._given
        if (given is not None and given.ref == ref and given.quantization == kwargs.get("quantization", "none")
                and given.model.config._attn_implementation == kwargs.get("attn_implementation", "sdpa")):
            return given
        from benchd.models.loading import load_model

        return load_model(ref, dtype, device, seed, **kwargs)

    def _emit(self, message: Report) -> None:
        """The core's reports as they are made (no encoding: the same records a worker process's pipe decodes)."""
        sink = self._sink
        if sink is None:
            return
        if isinstance(message, Events):
            sink.events(message.events)
        elif isinstance(message, Done):
            self._sink = None
            sink.done(message.status, message.error, message.error_stage, message.metadata)

    def _pulse(self) -> None:
        while not self._closing.wait(BATCH_S):
            self.core.flush()

    def arrange(self, device: str, placement: str = "one", tensor_parallel: int = 1,
                environment: str = CURRENT) -> list[Slot]:
        """One core in this process, in its Python environment: every run takes it."""
        return self.slots

    def submit(self, device: str, run_id: str, spec: dict, faults: dict | None, sink: RunSink,
               environment: str = CURRENT, wait_s: float = 0.0, trace_id: str | None = None,
               confine: dict | None = None, deadline: Deadline | None = None, beat=lambda: None) -> None:
        """deadline: not kept (nothing here can end a call in progress: the process is the caller's); nothing is
        waited for (beat)."""
        if environment != CURRENT:
            sink.died(f"environment {environment!r}: a run in this process runs in its own environment only")
            return
        self._sink = sink
        threading.Thread(target=self.core.run, args=(run_id, spec, faults, trace_id, confine),
                         name="benchd-local-run", daemon=True).start()

    def speed(self, slot) -> None:
        return None  # not measured in the caller's process

    def cancel(self, device: str, run_id: str, reason: str) -> None:
        self.core.cancel(run_id, reason)

    def kill(self, device: str, reason: str, cause: str) -> None:
        sink, self._sink = self._sink, None
        if sink is not None:
            sink.died(cause)

    def stop(self) -> None:
        self._closing.set()
        self.core.close()


def run_local(spec, loaded: LoadedModel | None = None, telemetry=None, hardware=None, stop=None, on_progress=None,
              run_id: str | None = None, faults: dict | None = None, pool: LocalPool | None = None):
    """Run a spec in this process through the daemon's lifecycle (records, summaries, telemetry, hardware) and
    return its RunResult. pool: the caller's, kept (its engine stays warm for the next run, as a worker's does);
    else one for this run, stopped after it."""
    own = pool is None
    pool = LocalPool(loaded) if pool is None else pool
    try:
        lifecycle = Lifecycle(pool, telemetry or Telemetry(), hardware, faults=faults)
        return lifecycle.execute(run_id or uuid.uuid4().hex, spec, spec.device, stop or StopSignal(), on_progress)
    finally:
        if own:
            pool.stop()
