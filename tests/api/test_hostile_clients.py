"""Clients that attack the daemon (issue 45), each as the report tried it on a live daemon: files under the roots
that block or are not text, a flood of comparisons measured by /readyz's latency during it, listings of runs whose
stored specs are large measured by the daemon's RSS, specs asking for what the daemon cannot give, a scheduled
matrix that never fits the queue. Nothing stalls or swells the daemon; each gets a clear answer."""

import concurrent.futures
import copy
import json
import os
import re
import threading
import time
from dataclasses import replace

import httpx
import pytest
import sqlalchemy as sa

from benchd.admission import traces as trace_reads
from benchd.daemon.inprocess import run_local
from benchd.measure.outcome import RunOutcome
from benchd.spec import traces
from benchd.store.database import Store, StoreUnavailable
from benchd.store.writer import StageRequests
from tests.helpers import NODE, daemon, free_port, make_spec, peak_rss, serve, spec, submit, wait_for

pytestmark = pytest.mark.timeout(300)

TOKEN = "attack-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
QUEUE = 3
NEVER_FITS = {"name": "never-fits", "spec": spec(requests=2), "interval_s": 0.3,
              "matrix": {"label": ["x", "y"]}, "repeats": 2}  # 4 runs, a queue of 3


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    return tmp_path_factory.mktemp("roots")


@pytest.fixture(scope="module")
def server(tmp_path_factory, roots):
    tmp = tmp_path_factory.mktemp("daemon")
    with daemon(tmp, model_roots=[str(roots)], api_token=TOKEN, queue_max=QUEUE, schedules=[NEVER_FITS],
                limits={"max_trace_bytes": 16 << 20, "memory_bytes": 1 << 30},
                http={"probe_port": free_port()}) as server:
        server.http.headers.update(AUTH)
        server.wait_ready()
        yield server


def trace_spec(path, **workload):
    return {"name": "replay", "transformers": {"block_size": 16, "num_blocks": 64, "max_batch_tokens": 128},
            "workload": {"arrivals": {"profile": "trace", "path": str(path)}, **workload}}


def problems(response) -> list[str]:
    assert response.status_code == 422, response.text
    return [f"{'.'.join(map(str, p['loc']))}: {p['msg']}" for p in response.json()["detail"]]


# ---- files a spec points at ------------------------------------------------------------------------------------


def test_a_fifo_under_the_roots_is_refused_at_once_and_nothing_waits_for_a_writer(server, roots):
    # 46 such POSTs held /readyz, /metrics and POST /runs until a writer came (six threads for 37 minutes).
    fifo = roots / "trace.fifo"
    os.mkfifo(fifo)
    try:
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            posts = [pool.submit(httpx.post, f"{server.url}/runs", json=trace_spec(fifo), headers=AUTH, timeout=10)
                     for _ in range(12)]
            started = time.monotonic()
            assert server.http.get("/readyz", timeout=5).status_code == 200
            answers = [post.result() for post in posts]
        assert time.monotonic() - started < 8
        for answer in answers:
            assert problems(answer) == [f"body.workload.arrivals.path: {fifo}: not a regular file (a FIFO)"]
    finally:  # a reader still blocked in open() (the daemon before issue 45) is let go
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass


def test_a_trace_that_is_not_text_too_large_or_with_an_endless_line_is_a_422_naming_it(server, roots):
    binary = roots / "binary.jsonl"
    binary.write_bytes(b'{"offset_s":0,"prompt_tokens":8,"output_tokens":4}\n\xff\n')  # a 500 before issue 45
    assert problems(server.http.post("/runs", json=trace_spec(binary))) == [
        f"body.workload.arrivals.path: {binary} line 2 is not UTF-8 (invalid start byte at byte 1 of the line)"]
    large = roots / "large.jsonl"
    with large.open("wb") as f:
        f.truncate(17 << 20)  # refused by its size: never read
    assert problems(server.http.post("/runs", json=trace_spec(large))) == [
        f"body.workload.arrivals.path: {large} holds 17,825,792 bytes, more than 16,777,216 "
        "(BENCHD_LIMITS__MAX_TRACE_BYTES)"]
    line = roots / "line.jsonl"
    line.write_bytes(b'{"offset_s": 0, "pad": "' + b"x" * (4 << 20) + b'"}\n')  # one line, read whole before
    assert problems(server.http.post("/runs", json=trace_spec(line))) == [
        f"body.workload.arrivals.path: {line} line 1 is longer than 64 KiB"]


