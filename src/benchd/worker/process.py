"""The worker process's service: it owns torch and the device and runs one spec at a time; three threads move
messages: commands in, events and heartbeats out, runs on the main thread."""

from __future__ import annotations

import json
import os
import platform
import queue
import signal
import sys
import threading
import time
from importlib import metadata
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from benchd.hardware.speed import DeviceSpeed, measure
from benchd.loadgen import priority
from benchd.protocol.codec import ProtocolError, decode_command, encode
from benchd.protocol.messages import (
    BATCH_S,
    EXIT_DEVICE_FAULT,
    HEARTBEAT_S,
    PROTOCOL_VERSION,
    Cancel,
    Command,
    Heartbeat,
    Hello,
    Report,
    Run,
    Stop,
    Warm,
)

ORPHAN_GRACE_S = 10.0  # the daemon is gone: what runs has this long to stop before the process ends anyway


def _speed(device: str) -> DeviceSpeed | None:
    """The device's speed (benchd.hardware.speed): as an earlier worker on it measured it, or measured now."""
    if known := os.environ.get("BENCHD_WORKER_SPEED"):
        return DeviceSpeed.of(json.loads(known))
    # A GPU's figures are kept per model and driver in the workers' directory, measured once; a CPU's each daemon's
    # life (a neighbour's load would otherwise stay in them).
    cache = os.environ.get("BENCHD_WORKER_SPEED_CACHE")
    try:
        if device.startswith("cuda"):
            return measure("cuda", Path(cache) if cache else None)
        return measure("cpu")
    except RuntimeError as error:  # the device cannot run the probe: no figure (timed runs cannot be admitted)
        print(f"benchd: measuring the device's speed failed: {error}", file=sys.stderr, flush=True)
        return None


def exit_now(code: int) -> None:
    """End the process now that its serving loop has: an engine's threads (transformers' generation thread is not a
    daemon thread) would otherwise keep it alive, holding its model and its device's memory, after a daemon killed
    by SIGKILL or the OOM killer, and a restarted daemon's new worker would size its cache from what is left."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def serve(conn: Connection, device: str, group: Any = None) -> None:
    """The daemon's side of a worker: commands in, events and heartbeats out, runs on this thread. group: a
    tensor-parallel group this process is rank 0 of (worker/parallel.py), told what to load and start."""
    Service(conn, device, group).serve()


class Service:
    """One worker's three threads: commands read (a cancel acts at once), events and heartbeats sent every BATCH_S,
    and runs on the main thread, one at a time."""

    def __init__(self, conn: Connection, device: str, group: Any = None) -> None:
        from benchd.worker.core import WorkerCore  # torch loads here, in the worker only

        self.conn, self.device = conn, device
        self._lock = threading.Lock()
        self.dispatch_priority = priority.allowed(int(os.environ.get("BENCHD_WORKER_DISPATCH_PRIORITY", "0")))
        self.core = WorkerCore(self.send, device, group=group, dispatch_priority=self.dispatch_priority)
        self.commands: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self.closing = threading.Event()

    def send(self, message: Report) -> None:
        try:
            data = encode(message)
        except ProtocolError as error:  # on any of its threads: the worker's fault, said in its log as it exits
            print(f"benchd: the worker made a message it cannot send: {error}", file=sys.stderr, flush=True)
            exit_now(1)
        with self._lock:
            self.conn.send_bytes(data)

    def serve(self) -> None:
        signal.signal(signal.SIGTERM, self._terminate)
        self._hello()
        threading.Thread(target=self._receive, name="benchd-worker-commands", daemon=True).start()
        threading.Thread(target=self._pulse, name="benchd-worker-pulse", daemon=True).start()
        while True:
            command = self.commands.get()
            if isinstance(command, Run):
                self.core.run(command.run_id, command.spec, command.faults, command.trace_id, command.confine)
                if self.core.broken:  # its Done is sent: a new process gets a working device
                    print(f"benchd: the device is unusable after this run ({self.core.broken}); the worker exits",
                          file=sys.stderr, flush=True)
                    os._exit(EXIT_DEVICE_FAULT)
            elif isinstance(command, Warm):
                self.core.warm(command.model, command.dtype, command.device)
            elif isinstance(command, Stop):
                break
        self.core.close()
        self.conn.close()

    def _hello(self) -> None:
        """Pinned to its cores (a CPU worker beside others), then its versions, priority and device's speed."""
        import torch

        if cpus := os.environ.get("BENCHD_WORKER_CPUS"):
            cores = {int(c) for c in cpus.split(",")}
            os.sched_setaffinity(0, cores)
            torch.set_num_threads(len(cores))
        speed = self.core.speed = _speed(self.device)
        self.send(Hello(PROTOCOL_VERSION, os.getpid(), python_version=platform.python_version(),
                        torch_version=str(torch.__version__), transformers_version=metadata.version("transformers"),
                        cuda_version=torch.version.cuda, device=self.device,
                        cuda_devices=torch.cuda.device_count(), nice=os.getpriority(os.PRIO_PROCESS, 0),
                        dispatch_priority=self.dispatch_priority, speed=speed))

    def _receive(self) -> None:
        """Cancels act at once, on the run in progress; the rest waits its turn on the main thread."""
        while True:
            try:
                command = decode_command(self.conn.recv_bytes())
            except (EOFError, OSError):  # the daemon is gone: stop what runs, and exit (a hung run: after a grace)
                command = Stop()
                orphaned = threading.Timer(ORPHAN_GRACE_S, exit_now, args=(0,))
                orphaned.daemon = True
                orphaned.start()
            except ProtocolError as error:  # a daemon of another version: nothing it says can be trusted
                print(f"benchd: the daemon sent what this worker cannot read: {error}", file=sys.stderr, flush=True)
                exit_now(1)
            if isinstance(command, Cancel):
                self.core.cancel(command.run_id, command.reason)
                continue
            if isinstance(command, Stop):
                self.closing.set()
                self.core.interrupt()
            self.commands.put(command)
            if isinstance(command, Stop):
                return

    def _pulse(self) -> None:
        import torch

        next_beat = 0.0
        while not self.closing.is_set():
            self.core.flush()
            now = time.perf_counter()
            if now >= next_beat:
                held = torch.cuda.memory_reserved() if torch.cuda.is_initialized() else 0  # no sync, no init
                self.send(Heartbeat(now, self.core.activity, self.core.phase, held_bytes=held))
                next_beat = now + HEARTBEAT_S
            self.closing.wait(BATCH_S)

    def _terminate(self, *_: Any) -> None:
        self.closing.set()
        self.core.interrupt()
        self.commands.put(Stop())
