"""The run history store on SQLite and on a real PostgreSQL server: one schema, same answers, migrations from
what the last release wrote, and a journal that keeps every write through an outage."""

import contextlib
import json
import sqlite3
import time
from dataclasses import replace
from datetime import timedelta

import pytest

from benchd.daemon.inprocess import run_local
from benchd.measure.outcome import RunOutcome
from benchd.measure.records import RequestRecord
from benchd.spec import validate_spec
from benchd.spec.matrix import parse_matrix
from benchd.store import migrate
from benchd.store.database import Store, StoreUnavailable
from benchd.store.writer import StageRequests
from tests.helpers import ROOT, PostgresServer, daemon, fill, make_spec, own, wait_for, whole
from tests.openai_server import OpenAIServer

FIXTURES = ROOT / "tests" / "data"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/benchd.db"
    return request.getfixturevalue("postgres_url")


def open_store(url, tmp_path, **kwargs) -> Store:
    store = Store(url, spool_dir=tmp_path / "spool", **kwargs)
    store.start()
    assert store.wait_ready(30)
    return store


@pytest.fixture(scope="module")
def outcome(tiny):
    return run_local(make_spec(workload={"warmup": {"requests": 2}, "stop": {"requests": 5}}), loaded=tiny)


def finish(store, run_id, outcome):
    writer = store.requests_writer(run_id)
    writer.close((StageRequests(i, s.label, s.start_s), s.records) for i, s in enumerate(outcome.stages))
    store.finish_run(replace(RunOutcome.of(run_id, outcome), hardware=None, timeline={"load": []}))


def test_a_run_round_trips_with_every_stamp(store_url, outcome, tmp_path):
    store = open_store(store_url, tmp_path)
    spec = outcome.spec.model_dump(mode="json")
    store.create_run("r1", spec, schedule="nightly")
    assert store.get_run("r1")["status"] == "queued"
    store.mark_running("r1")
    finish(store, "r1", outcome)
    assert store.flush()
    store.close()

    reopened = open_store(store_url, tmp_path)  # survives a restart
    row = reopened.get_run("r1")
    assert row["status"] == "succeeded" and row["schedule"] == "nightly" and row["spec"] == spec
    assert row["summary"][0]["requests"] == 5 and row["timeline"] == {"load": []}
    assert row["run_metadata"]["model"] == "tiny" and row["node"] == reopened.node
    assert row["created_at"].tzinfo is not None and row["started_at"] <= row["finished_at"]
    rows = reopened.request_rows("r1")
    assert len(rows) == 7 and sum(r["warmup"] for r in rows) == 2
    stage = outcome.stages[0]
    for original in stage.records:
        stored = reopened.records("r1")[original.index]
        assert stored.arrival_tokens == original.arrival_tokens
        # the generated token ids too (a matrix compares greedy tokens with its baseline's)
        assert stored.token_ids == original.token_ids and len(stored.token_ids) == original.output_tokens > 0
        assert stored.arrival_s == pytest.approx([t - stage.start_s for t in original.arrival_s], abs=1e-12)
        assert stored.itl_s() == pytest.approx(original.itl_s(), abs=1e-12)
        assert stored.ttft_s == pytest.approx(original.ttft_s) and stored.warmup == original.warmup
    reopened.close()


def test_chunks_keep_their_token_counts(store_url, tmp_path):
    """ITL is per token: an arrival of three tokens is three equal gaps, read back exactly (no guessing)."""
    store = open_store(store_url, tmp_path)
    store.create_run("c", make_spec().model_dump(mode="json"))
    record = RequestRecord(index=0, request_id="r0", warmup=False, prompt_tokens=4, max_new_tokens=5,
                           scheduled_s=10.0, submitted_s=10.0, admitted_s=10.0, arrival_s=[10.1, 10.4, 10.5],
                           arrival_tokens=[1, 3, 1], finished_s=10.5)
    writer = store.requests_writer("c")
    writer.close([(StageRequests(0, "s", 10.0), [record])])
    assert store.flush()
    (stored,) = store.records("c")
    assert stored.itl_s() == pytest.approx([0.1, 0.1, 0.1, 0.1]) and stored.output_tokens == 5


