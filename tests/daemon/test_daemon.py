"""The daemon for real: uvicorn on a loopback port, the tiny model, SQLite and PostgreSQL stores."""

import csv
import io
import json
import signal
import subprocess
import sys
import time

import httpx
import pytest
import yaml

from benchd.cli.client import Client
from benchd.daemon.settings import Limits, Settings
from benchd.store.database import Store
from tests.helpers import LONG, NODE, ROOT, daemon, free_port, serve, spec, submit, wait_for


def test_full_lifecycle_with_events_in_order(tmp_path):
    with daemon(tmp_path) as server:
        blocker = submit(server, LONG)
        server.wait_status(blocker, "running")
        response = server.http.post("/runs", json=spec(requests=40, output=16))
        assert response.status_code == 202
        created = response.json()
        assert created["status"] == "queued" and response.headers["location"] == created["url"]
        assert created["url"] == f"{server.url}/runs/{created['id']}"

        client = Client(server.url)
        events = []

        def on_event(kind: str, data: dict) -> None:
            events.append((kind, data))
            if len(events) == 1:  # subscribed while queued: now let it start
                assert events[0] == ("status", {"status": "queued"})
                assert server.http.delete(f"/runs/{blocker}").json()["status"] == "cancelling"

        client.events(created["id"], on_event)

        kinds = [kind for kind, _ in events]
        assert kinds[:2] == ["status", "status"] and events[1][1] == {"status": "running"}
        assert kinds[-1] == "summary" and set(kinds[2:-1]) == {"progress"}
        completed = [data["completed"] for kind, data in events if kind == "progress"]
        assert completed == sorted(completed) and completed[-1] == 40
        # Its last 40th request sent, the stage drains: the progress says so, and how long it can take from its start.
        drains = [data for kind, data in events if kind == "progress" and data["draining"]]
        assert drains and all(d["bound_s"] >= 30 for d in drains)
        assert all(d["bound_s"] is None for kind, d in events if kind == "progress" and not d["draining"])
        summary = events[-1][1]
        assert summary["status"] == "succeeded" and summary["stages"][0]["requests"] == 40

        run = server.http.get(f"/runs/{created['id']}").json()
        assert run["status"] == "succeeded" and run["error"] is None
        assert run["summary"][0]["output_tokens"] == 40 * 16
        assert run["metadata"]["model"] == "tiny" and run["spec"]["model"] == "tiny"
        assert run["started_at"] and run["finished_at"]
        assert server.http.get(f"/runs/{blocker}").json()["status"] == "cancelled"

        listed = server.http.get("/runs", params={"status": "succeeded"}).json()
        assert [r["id"] for r in listed["items"]] == [created["id"]] and listed["total"] == 1
        assert server.http.get("/runs", params={"workload": "long"}).json()["total"] == 1

        records = server.http.get(f"/runs/{created['id']}/requests").json()
        assert len(records) == 40 and all(r["output_tokens"] == 16 for r in records)
        text = server.http.get(f"/runs/{created['id']}/requests", params={"format": "csv"}).text
        rows = list(csv.DictReader(io.StringIO(text)))
        assert len(rows) == 40 and float(rows[0]["ttft_s"]) > 0

        # A finished run's events: just its summary.
        ended: list[str] = []
        client.events(created["id"], lambda kind, data: ended.append(kind))
        assert ended == ["summary"]


def test_cancel_while_running_keeps_what_was_measured(tmp_path):
    with daemon(tmp_path) as server:
        server.wait_ready()
        run_id = submit(server, LONG)
        server.wait_status(run_id, "running")

        def finished() -> bool:  # records are written as requests finish; a 503's body (being read) is no list
            found = server.http.get(f"/runs/{run_id}/requests").json()
            return isinstance(found, list) and len(found) > 0

        wait_for(finished, 60, "a request finished")
        assert server.http.delete(f"/runs/{run_id}").json() == {"id": run_id, "status": "cancelling"}
        run = server.wait_status(run_id, "cancelled")
        stage = run["summary"][0]
        assert stage["status"] == "cancelled" and stage["output_tokens"] > 0 and stage["requests"] > 0
        records = server.http.get(f"/runs/{run_id}/requests").json()
        assert any(r["error"] == "cancelled" for r in records)
        assert server.http.delete(f"/runs/{run_id}").status_code == 409


