"""The Python environments the daemon may start workers from (BENCHD_ENVIRONMENTS): its own ("current"), an existing
interpreter (a venv's bin/python), or a list of requirements built once into a cached venv. A worker in another
environment is a process of that interpreter (`python -m benchd.worker.entry`) on a socket pair; it runs this
daemon's own benchd package, put first on its path, over that environment's torch and transformers."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from benchd.spec.requirements import environment_name

CURRENT = "current"  # the daemon's own environment: the default of a spec's `environment`
BUILD_TIMEOUT_S = 1800.0
# A build made ahead of a run (prepare) that failed answers the runs needing it for this long, each failing with why,
# before a run's need starts another.
FAILED_HOLD_S = 60.0
LOG_TAIL_LINES = 20
BUILT = ".built"  # written in a venv once its requirements installed: the cache's mark of a finished build
# A requirement that is a bare project name ("transformers") means its newest release on the index: asked of the index
# (`pip index versions`) at most this often, the answer pinned (transformers==X.Y.Z) and the venv keyed by it, so a
# new release is built into a venv of its own when a run first needs it after the release.
NEWEST_EVERY_S = 3600.0
UNPINNED = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
ARCHIVES = (".whl", ".zip", ".tar.gz")  # a file's name is no project's


def bare(requirement: str) -> bool:
    """A project's name alone: its newest release on the index."""
    return UNPINNED.match(requirement) is not None and not requirement.endswith(ARCHIVES)
INDEX_TIMEOUT_S = 60.0


class EnvironmentProblem(RuntimeError):
    """An environment that cannot start workers: not declared, no interpreter there, or a build that failed (with
    its log's tail). The run that needs it fails with this; the daemon goes on."""


@dataclass(frozen=True, slots=True)
class Interpreter:
    """How a worker of an environment starts: python None is the daemon's own interpreter (multiprocessing's spawn)."""

    environment: str
    python: str | None = None


CURRENT_INTERPRETER = Interpreter(CURRENT)