def test_listing_filters_and_pages(store_url, outcome, tmp_path):
    store = open_store(store_url, tmp_path)
    for i in range(5):
        spec = {**outcome.spec.model_dump(mode="json"), "name": "a" if i % 2 else "b"}
        store.create_run(f"r{i}", spec)
    store.set_status("r0", "failed", "boom", "load")
    assert store.flush()
    assert store.list_runs().total == 5
    assert [r["id"] for r in store.list_runs(status="failed").items] == ["r0"]
    assert store.list_runs(workload="a").total == 2
    page = store.list_runs(limit=2, offset=2)
    assert page.total == 5 and len(page.items) == 2
    failed = store.get_run("r0")
    assert (failed["error"], failed["error_stage"]) == ("boom", "load") and failed["finished_at"] is not None
    assert store.get_run("nope") is None


def test_recovery_marks_running_interrupted_with_its_rows(store_url, outcome, tmp_path):
    store = open_store(store_url, tmp_path, node="node-a")
    spec = outcome.spec.model_dump(mode="json")
    for run_id in ("running", "queued", "done"):
        store.create_run(run_id, spec)
    store.mark_running("running")
    stage = outcome.stages[0]
    writer = store.requests_writer("running")
    for record in stage.records[:4]:  # what had been flushed when the process died
        writer.add(StageRequests(0, stage.label, stage.start_s), record)
    store.set_status("done", "succeeded")
    assert store.flush()
    store.close()
    other = open_store(store_url, tmp_path / "b", node="node-b")  # another node's start leaves them alone
    assert other.recovered == 0 and other.get_run("running")["status"] == "running"
    other.close()

    restarted = open_store(store_url, tmp_path, node="node-a")
    assert restarted.recovered == 1
    interrupted = restarted.get_run("running")
    assert interrupted["status"] == "interrupted" and interrupted["error_stage"] == "run"
    (summary,) = interrupted["summary"]
    measured = [r for r in stage.records[:4] if not r.warmup]
    assert summary["status"] == "interrupted" and summary["requests"] == len(measured)
    assert summary["output_tokens"] == sum(r.output_tokens for r in measured)
    assert restarted.get_run("queued")["status"] == "cancelled"
    assert restarted.get_run("done")["status"] == "succeeded"


def test_schedules_and_baselines_persist(store_url, outcome, tmp_path):
    store = open_store(store_url, tmp_path)
    store.put_schedule("hourly", {"name": "x"}, 3600.0)
    store.put_schedule("hourly", {"name": "y"}, 60.0, enabled=False)  # replaced
    store.create_run("r", outcome.spec.model_dump(mode="json"))
    store.set_baseline("w", "r")
    store.set_baseline("w2", "missing")  # refused quietly: no such run
    assert store.flush()
    (row,) = store.list_schedules()
    assert (row["name"], row["spec"], row["interval_s"], row["enabled"]) == ("hourly", {"name": "y"}, 60.0, False)
    assert store.baseline("w") == "r" and store.baseline("w2") is None
    store.delete_schedule("hourly")
    assert store.flush() and store.list_schedules() == []


# ---- migrations ----------------------------------------------------------------------------------


def load_fixture(kind, tmp_path, postgres_server=None, commit="28a5763") -> str:
    """A database an earlier benchd wrote (tests/data): 28a5763, the last release before migrations; 14d1cbb, the
    last before RunSpec became a union on its kind (every spec it stored holds every kind's and engine's section;
    written by tests/data/write_store.py)."""
    if kind == "sqlite":
        path = tmp_path / f"{commit}.db"
        with sqlite3.connect(path) as db:
            db.executescript((FIXTURES / f"store-{commit}.sqlite.sql").read_text())
        return f"sqlite:///{path}"
    url = postgres_server.create_database(f"release_{commit}")
    postgres_server.psql(f"release_{commit}", FIXTURES / f"store-{commit}.postgresql.sql")
    return url


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_upgrading_a_database_written_by_the_last_release_keeps_everything(kind, tmp_path):
    if kind == "postgresql":
        with PostgresServer() as server:
            check_upgraded(load_fixture(kind, tmp_path, server), tmp_path)
    else:
        check_upgraded(load_fixture(kind, tmp_path), tmp_path)