def test_cancel_while_queued_and_unknown_ids(tmp_path):
    with daemon(tmp_path) as server:
        running = submit(server, LONG)
        queued = submit(server, spec())
        assert server.http.delete(f"/runs/{queued}").json() == {"id": queued, "status": "cancelled"}
        run = server.http.get(f"/runs/{queued}").json()
        assert run["status"] == "cancelled" and run["started_at"] is None
        server.http.delete(f"/runs/{running}")
        server.wait_status(running, "cancelled")
        for method, path in (("GET", "/runs/nope"), ("DELETE", "/runs/nope"), ("GET", "/runs/nope/events"),
                             ("GET", "/runs/nope/requests")):
            response = server.http.request(method, path)
            assert response.status_code == 404 and "no run nope" in response.json()["detail"]


def test_a_full_queue_answers_429(tmp_path):
    with daemon(tmp_path, queue_max=1) as server:
        running = submit(server, LONG)
        server.wait_status(running, "running")
        queued = submit(server, spec())
        response = server.http.post("/runs", json=spec())
        assert response.status_code == 429 and "queue is full" in response.json()["detail"]
        server.http.delete(f"/runs/{queued}")
        assert server.http.post("/runs", json=spec()).status_code == 202
        server.http.delete(f"/runs/{running}")


def problems(response):
    assert response.status_code == 422, response.text
    return {".".join(str(p) for p in d["loc"]): d["msg"] for d in response.json()["detail"]}


def test_bad_specs_and_limits_are_422_naming_the_field(tmp_path, tiny_dir):
    limits = Limits(max_requests=100, max_prompt_tokens=64, max_output_tokens=32, max_duration_s=30,
                    max_concurrency=8, max_rate=50)
    with daemon(tmp_path, limits=limits, model_roots=[tiny_dir.parent]) as server:
        post = lambda body: server.http.post("/runs", json=body)  # noqa: E731
        found = problems(post({"workload": {"arrivals": {"profile": "poisson", "rate": -1}}}))
        assert "greater than 0" in found["body.workload.arrivals.poisson.rate"]
        assert "Extra inputs" in problems(post({"bogus": 1}))["body.bogus"]

        body = spec(requests=101)
        body["workload"].update(prompt_tokens={"dist": "uniform", "min": 8, "max": 65},
                                output_tokens={"dist": "fixed", "value": 33},
                                arrivals={"profile": "concurrent", "concurrency": 9})
        found = problems(post(body))
        assert "101 exceeds the limit of 100" in found["body.workload.stop.requests"]
        assert "BENCHD_LIMITS__MAX_REQUESTS" in found["body.workload.stop.requests"]
        assert "65 exceeds" in found["body.workload.prompt_tokens"]
        assert "33 exceeds" in found["body.workload.output_tokens"]
        assert "9 exceeds" in found["body.workload.arrivals"]
        assert "exceeds" in problems(post(spec(duration=31)))["body.workload.stop.duration_s"]
        rate = {"workload": {"arrivals": {"profile": "sweep", "over": "poisson", "values": [10, 60]}}}
        assert "60 exceeds" in problems(post(rate))["body.workload.arrivals.values.1"]

        assert "cannot be enabled over HTTP" in problems(post({"trust_remote_code": True}))["body.trust_remote_code"]
        for ref in ("gpt2", "some-org/some-model", "/etc", "../../etc", f"{tiny_dir.parent}/../x"):
            assert "neither a preset nor a directory under BENCHD_MODEL_ROOTS" in problems(post({"model": ref}))[
                "body.model"], ref
        assert "no config.json" in problems(post({"model": str(tiny_dir.parent)}))["body.model"]
        assert problems(post({"model": "tinyy"}))["body.model"].endswith("; did you mean 'tiny'?")  # a preset misspelt


def test_models_are_loaded_once_and_kept(tmp_path, tiny_dir):
    with daemon(tmp_path, model_roots=[tiny_dir.parent]) as server:
        server.wait_ready()
        first = submit(server, {**spec(), "model": str(tiny_dir)})
        run = server.wait_status(first, "succeeded")
        assert run["metadata"]["model"] == str(tiny_dir) and run["metadata"]["model_load_s"] > 0
        second = submit(server, {**spec(), "model": str(tiny_dir)})
        assert server.wait_status(second, "succeeded")["metadata"]["model_load_s"] is None  # kept loaded
        third = server.wait_status(submit(server, spec()), "succeeded")  # no model: the daemon's, loaded again
        assert third["metadata"]["model"] == "tiny" and third["metadata"]["model_load_s"] > 0


