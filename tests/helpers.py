"""Specs, live servers and helpers shared by the tests."""

import errno
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn

from benchd.api import create_app
from benchd.daemon.settings import Settings
from benchd.spec import parse_spec


def make_spec(**overrides):
    """A small CPU spec; keyword arguments replace top-level fields or, with a workload dict, the workload."""
    data = {
        "name": "test",
        "model": "tiny",
        "device": "cpu",
        "dtype": "float32",
        "transformers": {"block_size": 16, "num_blocks": 64, "max_batch_tokens": 128},
        "static": {"batch_size": 4},
        "workload": {
            "arrivals": {"profile": "concurrent", "concurrency": 4},
            "stop": {"requests": 12},
            "prompt_tokens": {"dist": "uniform", "min": 4, "max": 24},
            "output_tokens": {"dist": "uniform", "min": 2, "max": 12},
        },
    }
    workload = overrides.pop("workload", None)
    if workload:
        data["workload"].update(workload)
    data.update(overrides)
    return parse_spec(data)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """A real uvicorn on a loopback port, in a thread of the test process (so tests can reach the app)."""

    def __init__(self, app, port: int | None = None) -> None:
        self.app = app
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "LiveServer":
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        self.http = httpx.Client(base_url=self.url, timeout=30)
        return self

    def __exit__(self, *exc) -> None:
        self.http.close()
        self.server.should_exit = True
        self.thread.join(90)

    # Three minutes: a daemon is ready once its worker has imported torch and loaded its model, which on a CI
    # machine's cold disk, beside a podman build and another test's daemons, has taken more than a minute.
    def wait_ready(self, timeout_s: float = 180) -> None:
        wait_for(lambda: self.http.get("/readyz").status_code == 200, timeout_s)

    def wait_status(self, run_id: str, *statuses: str, timeout_s: float = 120, records: bool = True) -> dict:
        """The run once in one of the statuses; an ended one once its records are readable too, unless records is
        False (a store that takes no writes holds them)."""
        found = {}

        def reached() -> bool:
            found.update(self.http.get(f"/runs/{run_id}").json())
            if found["status"] not in statuses:
                return False
            # An ended run's records are read once its writes are in the database (a 503 until then): the store
            # applies them off the run loop, and a loaded machine can take longer than the end's wait for them.
            return not records or found["status"] in ("queued", "running") or \
                self.http.get(f"/runs/{run_id}/requests").status_code != 503

        wait_for(reached, timeout_s, f"run {run_id} to reach {statuses}")
        return found


def fill(directory: Path) -> Path:
    """Fill a filesystem (small_fs) to its last byte: the file that holds it, to unlink for space again."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
    return filler


@contextmanager
def peak_rss(pid: int, every_s: float = 0.02) -> Iterator[list[int]]:
    """The process's RSS sampled while the block runs: the list (its first, the RSS before) filled as it goes."""
    import psutil

    process = psutil.Process(pid)
    found, done = [process.memory_info().rss], threading.Event()

    def sample() -> None:
        while not done.is_set():
            found.append(process.memory_info().rss)
            time.sleep(every_s)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        yield found
    finally:
        done.set()
        sampler.join()


