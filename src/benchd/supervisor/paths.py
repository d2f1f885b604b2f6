"""The directories on a worker's import path that are not the daemon's own installation (the link to the daemon's
benchd package a worker of another environment runs, the venvs built from requirements): made private (0700) under
the daemon's own state (BENCHD_ENVIRONMENTS_DIR), and their owner and mode checked before a worker starts from them,
so that nothing another local user can write (a sitecustomize.py, a .pth, a package of the same name) runs in a
worker with the daemon's rights. (The working directory is never on a worker's path: PYTHONSAFEPATH, in safe_path()
below and ForeignProcess.)"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger("benchd.workers")

WORKER_PATH = "worker-path"  # under the environments' directory: one folder a daemon's package, holding its link


_environ_lock = threading.Lock()


@contextmanager
def safe_path() -> Iterator[None]:
    """PYTHONSAFEPATH for the processes started inside: multiprocessing's spawn runs `python -c`, which would put the
    working directory ahead of the standard library, and it takes the environment of the moment. Only for that
    moment: set for the daemon's life, it reached every other program the daemon's process starts (a script run by
    its path imports from its own folder)."""
    with _environ_lock:
        before = os.environ.get("PYTHONSAFEPATH")
        os.environ["PYTHONSAFEPATH"] = "1"
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("PYTHONSAFEPATH", None)
            else:
                os.environ["PYTHONSAFEPATH"] = before


class UnsafePath(PermissionError):
    """A directory another user owns or may write; str() says which (by setting, not by host path) and why."""


def private(path: Path, root: Path, setting: str = "BENCHD_ENVIRONMENTS_DIR") -> Path:
    """The directory, made if missing (0700), once it and every directory up to root (the daemon's state, itself
    included) are the daemon's user's and writable by no one else; UnsafePath when not (the full path goes to the
    daemon's log, the message names the setting). Above root, the operator's choice of place: a directory another
    user owns (who could replace what it holds) refuses too; one others may write, not sticky as /tmp is (a volume
    shared by the pod's one user, as an emptyDir is), is logged."""
    path, root = Path(os.path.abspath(path)), Path(os.path.abspath(root))
    root.parent.mkdir(parents=True, exist_ok=True)
    for directory in [*reversed(path.relative_to(root).parents), path.relative_to(root)]:
        (root / directory).mkdir(mode=0o700, exist_ok=True)  # each of its own 0700, root included
    user = os.geteuid()
    for directory in [path, *path.parents]:
        ours = directory == root or root in directory.parents
        where = setting if ours else f"a directory above {setting}"
        info = os.stat(directory)  # a link's target: the link itself is its directory's, checked above it
        if info.st_uid != user and (ours or info.st_uid != 0):
            why = f"{where} is owned by uid {info.st_uid}, not by the daemon's user (uid {user})"
        elif ours and info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            why = f"{where} can be written by others (mode {stat.S_IMODE(info.st_mode):o})"
        else:
            if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
                _shared(directory, setting)
            continue
        log.error("%s (%s): nothing another user can write may be on a worker's import path", why, directory)
        raise UnsafePath(f"{why}: nothing another user can write may be on a worker's import path")
    return path


_warned: set[Path] = set()


def _shared(directory: Path, setting: str) -> None:
    if directory not in _warned:
        _warned.add(directory)
        log.warning("%s, above %s, can be written by others: whoever can may replace what it holds", directory,
                    setting)


def worker_path(state: Path) -> str:
    """PYTHONPATH for a worker of another environment: a private directory under the daemon's state that holds only a
    link to this daemon's benchd package (no other package of the daemon's comes along), first on the path: the
    worker runs the daemon's code and protocol, whatever benchd the environment has installed. Checked on each
    start (UnsafePath)."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(str(package).encode()).hexdigest()[:12]
    linked = private(state / WORKER_PATH / digest, state)
    link = linked / "benchd"
    if not link.is_symlink() or link.resolve() != package:
        temporary = linked / f"benchd.{os.getpid()}.{threading.get_ident()}"
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(package)
        temporary.replace(link)
    return str(linked)