def test_auth_guards_mutating_endpoints(tmp_path):
    with daemon(tmp_path, api_token="s3cret") as server:
        response = server.http.post("/runs", json=spec())
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
        wrong = {"Authorization": "Bearer nope"}
        assert server.http.post("/runs", json=spec(), headers=wrong).status_code == 401
        good = {"Authorization": "Bearer s3cret"}
        run_id = server.http.post("/runs", json=spec(), headers=good).json()["id"]
        assert server.http.get("/runs").status_code == 200
        assert server.http.get(f"/runs/{run_id}").status_code == 200
        assert server.http.delete(f"/runs/{run_id}").status_code == 401
        schedule = {"name": "x", "spec": spec(), "interval_s": 60}
        assert server.http.post("/schedules", json=schedule).status_code == 401
        assert server.http.delete("/schedules/x").status_code == 401
        assert server.http.post("/schedules", json=schedule, headers=good).status_code == 201
        assert server.http.delete("/schedules/x", headers=good).status_code == 204
        assert server.http.delete("/baselines/short").status_code == 401  # clearing a baseline, as setting one
        assert server.http.delete("/baselines/short", headers=good).status_code == 404  # none was set


def test_without_a_token_nothing_is_required(tmp_path):
    with daemon(tmp_path) as server:
        assert server.http.post("/runs", json=spec()).status_code == 202


def test_a_failing_run_is_recorded_and_the_next_succeeds(tmp_path):
    with daemon(tmp_path, faults={"workload": "broken", "action": "error"}) as server:
        server.wait_ready()
        failed = submit(server, spec(name="broken"))
        run = server.wait_status(failed, "failed", "succeeded")
        assert run["status"] == "failed" and "injected engine fault" in run["error"]
        # what happened is kept: the two requests in flight when the engine's loop died; nothing more is sent to it
        assert run["summary"][0]["errors"] == 2 and "the engine stopped" in run["error"]
        after = submit(server, spec())
        assert server.wait_status(after, "succeeded", "failed")["status"] == "succeeded"


def test_a_model_that_fails_to_load_fails_only_its_run(tmp_path):
    bad = tmp_path / "models" / "broken"
    bad.mkdir(parents=True)
    (bad / "config.json").write_text("{not json")
    with daemon(tmp_path, model_roots=[tmp_path / "models"]) as server:
        run = server.wait_status(submit(server, {**spec(), "model": str(bad)}), "failed", "succeeded")
        assert run["status"] == "failed" and run["error"]
        assert server.wait_status(submit(server, spec()), "succeeded", "failed")["status"] == "succeeded"


def test_schedules_repeat_and_never_pile_up(tmp_path):
    with daemon(tmp_path) as server:
        body = {"name": "every", "spec": spec(requests=30, output=16), "interval_s": 0.1}
        created = server.http.post("/schedules", json=body)
        assert created.status_code == 201 and created.json()["name"] == "every"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            runs = server.http.get("/runs", params={"schedule": "every", "limit": 500}).json()["items"]
            assert sum(r["status"] in ("queued", "running") for r in runs) <= 1
            if sum(r["status"] == "succeeded" for r in runs) >= 3:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the schedule did not run three times")
        (listed,) = server.http.get("/schedules").json()
        assert listed["skipped"] > 0 and listed["interval_s"] == 0.1 and listed["last_run_id"]
        assert server.http.delete("/schedules/every").status_code == 204
        assert server.http.delete("/schedules/every").status_code == 404
        assert server.http.get("/schedules").json() == []