class Environments:
    """The declared environments by name, each resolved to an interpreter when a run first needs it (a requirements
    list is built then, under cache_dir, keyed by the requirements and the daemon's interpreter, and reused)."""

    def __init__(self, declared: dict[str, str | list[str]] | None = None, cache_dir: Path | None = None) -> None:
        self.declared = dict(declared or {})
        self.cache_dir = Path(os.path.abspath(cache_dir)) if cache_dir is not None else None
        self._lock = threading.Lock()  # one build at a time: two runs needing one environment build it once
        self._newest: dict[str, tuple[float, str]] = {}  # project → (when asked, time.monotonic(); its newest version)
        # Environments made ready ahead of their runs (prepare): when, and the interpreter or why there is none.
        self._prepared: dict[str, tuple[float, Interpreter | EnvironmentProblem]] = {}
        self._preparing: set[str] = set()
        self._state = threading.Lock()
        self.on_prepared: Callable[[], None] = lambda: None  # a preparation ended (the run queue looks again)

    def adopt(self, requirements: list[str]) -> str:
        """A spec's own requirements (its `requirements`), declared under the name they build (requirements-<hash>):
        every run that brings the same list shares one venv."""
        name = environment_name(requirements)
        self.declared.setdefault(name, list(requirements))
        return name

    def names(self) -> list[str]:
        return [CURRENT, *self.declared]

    def problem(self, name: str) -> str | None:
        """Why a spec may not name this environment; None when it may."""
        if name == CURRENT or name in self.declared:
            return None
        return f"{name!r} is not a declared environment ({', '.join(self.names())}; BENCHD_ENVIRONMENTS declares them)"

    def interpreter(self, name: str) -> Interpreter:
        """The environment's interpreter: as prepare() found it ahead of the run, else found now (a requirements
        list not yet in the cache built first)."""
        with self._state:
            prepared = self._prepared.get(name)
        if prepared is not None and _fresh(prepared):
            if isinstance(prepared[1], EnvironmentProblem):
                raise prepared[1]
            return prepared[1]
        return self._resolve(name)

    def ready(self, name: str) -> bool:
        """Whether a worker of the environment can start without a build (or an ask of the index for a bare
        requirement's newest release). Where one is needed it starts on a thread of its own (prepare), and this says
        False until it has ended; a preparation that failed says True (the run fails at its start with why) for
        FAILED_HOLD_S. The run loop takes only runs whose environment is ready: a build holds no run up but its own."""
        if name == CURRENT or name not in self.declared or isinstance(self.declared[name], str):
            return True  # nothing to build (an undeclared name fails its run at once)
        with self._state:
            if name in self._preparing:
                return False
            prepared = self._prepared.get(name)
            if prepared is not None and _fresh(prepared):
                return True
            self._preparing.add(name)
        threading.Thread(target=self._prepare, args=(name,), name=f"benchd-environment-{name}", daemon=True).start()
        return False

    def _prepare(self, name: str) -> None:
        try:
            found: Interpreter | EnvironmentProblem = self._resolve(name)
        except EnvironmentProblem as problem:
            found = problem
        except Exception as error:  # the build's boundary: the run that needs it fails with this
            found = EnvironmentProblem(f"environment {name!r}: {type(error).__name__}: {error}")
        with self._state:
            self._prepared[name] = (time.monotonic(), found)
            self._preparing.discard(name)
        self.on_prepared()

    def _resolve(self, name: str) -> Interpreter:
        if (problem := self.problem(name)) is not None:
            raise EnvironmentProblem(problem)
        if name == CURRENT:
            return Interpreter(CURRENT)
        declared = self.declared[name]
        python = declared if isinstance(declared, str) else self._built(name, self.pinned(name, declared))
        if not os.access(python, os.X_OK) or os.path.isdir(python):
            raise EnvironmentProblem(f"environment {name!r}: no interpreter at {python}")
        return Interpreter(name, python)

    # ---- requirements, built into a venv --------------------------------------------------------------------------

    def key(self, requirements: list[str]) -> str:
        """The cache's key: the requirements as given (order too: it is pip's) and the daemon's interpreter, the base
        whose packages the venv sees beneath its own."""
        base = {"requirements": requirements, "prefix": sys.prefix, "python": sys.version}
        return hashlib.sha256(json.dumps(base, sort_keys=True).encode()).hexdigest()[:16]

    def pinned(self, name: str, requirements: list[str]) -> list[str]:
        """The requirements with each bare project name pinned to its newest release on the index; where the index
        cannot be reached, the answer last written to the cache (<key of the requirements as declared>.resolved)."""
        if not any(bare(r) for r in requirements):
            return requirements
        record = self.venv(requirements).with_suffix(".resolved")
        try:
            pinned = [f"{r}=={self._newest_version(r)}" if bare(r) else r for r in requirements]
        except EnvironmentProblem as problem:
            if record.exists():
                return json.loads(record.read_text())
            raise EnvironmentProblem(f"environment {name!r}: {problem}, and no earlier answer is cached") from None
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(pinned))
        return pinned

    def _newest_version(self, project: str) -> str:
        asked = self._newest.get(project)
        if asked is not None and time.monotonic() - asked[0] < NEWEST_EVERY_S:
            return asked[1]
        command = [sys.executable, "-m", "pip", "index", "versions", project, "--disable-pip-version-check",
                   "--no-input", "--retries", "0", "--timeout", "10"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=INDEX_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise EnvironmentProblem(
                f"the index did not say {project}'s newest release in {INDEX_TIMEOUT_S:.0f} s") from None
        found = re.match(rf"^{re.escape(project)} \((\S+)\)", done.stdout, re.IGNORECASE)
        if done.returncode != 0 or found is None:
            last = (done.stderr.strip().splitlines() or ["no answer"])[-1]
            raise EnvironmentProblem(f"the index did not say {project}'s newest release ({last})")
        self._newest[project] = (time.monotonic(), found.group(1))
        return found.group(1)

    def venv(self, requirements: list[str]) -> Path:
        if self.cache_dir is None:
            raise EnvironmentProblem("no directory to build environments in (BENCHD_ENVIRONMENTS_DIR)")
        return self.cache_dir / self.key(requirements)

    def _built(self, name: str, requirements: list[str]) -> str:
        venv = self.venv(requirements)
        python = str(venv / "bin" / "python")
        with self._lock:
            if not (venv / BUILT).exists():
                self._build(name, requirements, venv)
        return python

    def _build(self, name: str, requirements: list[str], venv: Path) -> None:
        """A venv without pip whose site-packages ends with the daemon's (so torch and the rest are there unless the
        requirements install their own, which come first), the requirements installed by the daemon's pip (uv where
        the daemon has none); its log beside it (<key>.log), kept."""
        shutil.rmtree(venv, ignore_errors=True)  # an earlier build that did not finish
        venv.parent.mkdir(parents=True, exist_ok=True)
        log_path = venv.with_suffix(".log")
        python = str(venv / "bin" / "python")
        installer = _installer(python)
        with log_path.open("w") as log:
            log.write(f"environment {name}: {json.dumps(requirements)} on {sys.prefix}\n")
            log.flush()
            try:
                self._step([sys.executable, "-m", "venv", "--without-pip", str(venv)], log, name, log_path)
                site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                           capture_output=True, text=True, check=True).stdout.strip())
                # addsitedir, not a bare path: the base's own .pth files (editable installs) count too
                bases = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
                (site / "_benchd_base.pth").write_text(
                    "".join(f"import site; site.addsitedir({base!r})\n" for base in bases))
                self._step([*installer, *requirements], log, name, log_path)
            except (OSError, subprocess.CalledProcessError) as error:
                log.write(f"{error}\n")
                raise EnvironmentProblem(f"environment {name!r}: the build could not run: {error}") from None
        (venv / BUILT).write_text(json.dumps(requirements))

    @staticmethod
    def _step(command: list[str], log, name: str, log_path: Path) -> None:
        log.write(f"$ {' '.join(command)}\n")
        log.flush()
        try:
            code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  timeout=BUILD_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            code = None
        if code != 0:
            log.flush()
            raise EnvironmentProblem(f"environment {name!r}: building it failed ("
                                     f"{'timed out' if code is None else f'exit code {code}'}; log {log_path}):\n"
                                     f"{tail(log_path)}")


