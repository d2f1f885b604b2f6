"""Timed runs through the store (SQLite and PostgreSQL), the daemon and the command line; torch's threads back after
a generation run."""


import pytest

from benchd.daemon.inprocess import LocalPool
from benchd.daemon.lifecycle import Lifecycle
from benchd.stopping import StopSignal
from benchd.store.database import Store
from benchd.telemetry.run import Telemetry
from tests.helpers import NODE, daemon, submit
from tests.timed.helpers import kernel_spec, train_spec

# ---- the daemon and the store ------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/benchd.db"
    return request.getfixturevalue("postgres_url")


def test_timed_runs_round_trip_through_the_store(store_url, tmp_path):
    store = Store(store_url, spool_dir=tmp_path / "spool")
    store.start()
    for run_id, spec in (("t1", train_spec(steps=2, warmup_steps=1)),
                         ("k1", kernel_spec(op="matmul", shapes=[{"m": 16, "n": 16, "k": 16}]))):
        store.create_run(run_id, spec.model_dump(mode="json"))
        pool = LocalPool()
        outcome = Lifecycle(pool, Telemetry(), store=store).execute(run_id, spec, spec.device, StopSignal())
        pool.stop()
        assert store.flush()
        row = store.get_run(run_id)
        assert row["status"] == "succeeded" and row["engine"] == spec.kind
        assert row["summary"] == [r.model_dump(mode="json") for r in outcome.summaries()]
        rows = store.timing_rows(run_id)
        assert len(rows) == len(outcome.timings)
        assert sorted(r["seconds"] for r in rows) == sorted(t.seconds for t in outcome.timings)
    assert store.get_run("k1")["model"] == "matmul"
    store.close()


def test_daemon_runs_train_step_and_kernel_specs(tmp_path):
    with daemon(tmp_path) as server:
        server.wait_ready()
        train = submit(server, {"kind": "train_step", "name": "tr", "train_step": {
            "batch_size": 2, "context_length": 16, "warmup_steps": 1, "steps": 3, "mode": "train"}})
        kern = submit(server, {"kind": "kernel", "name": "mm", "kernel": {
            "op": "matmul", "shapes": [{"m": 32, "n": 32, "k": 32}], "repeats": 7, "flush_bytes": 1 << 20}})
        run = server.wait_status(kern, "succeeded", "failed")
        assert run["status"] == "succeeded" and run["engine"] == "kernel" and run["model"] == "matmul"
        assert run["summary"][0]["timing"]["count"] == 7
        run = server.wait_status(train, "succeeded", "failed")
        assert run["status"] == "succeeded", run["error"]
        assert run["engine"] == "train_step" and run["summary"][0]["phases"]["optimizer"]["count"] == 3
        timings = server.http.get(f"/runs/{train}/timings").json()
        assert len(timings) == 4 * 4 and sum(t["warmup"] for t in timings) == 4
        text = server.http.get(f"/runs/{train}/timings", params={"format": "csv"}).text
        assert text.splitlines()[0] == "stage_index,series,index,warmup,seconds" and len(text.splitlines()) == 17
        metrics = server.http.get("/metrics").text
        series = f'benchd_step_duration_seconds_count{{hostname="{NODE}",model="tiny",phase="optimizer",workload="tr"}}'
        assert f"{series} 3.0" in metrics
        assert f'benchd_kernel_duration_seconds_count{{dtype="float32",hostname="{NODE}",implementation="torch",' \
               'kernel="matmul",shape="32x32x32",workload="mm"} 7.0' in metrics
        # A generation run after a training step loads the daemon's model again and runs.
        gen = submit(server, {"name": "after", "transformers": {"block_size": 16, "num_blocks": 64,
                                                                  "max_batch_tokens": 128},
                              "workload": {"stop": {"requests": 2}, "prompt_tokens": {"dist": "fixed", "value": 4},
                                           "output_tokens": {"dist": "fixed", "value": 3}}})
        assert server.wait_status(gen, "succeeded", "failed")["status"] == "succeeded"
        over = server.http.post("/runs", json={"kind": "train_step", "train_step": {"steps": 20_000}})
        assert over.status_code == 422
        assert over.json()["detail"][0]["loc"] == ["body", "train_step", "steps"]
        assert "BENCHD_LIMITS__MAX_STEPS" in over.json()["detail"][0]["msg"]


def test_a_timed_run_after_a_generation_run_has_torchs_threads_back(tmp_path):
    """An engine's cpu_threads hold while it runs; the daemon closes it before a timed run, which then runs on the
    process's own thread count (each run's metadata records the count it ran with)."""
    kernel = {"kind": "kernel", "name": "mm", "device": "cpu", "kernel": {
        "op": "matmul", "shapes": [{"m": 16, "n": 16, "k": 16}], "repeats": 3, "flush_bytes": 1 << 20}}
    with daemon(tmp_path) as server:
        server.wait_ready()
        before = server.wait_status(submit(server, kernel), "succeeded")["metadata"]["torch_threads"]
        other = before - 1 if before > 1 else before + 1  # within the cores the worker may use (admission)
        gen = submit(server, {"name": "gen", "transformers": {"block_size": 16, "num_blocks": 64,
                                                                "max_batch_tokens": 128, "cpu_threads": other},
                              "workload": {"stop": {"requests": 2}, "prompt_tokens": {"dist": "fixed", "value": 4},
                                           "output_tokens": {"dist": "fixed", "value": 3}}})
        metadata = server.wait_status(gen, "succeeded")["metadata"]
        assert metadata["torch_threads"] == metadata["engine_settings"]["cpu_threads"] == other
        after = server.wait_status(submit(server, kernel), "succeeded")["metadata"]["torch_threads"]
        assert after == before


def test_cli_runs_a_kernel_spec(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "k.yaml"
    path.write_text("kind: kernel\nname: cli-k\ndevice: cpu\nkernel:\n  op: attention\n  repeats: 3\n"
                    "  flush_bytes: 1048576\n  shapes: [{heads: 2, seq_len: 16, head_dim: 8}]\n")
    done = subprocess.run([sys.executable, "-m", "benchd.cli", "run", str(path), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "b1h2s16d8c" in done.stdout and "eager" in done.stdout
    written = {p.name for p in (tmp_path / "out").iterdir()}
    assert written == {"summary.json", "timings.csv", "kernels.csv", "report.html"}
    refused = subprocess.run([sys.executable, "-m", "benchd.cli", "run", str(path), "--warmup-study"],
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "--warmup-study: applies to train_step specs" in refused.stderr