def check_upgraded(url, tmp_path):
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    with engine.connect() as db:
        old = {(row.run_id, row.stage_index, row.index): row for row in db.execute(sa.text(
            'SELECT run_id, stage_index, "index", token_times_s, ttft_s, warmup FROM requests'))}
        runs_before = db.execute(sa.text("SELECT id, status, summary FROM runs")).all()
    assert migrate.revision(engine) is None and len(old) > 50
    store = open_store(url, tmp_path, node="elsewhere")
    assert migrate.revision(store.engine) == migrate.head()
    runs = store.list_runs(limit=100).items
    assert {r["id"]: r["status"] for r in runs} == {row.id: row.status for row in runs_before}
    assert all(r["created_at"].utcoffset() == timedelta(0) for r in runs)
    assert sum(len(store.request_rows(run["id"])) for run in runs) == len(old)
    for run in runs:
        for row in store.request_rows(run["id"]):
            before = old[run["id"], row["stage_index"], row["index"]]
            stamps = [float(t) for t in before.token_times_s.split()]
            assert sum(row["arrival_tokens"]) == len(stamps) and row["warmup"] == bool(before.warmup)
            assert row["ttft_s"] == before.ttft_s
            assert [t for t, n in zip(row["arrival_s"], row["arrival_tokens"]) for _ in range(n)] == stamps
    assert store.list_schedules()[0]["name"] == "nightly" and store.list_baselines()[0]["workload"] == "fixture"
    for row in runs_before:  # JSON stays as written (SQLite's raw read gives text, PostgreSQL's a value)
        summary = json.loads(row.summary) if isinstance(row.summary, str) else row.summary
        assert store.get_run(row.id)["summary"] == summary
    store.close()
    again = open_store(url, tmp_path)  # an up-to-date database is left as it is
    assert migrate.revision(again.engine) == migrate.head()
    again.close()


# ---- specs stored before RunSpec was a union on its kind -----------------------------------------------


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_specs_stored_with_every_section_read_back_as_their_own(kind, tmp_path):
    """Every stored run's, schedule's and matrix variant's spec reads back as its kind's spec, with the values it
    was stored with; the other sections are left out, and the rows stay as written."""
    with PostgresServer() if kind == "postgresql" else contextlib.nullcontext() as server:
        store = open_store(load_fixture(kind, tmp_path, server, commit="14d1cbb"), tmp_path, node="elsewhere")
        runs = store.list_runs(limit=100).items
        assert sorted(r["engine"] for r in runs) == ["kernel", "kernel", "openai", "static", "static", "train_step",
                                                     "transformers", "transformers", "transformers"]
        for run in runs:
            assert len(run["spec"]) == 20  # as 14d1cbb wrote it: every section
            spec = validate_spec(run["spec"])
            assert spec.model_dump(mode="json") == whole(run["spec"], run["spec"]), run["engine"]
            assert (spec.runner, spec.subject, spec.name) == (run["engine"], run["model"], run["workload"])
        schedules = store.list_schedules()
        assert [s["name"] for s in schedules] == ["kernels", "nightly"]
        for schedule in schedules:  # stored as given (exclude_unset): a transformers spec with no kind or engine
            spec = validate_spec(schedule["spec"])
            assert spec.model_dump(mode="json", exclude_unset=True) == own(schedule["spec"])
        (matrix,) = store.list_matrices().items
        variants = parse_matrix(matrix["document"]).variants()
        assert [v.spec.runner for v in variants] == ["transformers", "static"]
        for variant, stored in zip(variants, matrix["variants"], strict=True):  # stored as it ran (on cpu)
            assert "transformers" in stored["spec"] and "static" in stored["spec"]
            spec = validate_spec(stored["spec"])
            assert spec.model_dump(mode="json") == whole(stored["spec"], stored["spec"])
            # It ran under the 1 ms dispatch-lag p99 that was the default then (a ceiling unset by default since), and
            # with ignore_eos true, the default then (unset since: true for the random ids the tiny preset is sent).
            then = variant.spec.workload.validity.model_copy(update={"max_dispatch_lag_p99_s": 0.001})
            assert (spec.runner, spec.options, spec.workload) == (variant.spec.runner, variant.spec.options,
                                                                  variant.spec.workload.model_copy(
                                                                      update={"validity": then, "ignore_eos": True}))
        store.close()


