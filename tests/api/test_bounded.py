"""Issue 48's clients, each as its report tried it on a live daemon (`benchd serve` in a process of its own, under
`ulimit -n 1024`, over a store of 10,000 runs): 1,100 half-open sockets, 80 histories of 10,000 runs at once,
schedules without end. The daemon's descriptors, memory and answers stay bounded; /metrics answers throughout."""

import concurrent.futures
import os
import resource
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import httpx
import psutil
import pytest

from tests.helpers import ROOT, fill_store, free_port, peak_rss, wait_for

# Timings and the daemon's memory: alone on the machine (make test runs these after the rest).
pytestmark = [pytest.mark.quiet, pytest.mark.timeout(600)]

RUNS = 10_000
HEAD_TIMEOUT_S = 2
SCHEDULES_MAX = 5
BODY = {"name": "s", "transformers": {"block_size": 16, "num_blocks": 64, "max_batch_tokens": 128},
        "workload": {"stop": {"requests": 2}}}


def _descriptors_1024() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))  # `ulimit -n 1024`: soft and hard


@pytest.fixture(scope="module")
def bounded(tmp_path_factory):
    """(process, main URL, probe URL) of a daemon under a descriptor limit of 1,024, over RUNS runs of `filled`."""
    tmp = tmp_path_factory.mktemp("bounded")
    url = f"sqlite:///{tmp}/benchd.db"
    fill_store(url, tmp / "spool", RUNS)
    port, probe_port = free_port(), free_port()
    env = {**os.environ, "BENCHD_DATABASE_URL": url, "BENCHD_PORT": str(port), "BENCHD_DEVICE": "cpu",
           "BENCHD_DEFAULT_SCHEDULE": "false", "BENCHD_SPOOL_DIR": str(tmp / "spool"),
           "BENCHD_WORKERS__LOG_DIR": str(tmp / "workers"), "BENCHD_HTTP__PROBE_PORT": str(probe_port),
           "BENCHD_HTTP__HEAD_TIMEOUT_S": str(HEAD_TIMEOUT_S), "BENCHD_SCHEDULES_MAX": str(SCHEDULES_MAX)}
    log = open(tmp / "serve.log", "w")  # noqa: SIM115 (the daemon's for its life)
    process = subprocess.Popen([sys.executable, "-m", "benchd.cli", "serve"], cwd=ROOT, env=env, stdout=log,
                               stderr=log, preexec_fn=_descriptors_1024)
    process.log_path = tmp / "serve.log"
    main, probes = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{probe_port}"

    def up() -> bool:
        try:
            return httpx.get(f"{main}/healthz").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(up, 120, "the daemon to answer")
        yield SimpleNamespace(process=process, main=main, probes=probes, url=url, tmp=tmp)
    finally:
        process.terminate()
        process.wait(60)


def test_half_open_sockets_past_the_descriptor_limit_leave_metrics_answering(bounded):
    # 1,100 half-open sockets under ulimit -n 1024 made every endpoint unreachable, and the sampler logged EMFILE.
    process, main, probes = bounded.process, bounded.main, bounded.probes
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))  # the attacker's own
    port = int(main.rsplit(":", 1)[1])
    held = []
    try:
        for i in range(1_100):  # a hundred every 50 ms: held, not a SYN flood (the listen queue never overflows)
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            held.append(s)
            if i % 100 == 99:
                time.sleep(0.05)
        time.sleep(0.5)
        sent = []
        for s in held:
            try:
                s.send(b"GET /runs HTTP/1.1\r\nHost: benchd\r\n")  # a head that never ends
                sent.append(s)
            except OSError:
                pass  # closed already: the daemon made room
        time.sleep(0.5)
        for url in (f"{main}/metrics", f"{probes}/metrics", f"{main}/readyz", f"{probes}/healthz"):
            started = time.monotonic()
            answer = httpx.get(url, timeout=5)
            assert answer.status_code in (200, 503) and time.monotonic() - started < 1.0, (url, answer.status_code)
        assert psutil.Process(process.pid).num_fds() < 1024 - 64  # room kept for its own files
        # Each closed: evicted for a newcomer, or a 408 once its head was late (those accepted last, a head
        # timeout after they were).
        deadline, open_ = time.monotonic() + HEAD_TIMEOUT_S + 5, list(sent)
        while open_ and time.monotonic() < deadline:
            time.sleep(0.2)
            left = []
            for s in open_:
                try:
                    data = s.recv(256)
                except BlockingIOError:
                    left.append(s)
                except OSError:
                    pass
                else:
                    assert data == b"" or data.startswith(b"HTTP/1.1 408 "), data
            open_ = left
        assert not open_, f"{len(open_)} of the {len(sent)} sockets that sent a head are still open"
    finally:
        for s in held:
            s.close()
    assert "Too many open files" not in process.log_path.read_text()


