"""One worker process as the daemon sees it: spawned, fed commands, heard from, and watched: its exit code or
signal, its heartbeats, and the progress of the run it holds. A worker that dies or stops answering ends its run
with the cause, and the pool starts another."""

from __future__ import annotations

import json
import logging
import multiprocessing
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from benchd.hardware.devices import Slot
from benchd.hardware.speed import DeviceSpeed
from benchd.models.memory import MEMORY_FRACTION
from benchd.protocol.codec import ProtocolError, decode_report, encode, stated_protocol
from benchd.protocol.events import AnyEvent
from benchd.protocol.messages import (
    EXIT_DEVICE_FAULT,
    PROTOCOL_VERSION,
    Cancel,
    Command,
    Done,
    Events,
    Exiting,
    Heartbeat,
    Hello,
    Report,
    Run,
    Stop,
    Warm,
    Warmed,
)
from benchd.protocol.metadata import RunMetadata
from benchd.supervisor import orphans, paths
from benchd.supervisor.builds import public
from benchd.supervisor.environments import CURRENT_INTERPRETER, ForeignProcess, Interpreter
from benchd.supervisor.settings import SPEED_CACHE, WorkerSettings
from benchd.worker import entry

log = logging.getLogger("benchd.workers")

LOG_TAIL_LINES = 20
Deadline = Callable[[DeviceSpeed | None], tuple[float, str] | None]


class RunSink(Protocol):
    """Where a run's messages go, on the handle's thread."""

    def events(self, batch: list[AnyEvent]) -> None: ...

    def done(self, status: str, error: str | None, error_stage: str | None, metadata: RunMetadata | None) -> None: ...

    def died(self, cause: str) -> None: ...


@dataclass(slots=True)
class Death:
    reason: str  # exit | signal | oom | no_heartbeat | no_progress | deadline | start | device_error | protocol
    cause: str  # one line for the run's error, then the worker's last log lines