def test_schedules_declared_in_settings_run_and_are_owned_by_the_settings(tmp_path):
    """BENCHD_SCHEDULES (a Helm chart's values) at start: listed and run like a POSTed one, stored runs record the
    node and the pod; never written to the store, so one left out of the settings is gone at the next start, and
    one declared under a stored schedule's name takes its place."""
    stored = Store(f"sqlite:///{tmp_path}/benchd.db", tmp_path / "spool")
    stored.start()
    stored.put_schedule("declared", {"name": "old"}, 3600.0, enabled=False)
    assert stored.flush()
    stored.close()
    declared = {"name": "declared", "spec": spec(requests=4, output=4, name="fleet"), "interval_s": 0.2}
    with daemon(tmp_path, schedules=[declared], pod_name="benchd-x7k2p") as server:
        (listed,) = server.http.get("/schedules").json()
        assert listed["name"] == "declared" and listed["interval_s"] == 0.2 and listed["spec"]["name"] == "fleet"
        wait_for(lambda: server.http.get("/runs", params={"schedule": "declared"}).json()["total"] > 0, 30)
        run_id = server.http.get("/runs", params={"schedule": "declared"}).json()["items"][-1]["id"]
        run = server.wait_status(run_id, "succeeded", "failed")
        assert run["status"] == "succeeded" and run["workload"] == "fleet"
        assert (run["node"], run["pod"]) == (NODE, "benchd-x7k2p")
    reopened = Store(f"sqlite:///{tmp_path}/benchd.db", tmp_path / "spool")
    assert [row["spec"] for row in reopened.list_schedules()] == [{"name": "old"}]  # the stored one, untouched
    with daemon(tmp_path) as server:  # no longer declared: the stored schedule of that name is back
        wait_for(lambda: [s["spec"]["name"] for s in server.http.get("/schedules").json()] == ["old"], 10)


def test_declared_schedules_are_checked_at_start(tmp_path, monkeypatch):
    """JSON from the environment or `schedules:` in the BENCHD_CONFIG file; a bad one stops the start naming the
    field."""
    entry = {"name": "nightly", "spec": {"name": "w", "workload": {"stop": {"requests": 8}}}, "interval_s": 60}
    monkeypatch.setenv("BENCHD_SCHEDULES", json.dumps([entry]))
    (schedule,) = Settings().schedules
    assert (schedule.name, schedule.spec.workload.stop.requests, schedule.enabled) == ("nightly", 8, True)
    monkeypatch.delenv("BENCHD_SCHEDULES")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"schedules": [entry, {**entry, "name": "hourly", "interval_s": 3600}]}))
    monkeypatch.setenv("BENCHD_CONFIG", str(config))
    assert [s.name for s in Settings().schedules] == ["nightly", "hourly"]
    for bad, message in (
        ([{**entry, "interval_s": 0}], "schedules.0.interval_s"),
        ([{**entry, "spec": {"workload": {"arrivals": {"profile": "sometimes"}}}}], "schedules.0.spec.workload"),
        ([entry, entry], "names must be unique"),
        ([{**entry, "name": "default"}], "'default' is the built-in schedule's name"),
    ):
        monkeypatch.setenv("BENCHD_SCHEDULES", json.dumps(bad))
        done = subprocess.run([sys.executable, "-m", "benchd.cli", "serve"], capture_output=True, text=True,
                              timeout=60, cwd=tmp_path)
        assert done.returncode == 2 and "invalid settings" in done.stderr and message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_default_schedule_exports_data_with_no_trigger(tmp_path):
    with daemon(tmp_path, default_schedule=True) as server:
        (schedule,) = server.http.get("/schedules").json()
        assert schedule["name"] == "default"
        wait_for(lambda: server.http.get("/runs", params={"schedule": "default"}).json()["total"] > 0, 30)
        run_id = server.http.get("/runs", params={"schedule": "default"}).json()["items"][0]["id"]
        run = server.wait_status(run_id, "succeeded", "failed")
        assert run["status"] == "succeeded" and run["model"] == "tiny"
    with daemon(tmp_path, default_schedule=False) as server:  # turned off: gone, also from the store
        assert server.http.get("/schedules").json() == []


def test_postgresql_store(tmp_path, postgres_url):
    with daemon(tmp_path, database_url=postgres_url) as server:
        run = server.wait_status(submit(server, spec()), "succeeded", "failed")
        assert run["status"] == "succeeded"
    stored = Store(postgres_url, tmp_path / "reader-spool")
    assert stored.get_run(run["id"])["summary"][0]["requests"] == 6
    assert len(stored.request_rows(run["id"])) == 6


