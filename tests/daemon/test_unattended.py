"""What a daemon left unattended survives, and what its health says meanwhile: a full disk under its store, a run
loop that stops moving or dies."""

import sqlite3
import threading

import pytest

from tests.helpers import LONG, daemon, fill, spec, submit, wait_for


def test_a_full_disk_pauses_runs_and_never_stops_the_daemon(small_fs, tmp_path):
    """Database, write journal and workers' logs on one small real filesystem (as the chart's state volume holds
    them), filled under a live daemon: the run that ends while it is full and the one that should start keep their
    place and what they measured, POST /runs answers 503 with the reason, the run loop stays alive, and once space
    is freed everything is written and the queued run runs, with no restart."""
    with daemon(tmp_path, database_url=f"sqlite:///{small_fs}/benchd.db", spool_dir=str(small_fs / "spool"),
                workers={"log_dir": str(small_fs / "workers")}) as server:
        server.wait_ready()
        ended = submit(server, LONG)
        server.wait_status(ended, "running")
        wait_for(lambda: server.http.get(f"/runs/{ended}/requests").json(), 60, "requests measured")
        queued = submit(server, spec())
        filler = fill(small_fs)
        # The journal's last page takes a write or two; the running run's records, drained each second, fill it.
        wait_for(lambda: server.http.get("/readyz").json().get("store_held_writes"), 30, "a write the disk refused")

        # While the store cannot take writes: 503 with the reason and Retry-After, never a 500 or a 202.
        refused = server.http.post("/runs", json=spec())
        assert refused.status_code == 503, refused.text
        assert "No space left on device" in refused.json()["detail"] and int(refused.headers["retry-after"]) > 0

        # The run in flight ends (its end written as the disk is full): its URL says so from memory.
        assert server.http.delete(f"/runs/{ended}").json()["status"] == "cancelling"
        run = server.wait_status(ended, "cancelled", timeout_s=60, records=False)
        assert run["summary"][0]["requests"] > 0
        held = server.http.get(f"/runs/{ended}/requests")  # its last records are held with its end: not a short list
        assert held.status_code == 503 and "not in the database yet" in held.json()["detail"], held.text
        # The loop lives on, the daemon is alive and says why it is not ready; the queued run waits for the store.
        assert server.http.get("/healthz").status_code == 200
        ready = server.http.get("/readyz")
        assert ready.status_code == 503 and ready.json()["alive"]
        assert any("No space left on device" in reason for reason in ready.json()["reasons"])
        assert server.http.get(f"/runs/{queued}").json()["status"] == "queued"

        filler.unlink()  # space again: what was held is written, the queued run starts, with no restart
        run = server.wait_status(queued, "succeeded", "failed", timeout_s=120)
        assert run["status"] == "succeeded", run["error"]
        wait_for(lambda: server.http.get("/readyz").status_code == 200, 60, "ready again")
        store = server.app.state.services.store
        assert store.flush(30)
        stored = store.get_run(ended)
        assert stored["status"] == "cancelled" and stored["summary"][0]["requests"] > 0
        assert len(store.request_rows(ended)) >= stored["summary"][0]["requests"]
        assert server.http.post("/runs", json=spec()).status_code == 202


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """A daemon whose liveness allows its run loop 3 s without moving (the last test here stops its loop)."""
    where = tmp_path_factory.mktemp("unattended")
    with daemon(where, liveness_timeout_s=3) as server:
        server.where = where
        yield server


def test_a_runs_url_answers_from_its_202_while_the_database_is_locked(live):
    """Another process holds SQLite's write lock (a backup, an operator's sqlite3): the run is queued, its 202 sent
    once the database has not taken it within 2 s, and its URL answers from its journaled write meanwhile."""
    locker = sqlite3.connect(live.where / "benchd.db", isolation_level=None)
    try:
        locker.execute("BEGIN IMMEDIATE")
        created = live.http.post("/runs", json=spec())
        assert created.status_code == 202, created.text
        run = live.http.get(created.json()["url"])
        assert run.status_code == 200 and run.json()["status"] in ("queued", "running"), run.text
        assert live.http.delete(created.headers["location"]).status_code == 200
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    store = live.app.state.services.store
    assert store.flush(30) and store.unapplied.run(created.json()["id"]) is None  # all in the database now


def test_healthz_fails_once_the_run_loop_stops_moving_or_dies(live):
    """The liveness probe's answer: 503 with why once the run loop has not moved for BENCHD_LIVENESS_TIMEOUT_S (here
    a wait that never returns), and once it has died (here from what no boundary catches)."""
    assert live.http.get("/healthz").json() == {"status": "ok"}
    loop, released = live.app.state.services.daemon, threading.Event()

    def wedged(*args, **kwargs):
        released.wait()
        raise SystemExit

    loop.queue.take = wedged
    wait_for(lambda: live.http.get("/healthz").status_code == 503, 30, "liveness to fail")
    assert "has not moved for" in live.http.get("/healthz").json()["reason"]
    released.set()
    wait_for(lambda: live.http.get("/healthz").json().get("reason") == "the run loop has stopped", 10)
    assert not live.http.get("/readyz").json()["alive"]
    refused = live.http.post("/runs", json=spec())  # never a 202 for a run no loop will take
    assert refused.status_code == 503 and "the run loop has stopped" in refused.json()["detail"]