def oom_kills() -> int | None:
    """The cgroup's OOM-kill count (cgroup v2, else v1): compared before and after a worker died."""
    for path, key in (("/sys/fs/cgroup/memory.events", "oom_kill"),
                      ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill")):
        try:
            for line in Path(path).read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
        except (OSError, ValueError):
            continue
    return None


class WorkerHandle:
    def __init__(self, slot: Slot, settings: WorkerSettings, on_death=lambda handle, death: None,
                 memory_fraction: float = MEMORY_FRACTION, speed: DeviceSpeed | None = None,
                 interpreter: Interpreter = CURRENT_INTERPRETER) -> None:
        """memory_fraction: of its device's available memory, what a run may plan to use
        (BENCHD_LIMITS__MEMORY_FRACTION, which admission checks runs against); speed: the device's, measured by a
        worker before this one (this one then measures nothing); interpreter: the Python environment it runs in
        (supervisor/environments.py)."""
        self.slot, self.settings, self.on_death = slot, settings, on_death
        self.interpreter, self.environment = interpreter, interpreter.environment
        self.memory_fraction, self.known_speed = memory_fraction, speed
        self.name, self.log_path = slot.name, settings.log_dir / f"{slot.name}.log"
        self.state = "new"  # new | starting | ready | dead | stopped
        self.pid: int | None = None
        self.hello: Hello | None = None  # what it said as it started
        self.death: Death | None = None
        self.started_at = 0.0
        self.ready = threading.Event()
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn = None
        self._send_lock = threading.Lock()
        self._run: tuple[str, RunSink] | None = None
        self._warm: Warmed | None = None
        self._warmed = threading.Event()
        self._heartbeat = self._progress = 0.0
        self.held_bytes = 0  # GPU memory its allocator holds, from its heartbeats
        self._activity = -1
        self._phase = "idle"
        self._phase_since = 0.0  # when its heartbeats first said its current phase
        self._deadline: tuple[float, str] | None = None  # the run's: (seconds into its "run" phase, the cause)
        self._oom_before: int | None = None
        self._thread: threading.Thread | None = None
        self._stopping = self._stop_watching = False  # the latter: killed from outside, kill() ends it, not the watch
        self._end_lock = threading.Lock()
        self._pid_file: Path | None = None
        self._log_from = 0  # where this process's lines start in its log

    # ---- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Spawn (never fork: the daemon has threads, and a worker may hold CUDA); returns at once."""
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self.settings.log_dir.mkdir(parents=True, exist_ok=True)
        orphans.reap(self.settings.log_dir)  # a killed daemon's workers still holding a device
        try:  # this process's lines start after its header: an earlier worker's are not its cause
            with self.log_path.open("a") as f:
                f.write(f"---- {self.name} starting on {self.slot.key} in environment {self.environment} at "
                        f"{time.strftime('%Y-%m-%dT%H:%M:%S')}\n")
                self._log_from = f.tell()
        except OSError as error:  # a full or failing disk: the worker starts all the same, its log says less
            log.warning("%s: its log takes no writes (%s)", self.name, error.strerror)
        env = {**self.slot.env, "BENCHD_WORKER_NICE": str(self.settings.nice),
               "BENCHD_WORKER_DISPATCH_PRIORITY": str(self.settings.dispatch_priority),
               "BENCHD_WORKER_MEMORY_FRACTION": str(self.memory_fraction),
               "BENCHD_WORKER_SPEED_CACHE": str(self.settings.log_dir / SPEED_CACHE)}
        if self.known_speed is not None:
            env["BENCHD_WORKER_SPEED"] = json.dumps(self.known_speed.as_dict())
        if self.interpreter.python is None:
            self._process = context.Process(target=entry.main, args=(child, self.slot.key, str(self.log_path), env),
                                            name=f"benchd-{self.name}", daemon=True)
        else:  # another environment's interpreter, on a socket pair of its own
            child.close()
            self._conn.close()
            self._process = ForeignProcess(self.interpreter, self.slot.key, str(self.log_path), env)
        self._oom_before = oom_kills()
        self.state, self.started_at = "starting", time.perf_counter()
        self._heartbeat = self._progress = self.started_at
        if isinstance(self._process, ForeignProcess):
            try:
                self._conn = self._process.start()
            except OSError as error:  # no interpreter to execute, an import path not private: its death, as a crash
                self._conn = None
                log.error("%s could not start (%s): %s", self.name, self.interpreter.python, error)
                self._end(Death("start", f"the worker could not start in environment {self.environment!r}: "
                                         f"{public(str(error))}"))
                return
        else:
            with paths.safe_path():  # never the working directory first on its path
                self._process.start()
            child.close()
        self.pid = self._process.pid
        self._pid_file = orphans.record(self.settings.log_dir, self.name, self.pid)
        self._thread = threading.Thread(target=self._watch, name=f"benchd-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Ask the worker to finish (its run ends interrupted with what it measured), then make sure it is gone."""
        if self._process is None:
            return
        self._send(Stop())
        self._stopping = True
        self._process.join(timeout_s)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(5)
        self.state = "stopped"
        orphans.forget(self._pid_file)
        if self._thread is not None:
            self._thread.join(5)

    @property
    def alive(self) -> bool:
        return self.state in ("starting", "ready")

    @property
    def busy(self) -> bool:
        return self._run is not None

    @property
    def speed(self) -> DeviceSpeed | None:
        """Its device's speed, as it said in its hello (benchd.hardware.speed)."""
        return self.hello.speed if self.hello is not None else None

    # ---- commands ----------------------------------------------------------------------------------

    def warm(self, model: str, dtype: str, device: str, timeout_s: float) -> tuple[str | None, float | None]:
        """Load a model ahead of runs; (error, load seconds)."""
        self._warmed.clear()
        self._warm = None
        self._send(Warm(model, dtype, device))
        if not self._warmed.wait(timeout_s) or self._warm is None:
            return (self.death.cause if self.death else f"no answer within {timeout_s:g} s"), None
        return self._warm.error, self._warm.load_s

    def submit(self, run_id: str, spec: dict, faults: dict | None, sink: RunSink, trace_id: str | None = None,
               confine: dict | None = None, deadline: Deadline | None = None) -> None:
        """confine: the paths the worker re-checks against the roots as it loads (benchd.models.confinement); deadline:
        from its device's speed, how long the run may be in its "run" phase and the cause it ends with after that
        (killed: a call in progress cannot be interrupted otherwise), or None."""
        self._run, self._deadline = (run_id, sink), deadline(self.speed) if deadline is not None else None
        self._progress = self._phase_since = time.perf_counter()
        self._phase = "submitted"  # its next heartbeat's phase is this run's
        if not self._send(Run(run_id, spec, faults, trace_id, confine)):
            self._run = None
            sink.died(self.death.cause if self.death else "the worker is not running")

    def cancel(self, run_id: str, reason: str) -> None:
        self._send(Cancel(run_id, reason))

    def _send(self, message: Command) -> bool:
        data = encode(message)
        with self._send_lock:
            if self._conn is None or not self.alive:
                return False
            try:
                self._conn.send_bytes(data)
                return True
            except (OSError, ValueError):
                return False

    # ---- watching ----------------------------------------------------------------------------------

    def _watch(self) -> None:
        conn = self._conn
        while self.state in ("starting", "ready", "exiting") and not self._stopping and not self._stop_watching:
            try:
                if conn.poll(0.25):
                    data = conn.recv_bytes()
                    self._receive(decode_report(data))
            except (EOFError, OSError):
                self._died()
                return
            except ProtocolError as error:  # a worker fault (another version, a corrupted pipe): it is replaced
                stated = stated_protocol(data) if self.state == "starting" else None
                self._kill(Death("protocol", _mismatch(stated, self.environment) if stated is not None
                                 else f"the worker sent what the daemon cannot read: {error}"))
                return
            if (death := self._silence(time.perf_counter())) is not None:  # checked whatever arrives
                self._kill(death)
                return
            if not self._process.is_alive():
                self._drain(conn)  # what it sent before it ended (its last events, a "done") counts
                self._died()
                return

    def _drain(self, conn) -> None:
        try:
            while conn.poll(0):
                self._receive(decode_report(conn.recv_bytes()))
        except (EOFError, OSError, ProtocolError):  # it is gone: what it left that cannot be read is dropped
            pass

    def _receive(self, message: Report) -> None:
        now = time.perf_counter()
        match message:
            case Heartbeat():
                self._heartbeat, self.held_bytes = now, message.held_bytes
                if message.phase != self._phase:
                    self._phase_since = now
                if message.activity != self._activity or message.phase != self._phase:
                    self._activity, self._phase, self._progress = message.activity, message.phase, now
            case Events():
                if self._run is not None and self._run[0] == message.run_id:
                    self._run[1].events(message.events)
            case Done():
                run, self._run = self._run, None
                if run is not None and run[0] == message.run_id:
                    run[1].done(message.status, message.error, message.error_stage, message.metadata)
            case Exiting():
                self.state = "exiting"  # no run is handed to it; its exit brings a replacement
            case Warmed():
                self._warm = message
                self._warmed.set()
            case Hello():
                if message.protocol != PROTOCOL_VERSION:
                    self._kill(Death("protocol", _mismatch(message.protocol, self.environment)))
                    return
                self.pid, self.hello = message.pid, message
                self.state, self._heartbeat = "ready", now
                self.ready.set()

    def _silence(self, now: float) -> Death | None:
        s = self.settings
        if self.state == "starting":
            if now - self.started_at > s.start_timeout_s:
                return Death("start", f"the worker did not start within {s.start_timeout_s:g} s")
            return None
        if now - self._heartbeat > s.heartbeat_timeout_s:
            return Death("no_heartbeat", f"the worker stopped answering: no heartbeat for "
                                         f"{now - self._heartbeat:.0f} s (a call that never returns)")
        if self._run is not None and self._deadline is not None and self._phase == "run":
            limit_s, cause = self._deadline
            if now - self._phase_since > limit_s:
                return Death("deadline", cause)
        if self._run is not None:
            limit = s.load_timeout_s if self._phase in ("load", "start") else s.progress_timeout_s
            if now - self._progress > limit:
                return Death("no_progress", f"the run made no progress for {now - self._progress:.0f} s while "
                                            f"{self._phase!r} (hung)")
        return None

    def kill(self, death: Death) -> None:
        """Kill it now (it hangs): its run fails with the cause; the pool starts another."""
        self._stop_watching = True
        self._kill(death)

    def _kill(self, death: Death) -> None:
        self._process.kill()
        self._process.join(10)
        self._end(Death(death.reason, death.cause + self._log_tail()))

    def _died(self) -> None:
        self._process.join(10)
        code = self._process.exitcode
        oom = self._oom_before is not None and (after := oom_kills()) is not None and after > self._oom_before
        if oom:
            death = Death("oom", "the kernel's OOM killer killed the worker (out of host memory)")
        elif code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            death = Death("signal", f"the worker was killed by {name}")
        elif code == EXIT_DEVICE_FAULT:
            death = Death("device_error", "a run left the worker's device unusable (a CUDA device-side assert or "
                                          "illegal address): a new worker gets a new CUDA context")
        else:
            death = Death("exit", f"the worker exited with code {code}")
        self._end(Death(death.reason, death.cause + self._log_tail()))

    def _end(self, death: Death) -> None:
        orphans.forget(self._pid_file)
        with self._end_lock:  # the watch thread and kill() may both see the end: it is handled once
            if self.state in ("dead", "stopped"):
                return
            if self._stopping:  # asked to stop: the exit is expected
                self.state = "stopped"
                return
            self.state, self.death = "dead", death
        log.error("%s (pid %s) died: %s", self.name, self.pid, death.cause)
        self._warmed.set()
        run, self._run = self._run, None
        if run is not None:
            run[1].died(death.cause)
        self.on_death(self, death)

    def _log_tail(self) -> str:
        try:
            with self.log_path.open(errors="replace") as f:
                f.seek(self._log_from)
                lines = deque(f, maxlen=LOG_TAIL_LINES)
        except OSError:
            return ""
        tail = "".join(lines).rstrip()
        return f"\nthe worker's last log lines:\n{tail}" if tail else ""


def _mismatch(stated: object, environment: str) -> str:
    return (f"the worker in environment {environment!r} speaks benchd protocol {stated}, this daemon protocol "
            f"{PROTOCOL_VERSION}: its benchd is another version (refused at hello)")