def test_health_readiness_and_openapi(tmp_path):
    with daemon(tmp_path) as server:
        assert server.http.get("/healthz").json() == {"status": "ok"}
        server.wait_ready()
        ready = server.http.get("/readyz").json()
        assert ready["ready"] and ready["alive"] and [w["state"] for w in ready["workers"]] == ["ready"]
        api = server.http.get("/openapi.json").json()
        post = api["paths"]["/runs"]["post"]
        assert {"202", "401", "422", "429"} <= set(post["responses"])
        union = post["requestBody"]["content"]["application/json"]["schema"]["oneOf"]  # a spec of each kind and engine
        assert [ref["$ref"].rsplit("/", 1)[1] for ref in union] == ["TransformersSpec", "OpenAISpec", "StaticSpec",
                                                                    "TrainStepSpec", "KernelSpec"]
        assert {"404", "409"} <= set(api["paths"]["/runs/{run_id}"]["delete"]["responses"])
        assert "text/event-stream" in api["paths"]["/runs/{run_id}/events"]["get"]["responses"]["200"]["content"]
    with daemon(tmp_path, model="/nonexistent/model") as server:
        wait_for(lambda: server.http.get("/readyz").json()["load_error"] is not None, 30)
        assert server.http.get("/readyz").status_code == 503


def test_cli_against_a_live_daemon(tmp_path):
    spec_file = tmp_path / "spec.yaml"
    import yaml

    spec_file.write_text(yaml.safe_dump(spec(requests=8)))
    with daemon(tmp_path) as server:
        result = subprocess.run([sys.executable, "-m", "benchd.cli", "run", "--server", server.url, str(spec_file)],
                                capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert result.returncode == 0, result.stderr
        assert "status: succeeded" in result.stdout and "concurrent=2" in result.stdout
        listed = subprocess.run([sys.executable, "-m", "benchd.cli", "runs", "--server", server.url, "list"],
                                capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert listed.returncode == 0 and "succeeded" in listed.stdout
        run_id = server.http.get("/runs").json()["items"][0]["id"]
        shown = subprocess.run([sys.executable, "-m", "benchd.cli", "runs", "--server", server.url, "show", run_id],
                               capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert shown.returncode == 0 and run_id in shown.stdout
        bad = subprocess.run([sys.executable, "-m", "benchd.cli", "run", "--server", server.url, "--model",
                              "gpt2", str(spec_file)], capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert bad.returncode == 2 and "model" in bad.stderr and "BENCHD_MODEL_ROOTS" in bad.stderr


# ---- a daemon in its own process: signals and crashes ---------------------------------------------


def start_long_run(url):
    run_id = httpx.post(f"{url}/runs", json=LONG).json()["id"]
    wait_for(lambda: httpx.get(f"{url}/runs/{run_id}/requests").json(), 60, "requests measured")
    return run_id


def test_sigterm_marks_the_current_run_interrupted_with_its_data(tmp_path):
    # With the probe listener, as the image and the chart start the daemon: its uvicorn leaves the main server's
    # logging as it was (it set uvicorn's loggers to warnings only, process-wide: no startup or shutdown line).
    probe_port = free_port()
    process, url = serve(tmp_path, free_port(), BENCHD_HTTP__PROBE_PORT=str(probe_port))
    assert httpx.get(f"http://127.0.0.1:{probe_port}/metrics").status_code == 200
    run_id = start_long_run(url)
    process.send_signal(signal.SIGTERM)
    # uvicorn shuts down cleanly, then re-raises the signal so that supervisors see how the process ended.
    assert process.wait(60) in (0, -signal.SIGTERM)
    log = process.log_path.read_text()
    assert "Application startup complete" in log and "Application shutdown complete" in log
    store = Store(f"sqlite:///{tmp_path}/benchd.db", tmp_path / "reader-spool")
    run = store.get_run(run_id)
    assert run["status"] == "interrupted"
    assert run["summary"][0]["requests"] > 0 and run["summary"][0]["status"] == "interrupted"
    assert len(store.request_rows(run_id)) > 0


def test_restart_after_a_crash_marks_the_running_run_interrupted(tmp_path):
    port = free_port()
    process, url = serve(tmp_path, port)
    run_id = start_long_run(url)
    process.kill()
    process.wait(30)
    process, url = serve(tmp_path, port)
    try:
        run = httpx.get(f"{url}/runs/{run_id}").json()
        assert run["status"] == "interrupted" and "stopped while the run was in progress" in run["error"]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
