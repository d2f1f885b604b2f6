"""The Python environments the daemon may start workers from (BENCHD_ENVIRONMENTS): its own ("current"), an existing
interpreter (a venv's bin/python), or a list of requirements built once into a cached venv. A worker in another
environment is a process of that interpreter (`python -m benchd.worker.entry`) on a socket pair; it runs this
daemon's own benchd package, put first on its path, over that environment's torch and transformers."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from benchd.spec.requirements import environment_name
from benchd.supervisor.builds import BUILD_TIMEOUT_S, BUILT, Builder, BuildFailed, public
from benchd.supervisor.paths import UnsafePath, private, worker_path

log = logging.getLogger("benchd.environments")

CURRENT = "current"  # the daemon's own environment: the default of a spec's `environment`
# A build made ahead of a run (prepare) that failed answers the runs needing it for this long, each failing with why,
# before a run's need starts another.
FAILED_HOLD_S = 60.0
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
    """How a worker of an environment starts: python None is the daemon's own interpreter (multiprocessing's spawn);
    state: the environments' directory, where its import path is kept private (supervisor/paths.py)."""

    environment: str
    python: str | None = None
    state: Path | None = None


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
        self.builder = Builder()

    def stop(self) -> None:
        """The daemon stops: a build in progress ends with it (supervisor/builds.py)."""
        self.builder.stop()

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
        try:  # on a thread of its own: it may wait for another builder of the same venv as long as a build takes
            found: Interpreter | EnvironmentProblem = self._resolve(name, BUILD_TIMEOUT_S)
        except EnvironmentProblem as problem:
            found = problem
        except Exception as error:  # the build's boundary: the run that needs it fails with this
            log.exception("preparing environment %s failed", name)
            found = EnvironmentProblem(f"environment {name!r}: {type(error).__name__}: {public(str(error))}")
        with self._state:
            self._prepared[name] = (time.monotonic(), found)
            self._preparing.discard(name)
        self.on_prepared()

    def _resolve(self, name: str, wait_s: float = 0.0) -> Interpreter:
        """wait_s: how long a build may wait for another builder of its venv (supervisor/builds.py)."""
        if (problem := self.problem(name)) is not None:
            raise EnvironmentProblem(problem)
        if name == CURRENT:
            return Interpreter(CURRENT)
        if self.cache_dir is None:
            raise EnvironmentProblem(f"environment {name!r}: no directory for its workers' import path "
                                     "(BENCHD_ENVIRONMENTS_DIR)")
        try:
            worker_path(self.cache_dir)  # private, or the run fails here with why
        except UnsafePath as error:
            raise EnvironmentProblem(f"environment {name!r}: {error}") from None
        declared = self.declared[name]
        python = declared if isinstance(declared, str) else self._built(name, self.pinned(name, declared), wait_s)
        if not os.access(python, os.X_OK) or os.path.isdir(python):
            log.error("environment %s: no interpreter at %s", name, python)
            raise EnvironmentProblem(f"environment {name!r}: no interpreter at its path"
                                     f"{' (BENCHD_ENVIRONMENTS)' if isinstance(declared, str) else ''}")
        return Interpreter(name, python, self.cache_dir)

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

    def _built(self, name: str, requirements: list[str], wait_s: float = 0.0) -> str:
        """The venv's interpreter, built first unless it is (supervisor/builds.py), in a directory of the daemon's
        own (supervisor/paths.py: a venv is on its workers' import path)."""
        venv = self.venv(requirements)
        assert self.cache_dir is not None  # venv() refused without one
        if not (venv / BUILT).exists():
            with self._lock:
                try:
                    private(self.cache_dir, self.cache_dir)
                    self.builder.build(name, requirements, venv, wait_s)
                except (BuildFailed, UnsafePath) as error:
                    raise EnvironmentProblem(f"environment {name!r}: {error}") from None
        return str(venv / "bin" / "python")


def _fresh(prepared: tuple[float, Interpreter | EnvironmentProblem]) -> bool:
    """A preparation still holds: a failure for FAILED_HOLD_S, an interpreter as long as a bare requirement's
    newest release is taken to stay the newest (NEWEST_EVERY_S)."""
    held = FAILED_HOLD_S if isinstance(prepared[1], EnvironmentProblem) else NEWEST_EVERY_S
    return time.monotonic() - prepared[0] < held


# ---- a worker of another interpreter --------------------------------------------------------------------------------


class ForeignProcess:
    """A worker process of another interpreter, as multiprocessing's Process is to the handle: start, is_alive,
    join, kill, pid, exitcode (negative: the signal)."""

    def __init__(self, interpreter: Interpreter, slot_key: str, log_path: str, env: dict[str, str]) -> None:
        self.interpreter, self.slot_key, self.log_path, self.env = interpreter, slot_key, log_path, env
        self._popen: subprocess.Popen | None = None

    def start(self) -> Connection:
        """Started; the daemon's end of the pair (the worker's own end is closed here once it has it)."""
        if self.interpreter.state is None:
            raise UnsafePath("no directory for the worker's import path (BENCHD_ENVIRONMENTS_DIR)")
        path = worker_path(self.interpreter.state)  # checked again at each start: UnsafePath, the worker's death
        ours, theirs = socket.socketpair()
        # PYTHONSAFEPATH: `python -m` would put the working directory first on its path, ahead of that private one.
        env = {**os.environ, **self.env, "PYTHONSAFEPATH": "1"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (path, os.environ.get("PYTHONPATH")) if p)
        python = self.interpreter.python
        assert python is not None  # another environment's (supervisor/handle.py starts the daemon's own otherwise)
        with open(self.log_path, "a") as log:  # what it says before it takes its log itself (an import failing)
            self._popen = subprocess.Popen(
                [python, "-m", "benchd.worker.entry", str(theirs.fileno()), self.slot_key,
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
            assert self._popen is not None  # alive: started
            self._popen.kill()
