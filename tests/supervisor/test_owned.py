"""What runs in a worker and what builds its environment belong to the daemon: nothing another local user plants
on a worker's import path runs there, a build ends with the daemon and never shares its folder with another builder,
and a failed build says why without the host's paths or the index's URL."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

import benchd
from benchd.supervisor.environments import EnvironmentProblem, Environments, ForeignProcess, Interpreter
from benchd.supervisor.paths import WORKER_PATH, safe_path
from tests.helpers import daemon, spec, submit, wait_for
from tests.supervisor.helpers import StallingIndex

BARE = "/usr/bin/python3"  # the system's Python: the worker fails at its first import, after site has run
PLANT = "import os, sys; print('PLANTED, running as uid', os.getuid(), file=sys.stderr)"


def as_nobody(script: str) -> None:
    """A shell script run by a second local user (CI runs as root); skipped where there is none to become."""
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody to plant files as")
    if os.geteuid() != 0:
        pytest.skip("only root can act as another user here")
    subprocess.run(["sh", "-c", script], user=nobody.pw_uid, group=nobody.pw_gid, extra_groups=[], check=True)


def test_a_sitecustomize_another_user_planted_never_runs_in_a_worker(tmp_path):
    # Where the worker's import path was made before (${TMPDIR:-/tmp}/benchd-worker-path-<uid>-<digest>), made first
    # by user nobody, with a sitecustomize.py in it.
    package = Path(benchd.__file__).resolve().parent
    planted = (Path(os.environ.get("TMPDIR", "/tmp"))
               / f"benchd-worker-path-{os.getuid()}-{hashlib.sha256(str(package).encode()).hexdigest()[:12]}")
    shutil.rmtree(planted, ignore_errors=True)
    as_nobody(f"mkdir -m 0755 {planted} && echo \"{PLANT}\" > {planted}/sitecustomize.py")
    try:
        environments = Environments({"bare": BARE}, tmp_path / "environments")
        log = tmp_path / "worker.log"
        worker = ForeignProcess(environments.interpreter("bare"), "cpu", str(log), {})
        worker.start().close()
        worker.join(60)
        said = log.read_text()
        assert worker.exitcode == 1 and "No module named" in said  # it ran, through site, to its first import
        assert "PLANTED" not in said, said
        assert (tmp_path / "environments" / WORKER_PATH).stat().st_mode & 0o777 == 0o700
    finally:
        shutil.rmtree(planted, ignore_errors=True)


@pytest.fixture
def shared_cwd(monkeypatch):
    """The working directory is one every user may write (as a daemon started from /tmp's would be), and user nobody
    has planted a benchd package and a multiprocessing package in it."""
    shared = Path(tempfile.mkdtemp(prefix="benchd-shared-"))
    shared.chmod(0o777)
    try:
        for package in ("benchd", "multiprocessing"):
            as_nobody(f"mkdir {shared}/{package} && echo \"{PLANT}\" > {shared}/{package}/__init__.py")
        monkeypatch.chdir(shared)
        yield shared
    finally:
        shutil.rmtree(shared)


def test_a_package_planted_in_the_working_directory_is_not_what_a_worker_imports(tmp_path, shared_cwd, capfd,
                                                                                 monkeypatch):
    # A worker of another environment: `python -m benchd.worker.entry` would import benchd from there first.
    log = tmp_path / "worker.log"
    worker = ForeignProcess(Environments({"bare": BARE}, tmp_path / "environments").interpreter("bare"), "cpu",
                            str(log), {})
    worker.start().close()
    worker.join(60)
    assert "No module named" in log.read_text() and "PLANTED" not in log.read_text(), log.read_text()
    # One of the daemon's own (multiprocessing's spawn): `python -c` would import multiprocessing from there first.
    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
    child = multiprocessing.get_context("spawn").Process(target=print, args=("the child ran",))
    with safe_path():  # as WorkerHandle.start spawns a worker
        child.start()
    assert "PYTHONSAFEPATH" not in os.environ  # only for that moment: other programs the daemon starts keep their path
    child.join(60)
    said = capfd.readouterr()
    assert child.exitcode == 0 and "the child ran" in said.out and "PLANTED" not in said.err, said.err


def test_an_import_path_another_user_owns_or_may_write_starts_no_worker(tmp_path):
    from benchd.supervisor.paths import UnsafePath

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, pwd.getpwnam("nobody").pw_uid, -1)
    with pytest.raises(EnvironmentProblem, match=r"BENCHD_ENVIRONMENTS_DIR is owned by uid \d+, not by the daemon's"):
        Environments({"bare": BARE}, shared).interpreter("bare")
    with pytest.raises(UnsafePath, match="nothing another user can write may be on a worker's import path"):
        ForeignProcess(Interpreter("bare", BARE, shared), "cpu", str(tmp_path / "w.log"), {}).start()
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    Environments({"bare": BARE}, mine).interpreter("bare")
    os.chmod(mine / WORKER_PATH, 0o777)
    with pytest.raises(EnvironmentProblem, match=r"BENCHD_ENVIRONMENTS_DIR can be written by others \(mode 777\)"):
        Environments({"bare": BARE}, mine).interpreter("bare")


def pips(venv: Path) -> list[int]:
    """The processes installing into the venv."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if b"pip" in command and str(venv / "bin" / "python").encode() in command:
            found.append(int(entry.name))
    return found


def holds(pid: int, path: Path) -> bool:
    fds = Path(f"/proc/{pid}/fd")
    return any(os.readlink(fd) == str(path) for fd in fds.iterdir())


def test_a_build_holds_its_folder_alone_and_ends_with_the_daemon(tmp_path, monkeypatch):
    index = StallingIndex()  # the build's pip waits on it: a build as long as the test needs
    monkeypatch.setenv("PIP_INDEX_URL", index.url)
    environments = {"slow": ["benchd-slow-package==1.0"]}
    try:
        with daemon(tmp_path, environments=environments, environments_dir=str(tmp_path / "built")) as server:
            submit(server, {**spec(requests=2, output=4), "environment": "slow"})
            assert index.asked.wait(120), "the build never asked the index"
            (venv,) = [p for p in (tmp_path / "built").iterdir() if p.is_dir() and p.name != WORKER_PATH]
            (pip,) = pips(venv)
            # pip holds the build's lock itself: were the daemon killed now, its folder stays the orphan's.
            assert holds(pip, venv.with_suffix(".lock"))
            # The next daemon's builder (one over the same folder) neither deletes it nor starts a second pip.
            failed: list[Exception] = []
            other = threading.Thread(target=lambda: failed.extend(_problem(environments, tmp_path / "built")))
            other.start()
            other.join(30)
            assert not other.is_alive() and "another build of it still runs" in str(failed[0])
            assert venv.exists() and pips(venv) == [pip]
        # The daemon stopped as SIGTERM stops it (the app's lifespan ends): its build's whole group with it.
        wait_for(lambda: not pips(venv), 15, "the build's pip to end with the daemon")
    finally:
        index.close()


def _problem(declared: dict, where: Path) -> list[Exception]:
    try:
        Environments(declared, where).interpreter("slow")
    except EnvironmentProblem as problem:
        return [problem]
    return []


def test_a_failed_builds_error_names_its_log_without_host_paths_or_index_urls(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "http://builder:s3cret@127.0.0.1:9/simple")  # nothing listens on port 9
    monkeypatch.setenv("PIP_RETRIES", "0")
    where = tmp_path / "built"
    with pytest.raises(EnvironmentProblem) as failed:
        Environments({"broken": ["benchd-no-such-package==0.0.1"]}, where).interpreter("broken")
    error = str(failed.value)
    (log,) = where.glob("*.log")
    assert error.startswith("environment 'broken': building it failed (exit code 1): ERROR: ") and \
        "benchd-no-such-package" in error and f"the whole log: {log.name} in BENCHD_ENVIRONMENTS_DIR" in error
    assert "s3cret" not in error and "127.0.0.1" not in error and str(tmp_path) not in error, error
    assert "s3cret" in log.read_text() or "127.0.0.1" in log.read_text()  # the whole text stays in the log