@pytest.mark.timeout(900)
def test_a_store_written_before_the_union_runs_its_schedules_runs_and_matrix_again(tmp_path):
    """A daemon on that store: the stored schedules load and run, and every stored run's spec and the matrix's
    document, sent again as stored (every section), are accepted and run; what the new runs store is their own
    sections only, and the old rows stay as they were."""
    url = load_fixture("sqlite", tmp_path, commit="14d1cbb")
    reader = open_store(url, tmp_path / "reader")
    old = {r["id"]: r for r in reader.list_runs(limit=100).items}
    (matrix,) = reader.list_matrices().items
    reader.close()
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"prompt {i}"}) + "\n" for i in range(4)))
    with OpenAIServer() as served, daemon(tmp_path, database_url=url, model_roots=[str(tmp_path)]) as server:
        server.wait_ready(120)

        def new_runs() -> list[dict]:
            return [r for r in server.http.get("/runs", params={"limit": 100}).json()["items"] if r["id"] not in old]

        wait_for(lambda: len(new_runs()) == 2, 60, "the stored schedules to run")
        assert sorted(r["schedule"] for r in new_runs()) == ["kernels", "nightly"]
        sent = {}
        for run in old.values():
            if run["schedule"] is None and run["matrix_id"] is None:  # sent as stored: the server's place is new
                spec = run["spec"]
                if spec["engine"] == "openai" and spec["kind"] == "generate":
                    spec = {**spec, "openai": {**spec["openai"], "base_url": served.base_url},
                            "workload": {**spec["workload"], "dataset": {**spec["workload"]["dataset"],
                                                                         "path": str(prompts)}}}
                sent[post_until_measured(server, "/runs", spec)["id"]] = spec
        matrix_id = post_until_measured(server, "/matrices", matrix["document"])["id"]
        wait_for(lambda: all(r["status"] in ("succeeded", "failed") for r in new_runs()) and len(new_runs()) == 9,
                 600, "every run to end")
        assert [(r["workload"], r["error"]) for r in new_runs() if r["status"] != "succeeded"] == []
        wait_for(lambda: server.http.get(f"/matrices/{matrix_id}").json()["status"] == "succeeded", 60,
                 "the matrix's comparison")
        for run_id, spec in sent.items():
            stored = server.http.get(f"/runs/{run_id}").json()["spec"]
            assert stored == whole(spec, spec)
        for run_id, run in old.items():
            assert server.http.get(f"/runs/{run_id}").json()["spec"] == run["spec"]


def post_until_measured(server, path: str, body: dict) -> dict:
    """POST body, again while a timed run's device is not measured yet (503)."""
    for _ in range(600):
        response = server.http.post(path, json=body)
        if response.status_code != 503:
            break
        time.sleep(0.2)
    assert response.status_code == 202, response.text
    return response.json()


# ---- outages -------------------------------------------------------------------------------------


def test_writes_wait_in_the_journal_while_postgresql_is_down(tmp_path, outcome):
    with PostgresServer() as server:
        url = server.create_database("outage")
        store = open_store(url, tmp_path)
        spec = outcome.spec.model_dump(mode="json")
        store.create_run("before", spec)
        assert store.flush()
        server.stop()
        store.create_run("during", spec)
        store.mark_running("during")
        finish(store, "during", outcome)
        assert not store.flush(2.0)
        assert store.health.state == "degraded" and store.health.pending > 0
        with pytest.raises(StoreUnavailable):
            store.get_run("before")
        # A run whose writes wait in the journal is read from them (its URL answers from the moment it is queued).
        during = store.get_run("during")
        assert during["status"] == "succeeded" and during["summary"][0]["requests"] == 5 and during["node"]
        server.start()
        assert store.flush(30)
        assert store.health.state == "ok" and store.get_run("during")["status"] == "succeeded"
        assert len(store.request_rows("during")) == 7
        store.close()


def test_a_journal_on_a_full_disk_holds_writes_in_memory_until_it_takes_them(small_fs, tmp_path, outcome):
    """The journal on a small real filesystem, filled (the database elsewhere): no write raises, each is held in
    memory in order and applied, the store says why it takes none, the journal keeps no torn line, and once space
    is freed it takes writes again; a restart finds everything."""
    url, spool = f"sqlite:///{tmp_path}/benchd.db", small_fs / "spool"
    store = Store(url, spool_dir=spool)
    store.start()
    assert store.wait_ready(30)
    spec = outcome.spec.model_dump(mode="json")
    store.create_run("r0", spec)
    filler = fill(small_fs)
    for i in range(1, 6):  # the journal's last page takes one or two
        store.create_run(f"r{i}", spec)
    assert "No space left on device (ENOSPC)" in store.refusal() and store.health.held > 0
    store.mark_running("r1")
    finish(store, "r1", outcome)
    assert store.flush(10) and store.health.held == 0  # all in the database, none on disk
    assert store.refusal() is not None  # still: the disk takes nothing
    lines = (spool / "journal.jsonl").read_bytes().splitlines(keepends=True)
    assert all(line.endswith(b"\n") and json.loads(line) for line in lines)  # a line cut short was cut off
    filler.unlink()
    wait_for(lambda: store.refusal() is None, 10, "the journal to take writes")
    store.create_run("r6", spec)
    store.close()
    reopened = Store(url, spool_dir=spool)
    reopened.start()
    assert reopened.wait_ready(30)  # recovery: the queued ones (their queue was in memory) cancelled
    assert [reopened.get_run(f"r{i}")["status"] for i in range(7)] == ["cancelled", "succeeded", *["cancelled"] * 5]
    assert len(reopened.request_rows("r1")) == 7
    reopened.close()