def _fresh(prepared: tuple[float, Interpreter | EnvironmentProblem]) -> bool:
    """A preparation still holds: a failure for FAILED_HOLD_S, an interpreter as long as a bare requirement's
    newest release is taken to stay the newest (NEWEST_EVERY_S)."""
    held = FAILED_HOLD_S if isinstance(prepared[1], EnvironmentProblem) else NEWEST_EVERY_S
    return time.monotonic() - prepared[0] < held


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
    raise EnvironmentProblem("no installer: the daemon's Python has no pip, and no uv is on PATH")


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


# ---- a worker of another interpreter --------------------------------------------------------------------------------


def worker_path() -> str:
    """PYTHONPATH for a worker of another environment: a directory that holds only a link to this daemon's benchd
    package (no other package of the daemon's comes along), first on the path: the worker runs the daemon's code
    and protocol, whatever benchd the environment has installed."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(str(package).encode()).hexdigest()[:12]
    linked = Path(os.environ.get("TMPDIR", "/tmp")) / f"benchd-worker-path-{os.getuid()}-{digest}"
    link = linked / "benchd"
    if not link.is_symlink() or link.resolve() != package:
        linked.mkdir(parents=True, exist_ok=True)
        temporary = linked / f"benchd.{os.getpid()}.{threading.get_ident()}"
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(package)
        temporary.replace(link)
    return str(linked)


class ForeignProcess:
    """A worker process of another interpreter, as multiprocessing's Process is to the handle: start, is_alive,
    join, kill, pid, exitcode (negative: the signal)."""

    def __init__(self, interpreter: Interpreter, slot_key: str, log_path: str, env: dict[str, str]) -> None:
        self.interpreter, self.slot_key, self.log_path, self.env = interpreter, slot_key, log_path, env
        self._popen: subprocess.Popen | None = None

    def start(self) -> Connection:
        """Started; the daemon's end of the pair (the worker's own end is closed here once it has it)."""
        ours, theirs = socket.socketpair()
        env = {**os.environ, **self.env}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (worker_path(), os.environ.get("PYTHONPATH")) if p)
        with open(self.log_path, "a") as log:  # what it says before it takes its log itself (an import failing)
            self._popen = subprocess.Popen(
                [self.interpreter.python, "-m", "benchd.worker.entry", str(theirs.fileno()), self.slot_key,
                 self.log_path], pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT)
        theirs.close()
        return Connection(ours.detach())

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll() if self._popen is not None else None

    def is_alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def join(self, timeout: float | None = None) -> None:
        if self._popen is not None:
            try:
                self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                pass

    def kill(self) -> None:
        if self.is_alive():
            self._popen.kill()
