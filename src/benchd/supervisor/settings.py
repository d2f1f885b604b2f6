"""How the supervisor runs its workers (BENCHD_WORKERS__*): how long a worker may be silent, where its log and its
GPU's measured speed are kept, its priorities, and a kernel run's deadline."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

SPEED_CACHE = "device-speed.json"  # each GPU model and driver's measured limits (hardware/speed.py)


class WorkerSettings(BaseModel):
    """How long a worker may be silent: no heartbeat at all (a call holding the interpreter), or no progress in the
    run it holds (a hung kernel or engine), loading a model or starting an engine included."""

    model_config = ConfigDict(extra="forbid")

    heartbeat_timeout_s: float = Field(default=30.0, gt=0)  # no heartbeat at all (a call holding the interpreter)
    progress_timeout_s: float = Field(default=600.0, gt=0)  # no event while requests run
    load_timeout_s: float = Field(default=1800.0, gt=0)  # loading a model or starting an engine (CUDA graphs)
    start_timeout_s: float = Field(default=300.0, gt=0)  # spawned until it says hello (torch imported)
    log_dir: Path = Path("benchd-workers")  # each worker's stdout and stderr, tail kept with a crash's cause
    # The workers' CPU priority (Unix nice, set as the worker starts): above the daemon's HTTP side, so that its
    # clients do not delay the engine's thread. Lowering nice needs root or CAP_SYS_NICE (else logged); /readyz says.
    nice: int = Field(default=-10, ge=-20, le=19)
    # The real-time priority (SCHED_FIFO, 1-99) of the thread that sends an open loop's requests, while it sends: it
    # runs as soon as a request is due, ahead of every normal thread (benchd/loadgen/priority.py); 0: none. The same
    # privilege as nice; /readyz shows what each worker got.
    dispatch_priority: int = Field(default=1, ge=0, le=99)
    # A kernel run longer than deadline_factor × what it should take at its device's measured speed, plus
    # deadline_slack_s, is ended by the supervisor (its worker killed: a call in progress cannot be interrupted
    # otherwise), with that cause (benchd.models.duration).
    deadline_factor: float = Field(default=4.0, gt=0)
    deadline_slack_s: float = Field(default=30.0, ge=0)  # added to that deadline (+ 120 s a shape compiled)