def test_a_journal_left_by_a_killed_process_is_applied_at_the_next_start(tmp_path, outcome):
    """The process died with writes journaled but not applied (the database was down): nothing is lost."""
    with PostgresServer() as server:
        url = server.create_database("replay")
        store = open_store(url, tmp_path)
        server.stop()
        store.create_run("r", outcome.spec.model_dump(mode="json"))
        store.mark_running("r")
        store.spool._closing = True  # as if killed: the thread stops, the journal stays as it is
        store.spool._thread.join(10)
        server.start()
        restarted = open_store(url, tmp_path)
        # Replayed, then recovered: it was running when its process died.
        assert restarted.get_run("r")["status"] == "interrupted"
        restarted.close()


def test_a_journal_line_that_is_no_operation_is_set_aside_and_the_store_starts(tmp_path, outcome, caplog):
    """A whole line of the journal that does not decode (a disk's corruption; two daemons once shared a spool and
    interleaved their writes) stopped the daemon's start with a JSONDecodeError: it is set aside in rejected.jsonl,
    and the operations around it are applied."""
    from benchd.store.database import Store

    url = f"sqlite:///{tmp_path}/benchd.db"
    store = Store(url, tmp_path / "spool")
    store.start()
    assert store.wait_ready(30)
    store.spool._closing = True  # as if killed: what comes next stays in the journal
    store.spool._thread.join(10)
    store.create_run("before", outcome.spec.model_dump(mode="json"))
    with (tmp_path / "spool" / "journal.jsonl").open("ab") as f:
        f.write(b'{"op": "set_st{"op": "interleaved"}\n[1, 2]\n\xff\xfe\n')
    store.create_run("after", outcome.spec.model_dump(mode="json"))
    restarted = Store(url, tmp_path / "spool")
    restarted.start()
    assert restarted.wait_ready(30)
    assert restarted.get_run("before") is not None and restarted.get_run("after") is not None
    rejected = (tmp_path / "spool" / "rejected.jsonl").read_text().splitlines()
    assert len(rejected) == 3 and "interleaved" in rejected[0]
    assert "set aside" in caplog.text
    restarted.close()


def test_data_the_database_refuses_is_set_aside_and_later_writes_go_on(tmp_path, postgres_url, outcome):
    store = open_store(postgres_url, tmp_path)
    store.create_run("r", outcome.spec.model_dump(mode="json"))
    store.set_status("r", "failed", "a NUL \x00 PostgreSQL cannot store")
    store.set_status("r", "failed", "plain")
    assert store.flush()
    assert store.get_run("r")["error"] == "plain" and store.health.rejected == 1
    assert "NUL" in (tmp_path / "spool" / "rejected.jsonl").read_text()


def test_a_sql_ascii_database_stores_text_as_utf8(postgres_url, outcome, tmp_path):
    """PostgreSQL's SQL_ASCII databases send text undecoded: the store asks for UTF-8 when it connects."""
    import sqlalchemy as sa

    server, name = postgres_url.rsplit("/", 1)
    admin = sa.create_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as db:
        db.execute(sa.text(f'DROP DATABASE "{name}"'))
        db.execute(sa.text(f"CREATE DATABASE \"{name}\" ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' "
                           "TEMPLATE template0"))
    admin.dispose()
    store = open_store(postgres_url, tmp_path)
    spec = outcome.spec.model_dump(mode="json") | {"label": "väl-1 ✓"}
    store.create_run("r1", spec)
    queued = store.get_run("r1")
    assert queued["label"] == "väl-1 ✓" and queued["spec"]["label"] == "väl-1 ✓"  # a column and JSON
    store.mark_running("r1")
    finish(store, "r1", outcome)
    assert store.flush() and store.get_run("r1")["status"] == "succeeded"
    assert len(store.request_rows("r1")) == len(outcome.stages[0].records)
    with store.engine.connect() as db:
        assert db.execute(sa.text("SHOW server_encoding")).scalar() == "SQL_ASCII"
    store.close()
