"""Workers a killed daemon left behind. A worker ends itself once its daemon is gone (worker/process.py), but one
hung in a call that holds the interpreter (a stuck driver call) cannot run its exit timer, and would hold its
device's memory while the next daemon's worker sized its KV cache from what was left. So each worker has a pid file
in the worker log directory while it lives, and a daemon starting a worker first ends every worker recorded there
whose daemon is gone (its parent is no longer the process that spawned it): never one a live daemon still holds."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger("benchd.workers")

SUFFIX = ".pid"


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time in clock ticks) from /proc, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return fields[0], int(fields[1]), int(fields[19])


def live(pid: int, started: int | None = None) -> tuple[str, int, int] | None:
    """The process's stat while it runs (a zombie has ended), and is the one that started at `started` when given
    (a pid used again is another process); else None."""
    stat = _stat(pid)
    return stat if stat is not None and stat[0] != "Z" and (started is None or stat[2] == started) else None


def record(log_dir: Path, name: str, pid: int) -> Path | None:
    """The worker's pid file: its pid, its start time (a pid used again is not taken for it) and its daemon's pid."""
    stat = _stat(pid)
    if stat is None:
        return None
    path = log_dir / f"{name}.{pid}{SUFFIX}"
    try:
        path.write_text(f"{pid} {stat[2]} {os.getpid()}\n")
    except OSError as error:  # a full or failing disk: the worker runs, a daemon killed meanwhile cannot reap it
        log.warning("the pid file of %s could not be written (%s)", name, error.strerror)
        path.unlink(missing_ok=True)
        return None
    return path


def forget(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)


def reap(log_dir: Path, timeout_s: float = 10.0) -> list[int]:
    """End the workers recorded in log_dir whose daemon is gone (SIGKILL, then wait for them to go, at most
    timeout_s); forget the files of workers that ended. Returns the pids ended."""
    ended = []
    for path in sorted(log_dir.glob(f"*{SUFFIX}")):
        try:
            pid, started, daemon = (int(x) for x in path.read_text().split())
        except (OSError, ValueError):
            continue  # being written, or not ours
        stat = live(pid, started)
        if stat is None:
            forget(path)  # it ended, or the pid is another process's now
            continue
        if stat[1] == daemon:
            continue  # its daemon is alive and holds it
        log.warning("worker pid %d (%s) outlived its daemon (pid %d): killing it", pid, path.stem, daemon)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except PermissionError:  # another user's daemon shared the directory: not ours to end
            log.error("worker pid %d belongs to another user: left running", pid)
            continue
        deadline = time.monotonic() + timeout_s
        while (now := live(pid, started)) is not None:
            if time.monotonic() > deadline:
                log.error("worker pid %d did not end within %g s of SIGKILL (state %s)", pid, timeout_s, now[0])
                break
            time.sleep(0.05)
        else:
            forget(path)
            ended.append(pid)
    return ended
