"""A worker's CPU priority: the process's nice, above the daemon's HTTP side and the node's other work, and the
real-time class for the one thread that keeps an open loop's schedule, while it sends.

Nice weighs how much CPU a thread gets, not how soon a woken one runs: a dispatcher that wakes at a request's
scheduled time waits for a core behind whatever runs there (the daemon's HTTP side, its clients, the node's other
work), up to a scheduler slice or more. A thread in SCHED_FIFO runs as soon as it wakes, before every normal
thread; the dispatcher is asleep between sends, so it takes almost nothing from them
(docs/benchmarks/daemon-and-dispatch.md: dispatch lag p99 under 200 HTTP clients on two cores, 2.79–4.03 ms at
nice -10, 0.39–1.70 ms in SCHED_FIFO). The engine's own threads stay normal: a real-time thread that computes would
starve the daemon and the node.

Both need root or CAP_SYS_NICE (a container: `--cap-add SYS_NICE`); the real-time class also needs a real-time share
for the process's cgroup where the kernel schedules real-time groups (cgroup v2 then admits real-time threads in the
root group only, cgroup v1 by `cpu.rt_runtime_us`, Docker's `--cpu-rt-runtime`): a container on the lent H100 hosts
may renice but not take SCHED_FIFO. Refused either, the worker keeps the daemon's priority, says so in its log, and
/readyz shows what it got."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# Threads the dispatcher starts while it sends are born normal, whatever they are for.
REALTIME = os.SCHED_FIFO | os.SCHED_RESET_ON_FORK


def prioritize(nice: int) -> None:
    """The process's nice, before any thread exists (threads inherit it); without the privilege to raise it the
    process stays where it is and says so."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if nice == current:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError as error:  # EACCES/EPERM: no privilege to raise it
        print(f"benchd: the worker stays at nice {current}: nice {nice} needs CAP_SYS_NICE ({error.strerror})",
              file=sys.stderr, flush=True)


def allowed(level: int) -> int:
    """level if this process may put a thread in SCHED_FIFO at it (tried on the calling thread, and undone), else 0
    after saying why; 0 asks for none."""
    if level <= 0:
        return 0
    try:
        _restore(_raise(level))
    except OSError as error:  # EPERM: no CAP_SYS_NICE, or RLIMIT_RTPRIO below level, or no real-time share
        print(f"benchd: open loops send at normal priority: real-time priority {level} was refused "
              f"({error.strerror}); it needs CAP_SYS_NICE and, in a container, a real-time share for its cgroup",
              file=sys.stderr, flush=True)
        return 0
    return level


@contextmanager
def realtime(level: int) -> Iterator[None]:
    """The calling thread in SCHED_FIFO at level while the block runs, then back to its own policy and nice; level 0,
    or a refusal, leaves it as it is. For a thread that sleeps between short bursts only."""
    try:
        before = _raise(level) if level > 0 else None
    except OSError:  # allowed() said why when the worker started
        before = None
    try:
        yield
    finally:
        if before is not None:
            _restore(before)


def _raise(level: int) -> tuple[int, os.sched_param]:
    before = os.sched_getscheduler(0), os.sched_getparam(0)  # 0: the calling thread (Linux)
    os.sched_setscheduler(0, REALTIME, os.sched_param(level))
    return before


def _restore(before: tuple[int, os.sched_param]) -> None:
    os.sched_setscheduler(0, *before)  # a normal policy keeps the thread's nice
