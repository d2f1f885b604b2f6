"""The run history store on SQLite and on a real PostgreSQL server: one schema, same answers."""

import pytest

from benchd.runner import run
from benchd.store import Store
from tests.helpers import make_spec


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/benchd.db"
    return request.getfixturevalue("postgres_url")


@pytest.fixture(scope="module")
def outcome(tiny):
    return run(make_spec(workload={"warmup": {"requests": 2}, "stop": {"requests": 5}}), loaded=tiny)


def test_a_run_round_trips_with_stages_and_requests(store_url, outcome):
    store = Store(store_url)
    spec = outcome.spec.model_dump(mode="json")
    store.create_run("r1", spec, schedule="nightly")
    assert store.get_run("r1")["status"] == "queued"
    store.mark_running("r1")
    store.finish_run("r1", outcome)
    store.close()

    reopened = Store(store_url)  # survives a restart
    row = reopened.get_run("r1")
    assert row["status"] == "succeeded" and row["schedule"] == "nightly" and row["spec"] == spec
    assert row["summary"][0]["requests"] == 5
    assert row["run_metadata"]["model"] == "tiny"
    assert row["started_at"] <= row["finished_at"]
    records = reopened.request_rows("r1")
    assert len(records) == 7 and sum(r["warmup"] for r in records) == 2
    first = records[0]
    original = min(outcome.stages[0].records, key=lambda r: r.index)
    assert first["ttft_s"] == pytest.approx(original.ttft_s)
    assert len(first["token_times_s"].split()) == original.output_tokens
    reopened.close()


def test_listing_filters_and_pages(store_url, outcome):
    store = Store(store_url)
    for i in range(5):
        spec = {**outcome.spec.model_dump(mode="json"), "name": "a" if i % 2 else "b"}
        store.create_run(f"r{i}", spec)
    store.set_status("r0", "failed", "boom")
    assert store.list_runs().total == 5
    assert [r["id"] for r in store.list_runs(status="failed").items] == ["r0"]
    assert store.list_runs(workload="a").total == 2
    page = store.list_runs(limit=2, offset=2)
    assert page.total == 5 and len(page.items) == 2
    assert store.get_run("r0")["error"] == "boom" and store.get_run("r0")["finished_at"] is not None
    assert store.get_run("nope") is None


def test_recovery_marks_running_interrupted(store_url, outcome):
    store = Store(store_url)
    spec = outcome.spec.model_dump(mode="json")
    for run_id in ("running", "queued", "done"):
        store.create_run(run_id, spec)
    store.mark_running("running")
    store.set_status("done", "succeeded")
    store.close()
    restarted = Store(store_url)
    assert restarted.recover() == 1
    assert restarted.get_run("running")["status"] == "interrupted"
    assert restarted.get_run("queued")["status"] == "cancelled"
    assert restarted.get_run("done")["status"] == "succeeded"


def test_schedules_persist(store_url):
    store = Store(store_url)
    store.put_schedule("hourly", {"name": "x"}, 3600.0)
    store.put_schedule("hourly", {"name": "y"}, 60.0, enabled=False)  # replaced
    (row,) = Store(store_url).list_schedules()
    assert (row["name"], row["spec"], row["interval_s"], row["enabled"]) == ("hourly", {"name": "y"}, 60.0, False)
    assert store.delete_schedule("hourly") and not store.delete_schedule("hourly")


def test_a_sql_ascii_database_stores_text_as_utf8(postgres_url, outcome):
    """PostgreSQL's SQL_ASCII databases send text undecoded: the store asks for UTF-8 when it connects."""
    import sqlalchemy as sa

    server, name = postgres_url.rsplit("/", 1)
    admin = sa.create_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as db:
        db.execute(sa.text(f'DROP DATABASE "{name}"'))
        db.execute(sa.text(f"CREATE DATABASE \"{name}\" ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' "
                           "TEMPLATE template0"))
    admin.dispose()
    store = Store(postgres_url)
    spec = outcome.spec.model_dump(mode="json") | {"label": "väl-1 ✓"}
    store.create_run("r1", spec)
    queued = store.get_run("r1")
    assert queued["label"] == "väl-1 ✓" and queued["spec"]["label"] == "väl-1 ✓"  # a column and JSON
    store.mark_running("r1")
    store.finish_run("r1", outcome)
    assert store.get_run("r1")["status"] == "succeeded"
    assert len(store.request_rows("r1")) == len(outcome.stages[0].records)
    with store.engine.connect() as db:
        assert db.execute(sa.text("SHOW server_encoding")).scalar() == "SQL_ASCII"
    store.close()
