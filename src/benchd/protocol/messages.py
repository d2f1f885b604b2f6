"""The messages between the daemon and a worker process: commands in, reports out, each a typed record (the types
are the specification; protocol/codec.py carries them over the pipe)."""

from __future__ import annotations

from typing import Any

import msgspec

from benchd.hardware.speed import DeviceSpeed
from benchd.protocol.events import AnyEvent
from benchd.protocol.metadata import RunMetadata

# The messages' version: a worker states it first in its Hello, and the daemon refuses a worker of another (a worker
# started from another Python environment runs whatever benchd that environment imports first). Raised whenever a
# message's fields change.
PROTOCOL_VERSION = 3
EXIT_DEVICE_FAULT = 75  # the worker's exit code when a run left its device unusable (its Done went first)

HEARTBEAT_S = 0.5
BATCH_S = 0.1  # how often a run's events leave the worker


class Message(msgspec.Struct, tag=True, array_like=True, frozen=True):
    """The base of every message: on the wire, its class name (the tag), then its fields in order."""


# ---- commands, daemon → worker -----------------------------------------------------------------


class Run(Message, frozen=True):
    """Run a spec. spec: the RunSpec as JSON, validated by the worker once the paths in confine are opened (the
    roots and the spec's paths it re-checks as it loads, models/confinement.py; None: none); faults: the fault-injection
    settings (worker/faults.py), or None; trace_id: the run's trace, when traced (a server's requests join it)."""

    run_id: str
    spec: dict[str, Any]
    faults: dict[str, Any] | None = None
    trace_id: str | None = None
    confine: dict[str, Any] | None = None


class Cancel(Message, frozen=True):
    """End that run early (reason: cancelled | interrupted), or as it starts if it waits its turn."""

    run_id: str
    reason: str


class Warm(Message, frozen=True):
    """Load a model ahead of runs (the daemon's own, at start); answered by Warmed."""

    model: str
    dtype: str
    device: str


class Stop(Message, frozen=True):
    """Finish (a run in progress ends interrupted, with what it measured), release the device and exit."""


# ---- reports, worker → daemon ------------------------------------------------------------------


class Hello(Message, frozen=True):
    """Started, torch imported. protocol: its PROTOCOL_VERSION (first, so that a worker of another version is still
    understood this far); the versions of the stack it runs (its Python environment's); nice: its CPU priority;
    dispatch_priority: the real-time priority its open loops send at (0: none); speed: its device's
    (hardware/speed.py; None: unmeasured, and timed runs cannot be admitted)."""

    protocol: int
    pid: int
    python_version: str
    torch_version: str
    transformers_version: str
    cuda_version: str | None
    device: str
    cuda_devices: int
    nice: int
    dispatch_priority: int
    speed: DeviceSpeed | None


class Heartbeat(Message, frozen=True):
    """Every HEARTBEAT_S. activity: the run's progress events so far (protocol/outbox.py); phase: what it is doing;
    held_bytes: the GPU memory its torch allocator holds (0 on a CPU): weights, a warm engine's KV cache, what it
    would release for another model."""

    t_s: float
    activity: int
    phase: str
    held_bytes: int


class Events(Message, frozen=True):
    """A run's events, in a batch every BATCH_S."""

    run_id: str
    events: list[AnyEvent]


class Warmed(Message, frozen=True):
    """The answer to Warm: error None and the load time, or why it did not load."""

    model: str
    error: str | None
    load_s: float | None


class Exiting(Message, frozen=True):
    """Its device is unusable after this run: it exits after its Done (take no more runs to it)."""

    reason: str


class Done(Message, frozen=True):
    """A run's end, after its last Events. error_stage: where a failed run failed (load | run); metadata: the stack
    it measured (None: it failed before it knew)."""

    run_id: str
    status: str
    error: str | None
    error_stage: str | None
    metadata: RunMetadata | None


Command = Run | Cancel | Warm | Stop
Report = Hello | Heartbeat | Events | Warmed | Exiting | Done