def test_histories_are_built_a_few_at_a_time_kept_and_the_daemon_returns_to_idle(bounded):
    # 80 at once of /history?limit=10000 took the daemon to 1.8 GB (30 at once: 1,061 MB, 710 MB kept after).
    process, main = bounded.process, bounded.main
    daemon = psutil.Process(process.pid)
    assert httpx.get(f"{main}/history/filled", params={"limit": 100}, timeout=60).status_code == 200  # imports
    with peak_rss(process.pid) as peak, concurrent.futures.ThreadPoolExecutor(80) as pool:
        answers = list(pool.map(lambda _: httpx.get(f"{main}/history/filled", params={"limit": RUNS}, timeout=120),
                                range(80)))
    idle = peak[0]
    time.sleep(1.0)
    after = daemon.memory_info().rss
    # Two builds at once (about 40 MB each here) and the answers kept (64 MiB at most): far from 80 builds' 2 GB.
    assert max(peak) - idle < 300 << 20, (idle >> 20, max(peak) >> 20, after >> 20)
    assert after - idle < 150 << 20, (idle >> 20, max(peak) >> 20, after >> 20)
    statuses = [a.status_code for a in answers]
    assert set(statuses) <= {200, 503} and 200 in statuses and 503 in statuses, statuses
    assert all(a.headers["Retry-After"] == "5" and "BENCHD_READS__HISTORY_SLOTS" in a.json()["detail"]
               for a in answers if a.status_code == 503)
    (series,) = next(a for a in answers if a.status_code == 200).json()["series"]
    assert series["runs"] == RUNS
    # Kept: the same answer again, at once, while the series is as it was.
    started = time.monotonic()
    again = httpx.get(f"{main}/history/filled", params={"limit": RUNS}, timeout=60)
    assert again.status_code == 200 and time.monotonic() - started < 5
    assert again.content == next(a for a in answers if a.status_code == 200).content
    # A new run of the workload: the kept answer is not served again.
    fill_store(bounded.url, bounded.tmp / "another-spool", 1, first=RUNS)
    newer = httpx.get(f"{main}/history/filled", params={"limit": RUNS}, timeout=60).json()
    (points,) = {len(f["points"]) for f in newer["series"][0]["figures"]}
    assert points == RUNS and newer["series"][0]["figures"][0]["points"][-1]["run_id"] == f"filled{RUNS:07d}"


def test_schedules_are_capped_and_listed_by_pages(bounded):
    main = bounded.main
    # 3,000 schedules made a 70 MB answer of GET /schedules in 5.2 s.
    for i in range(SCHEDULES_MAX):
        answer = httpx.post(f"{main}/schedules", json={"name": f"s{i}", "spec": BODY, "interval_s": 3600,
                                                       "enabled": False}, timeout=30)
        assert answer.status_code == 201, answer.text
    refused = httpx.post(f"{main}/schedules", json={"name": "one-more", "spec": BODY, "interval_s": 3600}, timeout=30)
    assert refused.status_code == 409 and "BENCHD_SCHEDULES_MAX" in refused.json()["detail"], refused.text
    replaced = httpx.post(f"{main}/schedules", json={"name": "s0", "spec": BODY, "interval_s": 60, "enabled": False},
                          timeout=30)
    assert replaced.status_code == 201  # a schedule replaced by its name is no new one
    seen, url, pages = [], f"{main}/schedules?limit=2", 0
    while url:
        page = httpx.get(url, timeout=30)
        assert page.status_code == 200 and page.headers["X-Total-Count"] == str(SCHEDULES_MAX)
        seen += [s["name"] for s in page.json()]
        link = page.headers.get("Link")
        url = main + link[1:link.index(">")] if link else None
        pages += 1
    assert seen == [f"s{i}" for i in range(SCHEDULES_MAX)] and pages == 3
    assert httpx.get(f"{main}/schedules", params={"limit": 501}).status_code == 422