def wait_for(condition, timeout_s: float = 60, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


# The sections a spec of each runner (a generation's engine, or the timed kind) no longer holds since RunSpec became a
# union on its kind; 14d1cbb's specs held them all (tests/data: its store, and specs its API accepted).
GENERATION = {"train_step", "kernel"}
TIMED = {"engine", "workload", "transformers", "static", "openai"}
UNUSED = {"transformers": GENERATION | {"static", "openai"}, "static": GENERATION | {"transformers", "openai"},
          "openai": GENERATION | {"transformers", "static"}, "train_step": TIMED | {"kernel"},
          "kernel": TIMED | {"train_step"}}


def own(spec: dict) -> dict:
    """A spec dumped by 14d1cbb (whole, or its fields set), without the sections its kind and engine never used: what
    it means now."""
    kind = spec.get("kind", "generate")
    runner = spec.get("engine", "transformers") if kind == "generate" else kind
    return {k: v for k, v in spec.items() if k not in UNUSED[runner]}


# The fields RunSpec gained since 14d1cbb, at their defaults: what a whole dump of one of its specs holds now beside
# its own sections.
SINCE = {"environment": "current", "requirements": None, "commit": None}
OPENAI_SINCE = {"head_timeout_s": 60.0}  # the openai section's
TRANSFORMERS_SINCE = {"scheduler": None}  # the transformers section's (issue 50: benchd's split steps)


# Issue 41: a stage's drain (stop.drain_s), and dispatch lag judged against the latencies (new rules; the 1 ms p99,
# the default then, is a ceiling a spec sets now, unset by default); a stage's cut share and its GPUs' slowdown.
VALIDITY_SINCE = {"dispatch_lag_floor_s": 0.001, "max_dispatch_lag_ttft_share": 0.1, "max_cut_share": 0.01,
                  "max_slowdown_share": 0.05,
                  "max_count_disagreement_share": 0.0}  # issue 49: a server's token counts against benchd's
# Issue 49: real requests (workload.prompts), what a generation keeps and scores of its outputs (quality), and a
# server's token counts checked against benchd's (a validity rule).
PROMPTS_SINCE = {"prompts": "auto"}
QUALITY_SINCE = {"quality": {"logprobs": None, "probe": None}}


def whole(spec: dict, document: dict | None = None) -> dict:
    """A whole spec dumped by 14d1cbb, as it is dumped now: its own sections and the fields added since. document:
    what it was made from, where it set fields whose default changed since."""
    out = {**own(spec), **SINCE}
    if "workload" in out:
        out["decide"] = None  # a run on every GPU's rounds (issue 51): a generation's
        workload = out["workload"]
        validity = {**VALIDITY_SINCE, **workload["validity"]}
        if "max_dispatch_lag_p99_s" not in ((document or {}).get("workload") or {}).get("validity", {}):
            validity["max_dispatch_lag_p99_s"] = None
        out["workload"] = {**workload, **PROMPTS_SINCE, "stop": {**workload["stop"], "drain_s": None},
                           "validity": validity}
        if "ignore_eos" not in ((document or {}).get("workload") or {}):  # unset: true then, decided by the prompts
            out["workload"]["ignore_eos"] = None  # now (true for random ids, which every spec of then was sent)
        out.update(QUALITY_SINCE)
    if "openai" in out:
        out["openai"] = {**out["openai"], **OPENAI_SINCE}
    if "transformers" in out:
        out["transformers"] = {**out["transformers"], **TRANSFORMERS_SINCE}
    return out


# ---- daemons --------------------------------------------------------------------------------------

ROOT = Path(__file__).parent.parent
CPU_CACHE = {"block_size": 16, "num_blocks": 64, "max_batch_tokens": 128}


def spec(requests=6, output=8, concurrency=2, duration=None, name="short"):
    stop = {"duration_s": duration} if duration else {"requests": requests}
    return {
        "name": name,
        "transformers": CPU_CACHE,
        "workload": {
            "arrivals": {"profile": "concurrent", "concurrency": concurrency},
            "stop": stop,
            "prompt_tokens": {"dist": "fixed", "value": 8},
            "output_tokens": {"dist": "fixed", "value": output},
        },
    }


LONG = spec(duration=120, output=64, name="long")


NODE = "test-node"  # the node label of daemon()'s series


def daemon(tmp_path, **overrides) -> LiveServer:
    """A live daemon on the tiny model (in its worker process) with a SQLite store, its spool and its workers'
    logs under tmp_path, and no default schedule; its series are labelled hostname=NODE."""
    values = {"database_url": f"sqlite:///{tmp_path}/benchd.db", "device": "cpu", "dtype": "float32",
              "default_schedule": False, "node_name": NODE, "spool_dir": str(tmp_path / "spool"),
              "workers": {"log_dir": str(tmp_path / "workers"), **overrides.pop("workers", {})}, **overrides}
    return LiveServer(create_app(Settings(**values)))


def submit(server, body) -> str:
    response = server.http.post("/runs", json=body)
    assert response.status_code == 202, response.text
    return response.json()["id"]


def serve(tmp_path, port, **env):
    """`benchd serve` in its own process (SQLite under tmp_path), once ready: (process, url)."""
    env = {**os.environ, "BENCHD_DATABASE_URL": f"sqlite:///{tmp_path}/benchd.db", "BENCHD_PORT": str(port),
           "BENCHD_DEVICE": "cpu", "BENCHD_DEFAULT_SCHEDULE": "false", "BENCHD_SPOOL_DIR": str(tmp_path / "spool"),
           "BENCHD_WORKERS__LOG_DIR": str(tmp_path / "workers"), **env}
    # a file, not a pipe: a daemon that logs much never blocks; the daemon's for its life
    log = open(tmp_path / f"serve-{port}.log", "a")  # noqa: SIM115
    process = subprocess.Popen([sys.executable, "-m", "benchd.cli", "serve"], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=log, text=True)
    process.log_path = Path(log.name)
    url = f"http://127.0.0.1:{port}"

    def up():
        try:
            return httpx.get(f"{url}/readyz").status_code == 200
        except httpx.TransportError:
            return False

    wait_for(up, 180, "the daemon to be ready")  # as LiveServer.wait_ready: a worker importing torch under load
    return process, url


def prometheus_query(api: str, expr: str) -> list:
    """A PromQL instant query's result against a real Prometheus's API (…/api/v1); none while it is still starting."""
    try:
        response = httpx.get(f"{api}/query", params={"query": expr}, timeout=10)
    except httpx.TransportError:
        return []
    if response.status_code == 503:
        return []
    body = response.json()
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


# ---- PostgreSQL ---------------------------------------------------------------------------------------


class PostgresServer:
    """A real PostgreSQL server (Debian's package) on a loopback port, in a directory of its own; stop() and
    start() take it down and bring it back on the same port with the same data (a database outage)."""

    def __init__(self) -> None:
        import glob
        import shutil
        import tempfile

        bindirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
        if not bindirs:
            raise RuntimeError("PostgreSQL is not installed: `make test` installs it (apt-get install postgresql)")
        self.bindir = bindirs[-1]
        # The server refuses to run as root: as root, it runs as the postgres user, in a directory it can reach.
        self.as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.base = tempfile.mkdtemp(prefix="benchd-pg-")
        os.chmod(self.base, 0o755)
        if self.as_postgres:
            shutil.chown(self.base, "postgres")
        self.data, self.port = f"{self.base}/data", free_port()
        self.url = f"postgresql+psycopg://benchd@127.0.0.1:{self.port}"

    def _call(self, *args: str) -> None:
        subprocess.run([*self.as_postgres, *args], check=True, capture_output=True, text=True)

    def start(self) -> None:
        self._call(f"{self.bindir}/pg_ctl", "-D", self.data, "-w", "-l", f"{self.base}/log", "-o",
                   f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=off", "start")

    def stop(self) -> None:
        self._call(f"{self.bindir}/pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")

    def create_database(self, name: str, encoding: str = "UTF8") -> str:
        import sqlalchemy as sa

        admin = sa.create_engine(f"{self.url}/postgres", isolation_level="AUTOCOMMIT")
        with admin.connect() as db:
            db.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
            db.execute(sa.text(f"CREATE DATABASE \"{name}\" ENCODING '{encoding}' TEMPLATE template0"))
        admin.dispose()
        return f"{self.url}/{name}"

    def psql(self, database: str, path: Path) -> None:
        subprocess.run([f"{self.bindir}/psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "benchd", "-d",
                        database, "-v", "ON_ERROR_STOP=1", "-q", "-f", str(path)], check=True,
                       capture_output=True, text=True)

    def __enter__(self) -> "PostgresServer":
        self._call(f"{self.bindir}/initdb", "-D", self.data, "-U", "benchd", "--auth=trust", "--no-sync")
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        import shutil

        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass  # already stopped
        shutil.rmtree(self.base, ignore_errors=True)


# ---- a filled store ---------------------------------------------------------------------------------------


def fill_store(url: str, spool_dir: Path, runs: int, workload: str = "filled", node: str = NODE,
               step_every: int = 0, first: int = 0) -> None:
    """A store holding `runs` succeeded runs of one workload on one node, written in bulk (100k in a few seconds),
    each as the daemon stores one: its spec, first stage's figures and summary, metadata and hardware summary.
    step_every: the figures step up and down every that many runs (a series with change points to find); first: the
    index of the first run (its id and time: a minute each from 2026-01-01), to add runs to a filled store."""
    import random
    from datetime import UTC, datetime, timedelta

    import sqlalchemy as sa

    from benchd.measure.summary import summarize
    from benchd.store.database import Store
    from benchd.store.schema import run_stages
    from benchd.store.schema import runs as runs_table

    store = Store(url, spool_dir, node=node)
    store.start()
    assert store.wait_ready(60)
    store.close()
    spec = make_spec(name=workload).model_dump(mode="json")
    summary = summarize("concurrent=4", "succeeded", []).model_dump(mode="json")  # a whole one, its figures set below
    engine = sa.create_engine(url)
    rng = random.Random(0)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with engine.begin() as db:
        for block in range(first, first + runs, 5_000):
            rows, stages = [], []
            for i in range(block, min(block + 5_000, first + runs)):
                itl = 0.010 * (1.1 if step_every and (i // step_every) % 2 else 1.0) * rng.lognormvariate(0, 0.01)
                figures = {"ttft_p50_s": 5 * itl, "ttft_p99_s": 9 * itl, "itl_p50_s": itl, "itl_p99_s": 2 * itl,
                           "tpot_p50_s": itl, "e2e_p99_s": 20 * itl}
                stage = {"stage": "concurrent=4", "status": "succeeded", "requests": 12, "errors": 0,
                         "duration_s": 1.0, "output_tokens_per_s": 4 / itl, "requests_per_s": 12.0,
                         "kv_cache_occupancy_peak": 0.1}
                run_id = f"{workload[:20]}{i:07d}"
                at = start + timedelta(minutes=i)
                rows.append({"id": run_id, "status": "succeeded", "workload": workload, "model": "tiny",
                             "engine": "transformers", "spec": spec, "node": node, "created_at": at,
                             "started_at": at, "finished_at": at + timedelta(seconds=2), "valid": True,
                             "summary": [{**summary, **stage,
                                          **{name: {**summary[name], "count": 12, "p50": p50, "p99": p99}
                                             for name, p50, p99 in (("ttft_s", 5 * itl, 9 * itl),
                                                                    ("itl_s", itl, 2 * itl), ("tpot_s", itl, itl),
                                                                    ("e2e_s", 15 * itl, 20 * itl))}}],
                             "run_metadata": {"device_name": "cpu", "device": "cpu", "environment": "current"},
                             "hardware": {"throttled_fraction": None}, "energy_per_token_j": 0.5 * itl})
                if "seq" in runs_table.c:  # the store's order, where its schema has one (issue 48, 8)
                    rows[-1]["seq"] = i + 1
                stages.append({"run_id": run_id, "stage_index": 0, "gpu": "", **stage, **figures})
            db.execute(runs_table.insert(), rows)
            db.execute(run_stages.insert(), stages)
    engine.dispose()
