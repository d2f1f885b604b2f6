"""A venv built from a requirements list, owned. One builder a folder at a time: a lock beside it that the build's own
processes hold too, so a daemon killed mid-build leaves the folder to its orphaned pip until that ends, and the next
daemon never deletes a folder under a live builder. Each step runs in a process group of its own, which the daemon
ends when it stops. The log is kept beside the venv; a failure is said without host paths or index URLs (a run's
error is read anonymously), the whole text staying in the log and the daemon's own log."""

from __future__ import annotations

import fcntl
import importlib.metadata
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger("benchd.environments")

BUILD_TIMEOUT_S = 1800.0
STOP_GRACE_S = 10.0  # a step told to stop (SIGTERM to its group) that has not is killed after this
LOG_TAIL_LINES = 20
BUILT = ".built"  # written in a venv once its requirements installed: the cache's mark of a finished build
URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://\S+")
ABSOLUTE = re.compile(r"(?<![\w.~-])/[^\s'\"(),;:]+")


class BuildFailed(RuntimeError):
    """Why a build did not finish, as anyone may read it (no host path, no URL)."""


def public(text: str) -> str:
    """The text with URLs (an index's, which may carry a token) and absolute paths (the host's layout) left out."""
    return ABSOLUTE.sub("<path>", URL.sub("<url>", text))


class Builder:
    def __init__(self) -> None:
        self._steps: set[subprocess.Popen] = set()  # those running now, each the leader of its process group
        self._state = threading.Lock()
        self._stopping = False

    def build(self, name: str, requirements: list[str], venv: Path, wait_s: float = 0.0) -> None:
        """The venv, unless it is built already: the lock beside it taken first, waited for up to wait_s while
        another builder holds it (BuildFailed after)."""
        with _locked(venv.with_suffix(".lock"), wait_s) as lock:
            if not (venv / BUILT).exists():
                self._build(name, requirements, venv, lock)

    def stop(self) -> None:
        """The daemon stops: every step running ends (its whole group: pip and what it started), none starts."""
        with self._state:
            self._stopping = True
            steps = list(self._steps)
        for step in steps:
            _signal(step, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for step in steps:
            try:
                step.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal(step, signal.SIGKILL)
                step.wait()

    def _build(self, name: str, requirements: list[str], venv: Path, lock: int) -> None:
        """A venv without pip whose site-packages ends with the daemon's (so torch and the rest are there unless the
        requirements install their own, which come first), the requirements installed by the daemon's pip (uv where
        the daemon has none); its log beside it (<key>.log), kept."""
        shutil.rmtree(venv, ignore_errors=True)  # an earlier build that did not finish (its builder gone: the lock)
        log_path = venv.with_suffix(".log")
        python = str(venv / "bin" / "python")
        installer = _installer(python)
        with log_path.open("w") as out:
            out.write(f"environment {name}: {json.dumps(requirements)} on {sys.prefix}\n")
            out.flush()
            try:
                self._step([sys.executable, "-m", "venv", "--without-pip", str(venv)], out, log_path, lock)
                site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                           capture_output=True, text=True, check=True).stdout.strip())
                # addsitedir, not a bare path: the base's own .pth files (editable installs) count too
                bases = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
                (site / "_benchd_base.pth").write_text(
                    "".join(f"import site; site.addsitedir({base!r})\n" for base in bases))
                self._step([*installer, *requirements], out, log_path, lock)
            except (OSError, subprocess.CalledProcessError) as error:
                out.write(f"{error}\n")
                log.error("environment %s: the build could not run: %s", name, error)
                raise BuildFailed(f"the build could not run: {public(str(error))}") from None
        (venv / BUILT).write_text(json.dumps(requirements))

    def _step(self, command: list[str], out, log_path: Path, lock: int) -> None:
        """A step in a process group of its own, holding the build's lock (its processes outlive a killed daemon)."""
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        with self._state:
            if self._stopping:
                raise BuildFailed("the daemon stopped during the build")
            step = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, pass_fds=(lock,))
            self._steps.add(step)
        try:
            code: int | None = step.wait(BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _signal(step, signal.SIGKILL)
            step.wait()
            code = None
        finally:
            with self._state:
                self._steps.discard(step)
        if code == 0:
            return
        out.flush()
        how = "timed out" if code is None else "stopped with the daemon" if self._stopping else f"exit code {code}"
        log.error("building into %s failed (%s):\n%s", log_path.with_suffix(""), how, tail(log_path))
        raise BuildFailed(f"building it failed ({how}){said(log_path)}; the whole log: {log_path.name} in "
                          "BENCHD_ENVIRONMENTS_DIR")


def _signal(step: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(step.pid, sig)
    except ProcessLookupError:  # the group has ended
        pass


@contextmanager
def _locked(path: Path, wait_s: float) -> Iterator[int]:
    """An exclusive flock on the file, held until the block ends (and by any process the block passes it to)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
                    raise BuildFailed(f"another build of it still runs (begun by process {holder}, or a pip it left "
                                      "behind): it is built once that ends") from None
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield fd
    finally:
        os.close(fd)


def said(log_path: Path) -> str:
    """What pip said last (its ERROR lines, else its last line), without paths or URLs: ': …', or nothing."""
    lines = tail(log_path).splitlines()
    errors = [line for line in lines if line.startswith("ERROR:")][-3:] or lines[-1:]
    return f": {public(' '.join(line.strip() for line in errors))}" if errors else ""


def _installer(python: str) -> list[str]:
    """The daemon's pip, run for the venv's interpreter: it counts what the venv sees through the base's path (the
    .pth above) as installed, so a requirement's dependencies the daemon has (torch, numpy, huggingface-hub) are
    not installed again. uv reads only the venv's own site-packages: it would install every dependency a second
    time (a second torch for a requirement that needs one, from an index an offline node cannot reach). uv only
    where the daemon's Python has no pip; its log says so."""
    if _has_pip():
        return [sys.executable, "-m", "pip", "--python", python, "install", "--disable-pip-version-check", "--no-input"]
    if (uv := shutil.which("uv")) is not None:
        return [uv, "pip", "install", "--python", python]
    raise BuildFailed("no installer: the daemon's Python has no pip, and no uv is on PATH")


def _has_pip() -> bool:
    """By its metadata, not importlib.util.find_spec("pip"): setuptools' distutils shim takes a lookup of "pip" for
    pip starting, and from then on hands this process the standard library's distutils (torch's inductor then fails
    to compile: tests/daemon/test_matrix.py caught it)."""
    try:
        importlib.metadata.version("pip")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open(errors="replace") as f:
            return "".join(deque(f, maxlen=lines)).rstrip()
    except OSError:
        return ""
