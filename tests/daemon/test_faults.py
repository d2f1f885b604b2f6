"""Faults that must not stop the daemon or lose what it measured: a database outage mid-run, a kill -9."""

import os
import signal
import time

import httpx

from benchd.store.database import Store
from benchd.supervisor.orphans import live as running
from tests.helpers import PostgresServer, daemon, free_port, serve, spec, submit, wait_for


def test_postgresql_down_and_back_during_a_run_loses_no_request(tmp_path):
    with PostgresServer() as pg:
        url = pg.create_database("outage")
        with daemon(tmp_path, database_url=url, spool_dir=str(tmp_path / "spool")) as server:
            server.wait_ready()
            body = spec(duration=6, output=16, name="outage")
            body["workload"]["arrivals"] = {"profile": "poisson", "rate": 25}
            run_id = submit(server, body)
            server.wait_status(run_id, "running")
            time.sleep(1.0)
            pg.stop()
            wait_for(lambda: server.http.get("/readyz").json()["store"] == "degraded", 20, "a degraded store")
            assert server.http.get("/readyz").status_code == 200  # it still runs benchmarks
            assert server.http.get(f"/runs/{run_id}").status_code == 503  # reads wait for the database
            time.sleep(4.0)  # the run ends while the database is down
            pg.start()
            run = server.wait_status(run_id, "succeeded", timeout_s=60)  # its end read from the journal at once
            stage = run["summary"][0]
            # its records once the database has them all (503 with Retry-After until then, never a short list)
            wait_for(lambda: server.http.get(f"/runs/{run_id}/requests").status_code == 200, 60, "its records")
            rows = server.http.get(f"/runs/{run_id}/requests").json()
            assert stage["requests"] > 100 and len(rows) == stage["requests"] + stage["errors"]
            assert all(r["arrival_s"] and sum(r["arrival_tokens"]) == 16 for r in rows if r["error"] is None)
            assert server.http.get("/readyz").json()["store"] == "ok"
            after = server.wait_status(submit(server, spec(requests=4)), "succeeded")
            assert after["summary"][0]["requests"] == 4


def test_kill_9_mid_run_keeps_the_rows_written_before_it(tmp_path):
    port = free_port()
    process, url = serve(tmp_path, port, BENCHD_SPOOL_DIR=str(tmp_path / "spool"))
    try:
        http = httpx.Client(base_url=url, timeout=30)
        long = spec(duration=120, output=16, concurrency=2, name="killed")
        run_id = http.post("/runs", json=long).json()["id"]
        wait_for(lambda: len(http.get(f"/runs/{run_id}/requests").json()) >= 20, 60, "rows written mid-run")
        workers = [w["pid"] for w in http.get("/readyz").json()["workers"]]
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
    # read before the restart
    written = Store(f"sqlite:///{tmp_path}/benchd.db", tmp_path / "reader-spool").request_rows(run_id)
    # Its worker does not outlive it (the engine's threads kept it alive, holding the model, before)
    assert workers
    wait_for(lambda: all(not running(pid) for pid in workers), 30, "the killed daemon's worker to exit")

    process, url = serve(tmp_path, port, BENCHD_SPOOL_DIR=str(tmp_path / "spool"))
    try:
        run = httpx.get(f"{url}/runs/{run_id}").json()
        assert run["status"] == "interrupted" and run["error_stage"] == "run"
        rows = httpx.get(f"{url}/runs/{run_id}/requests").json()
        assert len(rows) >= len(written) >= 20  # the journal may hold a flush the database had not applied
        (stage,) = run["summary"]
        assert stage["requests"] == sum(1 for r in rows if r["error"] is None and not r["warmup"])
        assert stage["output_tokens"] == sum(sum(r["arrival_tokens"]) for r in rows)
    finally:
        process.terminate()
        process.wait(30)


def test_a_worker_hung_past_its_daemons_kill_is_ended_by_the_next_daemon(tmp_path):
    # A hang that holds the interpreter: the worker's own exit timer cannot run, so it would hold its device for good
    port, workers_dir = free_port(), tmp_path / "workers"
    process, url = serve(tmp_path, port, BENCHD_FAULTS__WORKLOAD="hung", BENCHD_FAULTS__ACTION="hang",
                         BENCHD_FAULTS__AFTER_S="0.5")
    try:
        http = httpx.Client(base_url=url, timeout=30)
        run_id = http.post("/runs", json=spec(duration=60, output=16, concurrency=2, name="hung")).json()["id"]
        wait_for(lambda: http.get(f"/runs/{run_id}").json()["status"] == "running", 60, "the run to start")
        (hung,) = [w["pid"] for w in http.get("/readyz").json()["workers"]]
        assert [p.name for p in workers_dir.glob("*.pid")] == [f"worker.{hung}.pid"]
        time.sleep(2.0)  # the fault has fired
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
    time.sleep(1.0)
    assert running(hung)  # orphaned, and it stays

    process, url = serve(tmp_path, port)
    try:
        assert not running(hung)
        assert f"worker pid {hung} (worker.{hung}) outlived its daemon" in process.log_path.read_text()
        (worker,) = httpx.get(f"{url}/readyz").json()["workers"]
        assert [p.name for p in workers_dir.glob("*.pid")] == [f"worker.{worker['pid']}.pid"]
    finally:
        process.terminate()
        process.wait(30)
    assert not list(workers_dir.glob("*.pid"))  # a daemon that stops forgets its workers' files