def test_a_trace_is_read_once_by_a_reader_thread_within_its_deadline(server, roots, monkeypatch):
    path = roots / "long.jsonl"
    path.write_text("".join(json.dumps({"offset_s": i * 1e-4, "prompt_tokens": 8, "output_tokens": 4}) + "\n"
                            for i in range(100_000)))
    reads = []
    items = traces._items

    def counted(*args):
        reads.append(threading.current_thread().name)
        return items(*args)

    monkeypatch.setattr(traces, "_items", counted)
    body = trace_spec(path, stop={"requests": 2}, output_tokens={"dist": "fixed", "value": 2})
    monkeypatch.setattr(trace_reads, "TRACE_READ_S", 0.02)  # a 10⁶-line trace took 63 s to admit, read four times
    (late,) = problems(server.http.post("/runs", json=body))
    assert re.fullmatch(rf"body\.workload\.arrivals\.path: {path} was not read in time \([\d,]+ lines read\): "
                        r"admission reads a trace within 0\.02 s", late), late
    monkeypatch.setattr(trace_reads, "TRACE_READ_S", 30.0)
    reads.clear()
    run_id = submit(server, body)
    assert len(reads) == 1 and reads[0].startswith("benchd-trace")  # once, off the HTTP threads (the worker: its own)
    server.http.delete(f"/runs/{run_id}")
    monkeypatch.setattr(trace_reads, "_reading", threading.BoundedSemaphore(1))
    trace_reads._reading.acquire()  # every reader busy: no queue, a 503
    refused = server.http.post("/runs", json=body)
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "5", refused.text


def test_a_trace_stage_is_named_after_its_file(server, roots):
    # The worker reads a confined trace through its opened descriptor: the stage was labelled "trace:6".
    path = roots / "replay.jsonl"
    path.write_text("".join(json.dumps({"offset_s": i * 0.01, "prompt_tokens": 8, "output_tokens": 3}) + "\n"
                            for i in range(3)))
    run = server.wait_status(submit(server, trace_spec(path)), "succeeded", "failed")
    assert run["status"] == "succeeded", run["error"]
    assert [s["stage"] for s in run["summary"]] == ["trace:replay.jsonl"]


# ---- reads -----------------------------------------------------------------------------------------------------


LARGE = {"name": "large", "engine": "openai", "model": "m", "openai": {"extra_body": {"pad": "x" * (1 << 20)}},
         "workload": {"stop": {"requests": 1}, "dataset": {"format": "jsonl", "path": "/p.jsonl"}}}


@pytest.fixture(scope="module")
def stored(tmp_path_factory, tiny):
    """A daemon in its own process (its latency and memory its own), over a store holding 40 runs of 20 requests
    (one run's records, stored 40 times) and 30 runs whose specs are ~1 MB each: (url, process, run ids)."""
    tmp = tmp_path_factory.mktemp("stored")
    outcome = run_local(make_spec(workload={"stop": {"requests": 20}, "output_tokens": {"dist": "fixed", "value": 4}}),
                        loaded=tiny)
    assert outcome.status == "succeeded"
    store = Store(f"sqlite:///{tmp}/benchd.db", tmp / "spool")
    store.start()
    assert store.wait_ready(30)
    ids = [f"run{i:02d}" for i in range(40)]
    for run_id in ids:
        store.create_run(run_id, outcome.spec.model_dump(mode="json"))
        writer = store.requests_writer(run_id)
        writer.close((StageRequests(i, s.label, s.start_s), s.records) for i, s in enumerate(outcome.stages))
        store.finish_run(replace(RunOutcome.of(run_id, outcome), hardware=None, timeline=None))
    for i in range(30):
        store.create_run(f"large{i:02d}", LARGE)
    store.create_matrix("large-matrix", "large", {**LARGE, "matrix": {"seed": [0, 1]}}, [], [], 0)
    assert store.flush()
    store.close()
    process, url = serve(tmp, free_port(), BENCHD_READS__COMPARE_SLOTS="1", BENCHD_READS__COMPARE_MAX_REQUESTS="600",
                         BENCHD_READS__PAGE_MAX_BYTES=str(1 << 16))
    try:
        yield url, process, ids
    finally:
        process.terminate()
        process.wait(60)


@pytest.mark.quiet
def test_a_flood_of_comparisons_leaves_the_daemon_answering(stored):
    # 45 comparisons at once held /readyz and /metrics for 60 s and turned pool timeouts into 500s.
    url, _, runs = stored
    flood = [{"a": ",".join([runs[0]] * 100), "b": ",".join([runs[1]] * 100)}] * 45
    flood += [{"a": ",".join(runs[:15]), "b": ",".join(runs[15:30])}] * 45
    latencies, done = [], threading.Event()

    def probe():
        while not done.is_set():
            started = time.monotonic()
            try:
                ok = httpx.get(f"{url}/readyz", timeout=5).status_code == 200
            except httpx.TransportError:
                ok = False
            latencies.append(time.monotonic() - started if ok else float("inf"))
            time.sleep(0.05)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(30) as pool:
            answers = list(pool.map(lambda params: httpx.get(f"{url}/compare", params=params, timeout=60), flood))
    finally:
        done.set()
        prober.join()
    statuses = [a.status_code for a in answers]
    assert set(statuses[:45]) == {422}
    assert set(statuses[45:]) <= {200, 503} and 200 in statuses[45:], statuses
    assert all(a.headers["Retry-After"] == "5" for a in answers if a.status_code == 503)
    # Every probe answered (before: each timed out for a minute), most at once; a few wait for the machine (2 cores).
    latencies.sort()
    assert len(latencies) >= 5 and latencies[-1] < 5 and latencies[len(latencies) // 2] < 0.5, latencies


def test_compare_refuses_repeated_and_empty_ids_and_more_requests_than_it_loads(stored):
    url, _, runs = stored
    a, b = runs[0], runs[1]
    # The same two runs 100 times a side turned "no significant change" into "slower" (and cost 28 s of CPU).
    repeated = httpx.get(f"{url}/compare", params={"a": ",".join([a] * 100), "b": ",".join([b] * 100)})
    assert problems(repeated) == [f"query.a: run {a} given more than once: each run counts once"]
    empty = httpx.get(f"{url}/compare", params={"a": ",,,", "b": ",,"})  # answered 200 with empty sides
    assert problems(empty) == ["query.a: an empty run id: give run ids separated by single commas"]
    assert problems(httpx.get(f"{url}/compare", params={"a": ",".join(runs[:16]), "b": ",".join(runs[16:32])})) == [
        "query.b: the two sides hold 640 requests, more than a comparison loads (600, "
        "BENCHD_READS__COMPARE_MAX_REQUESTS): compare fewer runs"]
    assert httpx.get(f"{url}/compare", params={"a": a, "b": b}, timeout=60).status_code == 200


def test_listing_runs_with_large_specs_does_not_swell_the_daemon(stored):
    # 60 stored specs of ~1 MB: eight GET /runs?limit=500 at once took the daemon from 184 MB to 2.14 GB.
    url, process, _ = stored
    with peak_rss(process.pid) as peak, concurrent.futures.ThreadPoolExecutor(8) as pool:
        pages = list(pool.map(lambda _: httpx.get(f"{url}/runs", params={"workload": "large", "limit": 500},
                                                  timeout=120).json(), range(8)))
    before = peak[0]
    assert max(peak) - before < 100 << 20, (before >> 20, max(peak) >> 20)
    assert all(len(page["items"]) == 30 for page in pages)
    assert all(item["spec"] is None and item["omitted"] == ["spec"] for item in pages[0]["items"])
    whole = httpx.get(f"{url}/runs/large00", timeout=30).json()
    assert len(whole["spec"]["openai"]["extra_body"]["pad"]) == 1 << 20  # the run itself still has it all
    (matrix,) = httpx.get(f"{url}/matrices").json()  # matrices are listed alike
    assert matrix["document"] is None and matrix["omitted"] == ["document"] and matrix["runs"] == []
    whole = httpx.get(f"{url}/matrices/large-matrix").json()
    assert len(whole["document"]["openai"]["extra_body"]["pad"]) == 1 << 20 and whole["omitted"] == []


def test_run_pages_are_bounded_in_bytes_and_page_on(stored):
    url, _, _ = stored
    seen, offset, pages = [], 0, 0
    while offset is not None:
        page = httpx.get(f"{url}/runs", params={"limit": 500, "offset": offset}).json()
        seen += [item["id"] for item in page["items"]]
        assert page["items"] and (page["next_offset"] is None or page["next_offset"] == offset + len(page["items"]))
        offset, pages = page["next_offset"], pages + 1
    assert pages > 1 and len(seen) == len(set(seen)) == page["total"]  # 64 KiB a page: several pages


def test_a_pool_timeout_is_unavailable_not_an_error(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/benchd.db", tmp_path / "spool")
    store.start()
    assert store.wait_ready(30)
    store.engine = sa.create_engine(f"sqlite:///{tmp_path}/benchd.db", pool_size=1, max_overflow=0, pool_timeout=0.2)
    held = store.engine.connect()
    try:
        with pytest.raises(StoreUnavailable, match="the database is busy"):
            store.get_run("x")
    finally:
        held.close()
        store.close()


def test_reads_need_the_token_when_the_setting_says_so(server):
    reads = server.app.state.services.settings.reads
    reads.need_token = True
    try:
        for path in ("/runs", "/schedules", "/baselines", "/matrices", "/compare?a=x&b=y"):
            assert httpx.get(f"{server.url}{path}").status_code == 401, path
            assert httpx.get(f"{server.url}{path}", headers=AUTH).status_code != 401, path
        for path in ("/healthz", "/readyz", "/metrics"):
            assert httpx.get(f"{server.url}{path}").status_code == 200, path
    finally:
        reads.need_token = False
    assert httpx.get(f"{server.url}/runs").status_code == 200


def test_probes_and_scrapes_take_no_thread_of_the_pool(server, monkeypatch):
    # Issue 48: get_services was a sync dependency, so /metrics and /readyz waited for a thread of the pool behind
    # every client request (200 clients on GET /runs: /metrics p99 2.6 s). Here every thread is held by a listing.
    services = server.app.state.services
    release, holding, lock = threading.Event(), [0], threading.Lock()
    list_runs = services.store.list_runs

    def held(*args, **kwargs):
        with lock:
            holding[0] += 1
        release.wait(60)
        return list_runs(*args, **kwargs)

    monkeypatch.setattr(services.store, "list_runs", held)
    threads = services.settings.http.threads
    probes = f"http://127.0.0.1:{services.settings.http.probe_port}"
    with concurrent.futures.ThreadPoolExecutor(threads + 4) as pool:
        listings = [pool.submit(httpx.get, f"{server.url}/runs", timeout=90) for _ in range(threads + 4)]
        try:
            wait_for(lambda: holding[0] == threads, 30, "every thread of the pool held")
            for url in (server.url, probes):
                for path in ("/metrics", "/readyz", "/healthz"):
                    assert httpx.get(f"{url}{path}", timeout=10).status_code == 200, (url, path)
            assert holding[0] == threads  # the listings beyond the pool's threads still wait for one
        finally:
            release.set()
        assert all(listing.result().status_code == 200 for listing in listings)


# ---- what a spec makes the daemon hold -------------------------------------------------------------------------


def test_admission_counts_what_a_spec_makes_the_daemon_hold(server):
    def refused(**changes):
        body = copy.deepcopy(spec(requests=2))  # (its transformers section is shared)
        for key, value in changes.items():
            section, _, field = key.partition("__")
            if field:
                body.setdefault(section, {})[field] = value
            else:
                body["workload"][section] = value
        return problems(server.http.post("/runs", json=body))

    assert "list.values: List should have at most 4096 items" in refused(
        output_tokens={"dist": "list", "values": [4] * 5000})[0]
    assert "Input should be less than or equal to 4096" in refused(transformers__cpu_threads=2**31 - 1)[0]
    cores = len(os.sched_getaffinity(0))
    assert refused(transformers__cpu_threads=cores + 1) == [
        f"body.transformers.cpu_threads: {cores + 1} threads, more than the {cores} cores the worker of cpu may use"]
    sweep = {"profile": "sweep", "over": "concurrent", "values": [1] * 32}
    assert refused(arrivals=sweep, stop={"duration_s": 3599}) == [
        "body.workload.stop.duration_s: 32 stages last up to 172,752 s together (their warm-up, sending and drain), "
        "beyond the limit of 14400 s a run "
        "(BENCHD_LIMITS__MAX_RUN_DURATION_S)"]
    openai = {"name": "oa", "engine": "openai", "model": "m",
              "workload": {"stop": {"requests": 1}, "dataset": {"format": "jsonl", "path": "/p.jsonl"}}}
    for options, field in (({"client_processes": 64}, "client_processes"),
                           ({"base_url": "http://127.0.0.1:1/v1 x"}, "base_url"),
                           ({"base_url": "http://127.0.0.1:1/v1\r\nX: y"}, "base_url"),
                           ({"stall_timeout_s": 1e12}, "stall_timeout_s"),
                           ({"connect_timeout_s": 1e12}, "connect_timeout_s")):
        found = problems(server.http.post("/runs", json={**openai, "openai": options}))
        assert any(p.startswith(f"body.openai.{field}") for p in found), (options, found)
    assert "64 client processes hold about 2.00 GiB, more than the 1.00 GiB of host RAM a run may use" in " ".join(
        problems(server.http.post("/runs", json={**openai, "openai": {"client_processes": 64}})))


def test_a_scheduled_matrix_that_cannot_be_queued_skips_its_tick_and_stores_nothing(server):
    # Each tick stored a matrix "cancelled: the run queue had no room for its runs".
    wait_for(lambda: next(s for s in server.http.get("/schedules").json() if s["name"] == "never-fits")["skipped"] >= 3,
             30, "three skipped ticks")
    assert server.http.get("/matrices").json() == []
    skipped = [line for line in server.http.get("/metrics").text.splitlines()
               if line.startswith('benchd_schedule_ticks_skipped_total{') and 'reason="queue_full"' in line]
    assert skipped and float(skipped[0].split()[-1]) >= 3, skipped
    assert f'hostname="{NODE}"' in skipped[0]

