"""Engines in supervised worker processes: the daemon never imports torch, stamps from a worker are comparable with
the daemon's, and a worker that aborts, exits, is killed, segfaults, hangs or stalls mid-run fails that run with
the cause, keeps every record that reached the daemon, and is replaced before the next run, which succeeds."""

import multiprocessing
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT, daemon, spec, submit, wait_for


def _clocks(queue) -> None:
    queue.put((time.perf_counter(), time.clock_gettime(time.CLOCK_MONOTONIC)))


def test_perf_counter_is_the_monotonic_clock_and_comparable_across_processes():
    """Workers stamp with time.perf_counter(); on Linux that is CLOCK_MONOTONIC, one clock for every process."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    before = time.perf_counter()
    child = context.Process(target=_clocks, args=(queue,))
    child.start()
    perf, monotonic = queue.get(timeout=60)
    child.join(30)
    after = time.perf_counter()
    assert before < perf < after
    assert abs(perf - monotonic) < 1e-3
    assert abs(time.perf_counter() - time.clock_gettime(time.CLOCK_MONOTONIC)) < 1e-3


def test_the_daemon_process_never_imports_torch(tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        from fastapi.testclient import TestClient
        from benchd.api import create_app
        from benchd.daemon.settings import Settings
        settings = Settings(database_url="sqlite:///{tmp_path}/b.db", spool_dir="{tmp_path}/spool", device="cpu",
                            default_schedule=False, workers={{"log_dir": "{tmp_path}/workers"}})
        with TestClient(create_app(settings)) as client:
            run = client.post("/runs", json={{"transformers": {{"num_blocks": 32, "block_size": 16,
                              "max_batch_tokens": 64}}, "workload": {{"stop": {{"requests": 2}},
                              "prompt_tokens": {{"dist": "fixed", "value": 4}},
                              "output_tokens": {{"dist": "fixed", "value": 4}}}}}}).json()["id"]
            while client.get(f"/runs/{{run}}").json()["status"] not in ("succeeded", "failed"):
                time.sleep(0.1)
            assert client.get(f"/runs/{{run}}").json()["status"] == "succeeded"
            page = client.get("/metrics").text
        assert 'process="worker"' in page and 'process="daemon"' in page
        print("torch" in sys.modules, "transformers" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["False", "False"]


FAULTS = [
    ("abort", "SIGABRT"),
    ("exit", "exited with code 3"),
    ("kill", "SIGKILL"),
    ("segfault", "SIGSEGV"),
    ("hang", "no heartbeat"),
    ("stall", "no progress"),
]


@pytest.mark.parametrize(("action", "cause"), FAULTS)
def test_a_worker_fault_fails_one_run_and_the_next_succeeds(tmp_path, action, cause):
    faults = {"workload": "crashme", "action": action, "after_s": 1.0}
    workers = {"heartbeat_timeout_s": 3.0, "progress_timeout_s": 3.0}
    # The log is appended to by every worker of that name: an earlier one's crash was quoted as this one's cause.
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "worker.log").write_text("MemoryError: an earlier worker's crash\n")
    with daemon(tmp_path, faults=faults, workers=workers) as server:
        server.wait_ready()
        first_pid = server.http.get("/readyz").json()["workers"][0]["pid"]
        crash = spec(duration=30, output=16, concurrency=2, name="crashme")
        run = server.wait_status(submit(server, crash), "failed", "succeeded", timeout_s=120)
        assert run["status"] == "failed" and run["error_stage"] == "worker", run
        assert cause in run["error"] and "the worker's last log lines" in run["error"], run["error"]
        assert "an earlier worker's crash" not in run["error"], run["error"]
        rows = server.http.get(f"/runs/{run['id']}/requests").json()
        stage = run["summary"][0]
        assert stage["requests"] > 0 and len(rows) == stage["requests"] + stage["errors"] + stage["warmup_requests"]
        assert all(r["finished_s"] is not None for r in rows)
        after = server.wait_status(submit(server, spec(requests=4)), "succeeded", "failed", timeout_s=120)
        assert after["status"] == "succeeded", after["error"]
        ready = server.http.get("/readyz").json()
        assert ready["ready"] and ready["worker_restarts"] == 1 and ready["workers"][0]["pid"] != first_pid
        page = server.http.get("/metrics").text
        reason = {"abort": "signal", "exit": "exit", "kill": "signal", "segfault": "signal", "hang": "no_heartbeat",
                  "stall": "no_progress"}[action]
        assert f'benchd_worker_restarts_total{{hostname="test-node",reason="{reason}"}} 1.0' in page


def test_a_run_past_its_deadline_is_stopped_and_failed(tmp_path):
    from benchd.daemon.settings import Limits

    with daemon(tmp_path, limits=Limits(max_duration_s=2)) as server:
        server.wait_ready()
        started = time.monotonic()
        slow = spec(requests=10_000, output=64, concurrency=1, name="endless")  # a closed loop nobody can time
        run = server.wait_status(submit(server, slow), "failed", "succeeded", timeout_s=60)
        assert run["status"] == "failed" and "went past its limit of 4 s" in run["error"]
        assert time.monotonic() - started < 30 and run["summary"][0]["requests"] > 0
        wait_for(lambda: server.http.get("/readyz").json()["ready"], 30)


def test_a_kernel_past_its_deadline_is_ended_by_the_supervisor_with_the_cause(tmp_path):
    """A call in progress cannot be cancelled: a kernel run past deadline_factor × what it should take at the
    device's measured speed (+ deadline_slack_s) is ended by killing its worker, its cause the run's error, what it
    timed kept, and the replaced worker runs the next run. Here the factor leaves it a thousandth of its time."""
    with daemon(tmp_path, workers={"deadline_factor": 0.001, "deadline_slack_s": 0}) as server:
        server.wait_ready()
        kernel = {"kind": "kernel", "name": "overrun", "kernel": {
            "op": "matmul", "shapes": [{"m": 1024, "n": 1024, "k": 1024}], "warmup": 1, "repeats": 2000,
            "flush_bytes": 1 << 20}}
        started = time.monotonic()
        run = server.wait_status(submit(server, kernel), "failed", "succeeded", timeout_s=120)
        assert run["status"] == "failed" and run["error_stage"] == "worker", run
        assert "the kernel run passed its deadline of" in run["error"] and "the supervisor ended it" in run["error"]
        assert "0.001 ×" in run["error"] and "GFLOP/s float32" in run["error"]
        assert time.monotonic() - started < 60  # 2,000 calls of 2 GFLOP take far longer
        page = server.http.get("/metrics").text
        assert 'benchd_worker_restarts_total{hostname="test-node",reason="deadline"} 1.0' in page
        wait_for(lambda: server.http.get("/readyz").json()["ready"], 60)
        after = server.wait_status(submit(server, spec(requests=2)), "succeeded", "failed")
        assert after["status"] == "succeeded", after["error"]


def test_a_run_that_breaks_its_device_fails_and_the_worker_is_replaced(tmp_path):
    """A device-side assert leaves a CUDA context unusable: the run ends failed with what the device said, its
    records kept, and the worker exits after its "done" so that the next run gets a fresh one (on a CPU worker the
    fault hook's stand-in marks the device broken as a real assert would; bench/worker_recovery.py --fault
    device_assert triggers the real one on a GPU)."""
    faults = {"workload": "assertme", "action": "device_assert", "after_s": 1.0}
    with daemon(tmp_path, faults=faults) as server:
        server.wait_ready()
        first_pid = server.http.get("/readyz").json()["workers"][0]["pid"]
        run = server.wait_status(submit(server, spec(duration=8, output=16, concurrency=2, name="assertme")),
                                 "failed", "succeeded", timeout_s=120)
        assert run["status"] == "failed", run
        assert "device-side assert triggered" in run["error"] and "the worker is replaced" in run["error"], run["error"]
        assert run["summary"][0]["requests"] > 0  # what was measured before the fault is kept
        after = server.wait_status(submit(server, spec(requests=4)), "succeeded", "failed", timeout_s=120)
        assert after["status"] == "succeeded", after["error"]
        ready = server.http.get("/readyz").json()
        assert ready["worker_restarts"] == 1 and ready["workers"][0]["pid"] != first_pid
        page = server.http.get("/metrics").text
        assert 'benchd_worker_restarts_total{hostname="test-node",reason="device_error"} 1.0' in page
        if os.geteuid() == 0:  # the replacement takes the workers' priority too (default nice -10)
            worker = ready["workers"][0]
            assert worker["nice"] == -10 == os.getpriority(os.PRIO_PROCESS, worker["pid"])


@pytest.mark.parametrize("engine", ["transformers", "static"])
def test_a_stage_that_runs_out_of_memory_fails_alone_and_a_new_engine_runs_the_next(tmp_path, engine):
    """An out-of-memory error in a step (injected at a forward pass: on a GPU a step that does not fit raises it)
    fails the stage it hit with the cause and the allocator's figures; the next stages of the sweep run on a new
    engine in the same worker, the run fails naming the stage, benchd_engine_restarts_total counts it, and the next
    run succeeds."""
    faults = {"workload": "oomme", "action": "oom", "after_s": 0.8}
    with daemon(tmp_path, faults=faults) as server:
        server.wait_ready()
        pid = server.http.get("/readyz").json()["workers"][0]["pid"]
        body = {**spec(duration=2, output=16, name="oomme"), "engine": engine, "static": {"batch_size": 2}}
        body["workload"]["arrivals"] = {"profile": "sweep", "over": "concurrent", "values": [2, 3, 4]}
        run = server.wait_status(submit(server, body), "failed", "succeeded", timeout_s=180)
        assert run["status"] == "failed", run
        assert run["error"].startswith("stage 0 (concurrent=2) ran out of device memory: CUDA out of memory. Tried "
                                       "to allocate 540.00 MiB (no device allocator figures on a CPU)"), run["error"]
        assert run["error"].endswith("(the engine was started again after each)")
        stages = run["summary"]
        assert [s["status"] for s in stages] == ["failed", "succeeded", "succeeded"]
        assert stages[0]["valid"] is False and all(s["requests"] > 0 and s["errors"] == 0 for s in stages[1:])
        page = server.http.get("/metrics").text
        restarts = [line for line in page.splitlines() if line.startswith("benchd_engine_restarts_total{")]
        assert len(restarts) == 1 and 'reason="out_of_memory"' in restarts[0] and 'workload="oomme"' in restarts[0]
        assert restarts[0].endswith(" 1.0")
        after = server.wait_status(submit(server, {**spec(requests=4), "engine": engine}), "succeeded", "failed",
                                   timeout_s=120)
        assert after["status"] == "succeeded", after["error"]
        ready = server.http.get("/readyz").json()
        assert ready["workers"][0]["pid"] == pid and ready["worker_restarts"] == 0  # the process was kept


PRIORITY = "import os; from benchd.loadgen.priority import prioritize; prioritize({}); print(os.getpriority(0, 0))"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="drops a capability (util-linux)")
def test_a_worker_without_the_privilege_keeps_its_priority_and_says_so():
    def unprivileged(nice: int) -> subprocess.CompletedProcess:  # root, less CAP_SYS_NICE: as in a container
        return subprocess.run(["setpriv", "--bounding-set=-sys_nice", sys.executable, "-c", PRIORITY.format(nice)],
                              capture_output=True, text=True, cwd=ROOT, timeout=60)
    base = os.getpriority(os.PRIO_PROCESS, 0)  # what the child inherits
    higher = unprivileged(base - 1)
    assert higher.returncode == 0 and higher.stdout.split() == [str(base)], higher.stderr
    assert f"the worker stays at nice {base}: nice {base - 1} needs CAP_SYS_NICE" in higher.stderr
    lower = unprivileged(base + 1)  # anyone may lower their own priority
    assert lower.stdout.split() == [str(base + 1)] and lower.stderr == ""


def _policies(pid: int) -> dict[int, int]:
    """Each thread of a process: its scheduling policy (field 41 of /proc/…/stat: 0 normal, 1 SCHED_FIFO)."""
    policies = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            policies[int(task.name)] = int((task / "stat").read_text().rpartition(")")[2].split()[38])
        except (OSError, ValueError):  # the thread ended
            continue
    return policies


@pytest.mark.skipif(os.geteuid() != 0, reason="a real-time class needs root or CAP_SYS_NICE")
def test_an_open_loop_sends_in_the_realtime_class_and_nothing_else_does(tmp_path):
    """The worker's sending thread (its main thread) is in SCHED_FIFO while an open loop sends, and back to normal
    after; the engine's threads and the worker's others stay normal throughout."""
    poisson = spec(requests=40, name="poisson")
    poisson["workload"]["arrivals"] = {"profile": "poisson", "rate": 20}
    with daemon(tmp_path) as server:
        server.wait_ready()
        worker = server.http.get("/readyz").json()["workers"][0]
        assert worker["dispatch_priority"] == 1
        pid = worker["pid"]
        assert set(_policies(pid).values()) == {0}
        run_id = submit(server, poisson)
        seen: dict[int, set[int]] = {}
        while server.http.get(f"/runs/{run_id}").json()["status"] in ("queued", "running"):
            for tid, policy in _policies(pid).items():
                seen.setdefault(tid, set()).add(policy)
            time.sleep(0.01)
        assert server.http.get(f"/runs/{run_id}").json()["status"] == "succeeded"
        assert 1 in seen[pid], seen
        assert all(policies == {0} for tid, policies in seen.items() if tid != pid), seen
        assert set(_policies(pid).values()) == {0}


def test_a_thread_in_the_realtime_class_goes_back_to_its_policy_and_nice():
    from benchd.loadgen import priority

    if os.geteuid() != 0:
        pytest.skip("a real-time class needs root or CAP_SYS_NICE")
    seen = {}

    def sender() -> None:
        os.setpriority(os.PRIO_PROCESS, 0, 5)  # this thread's nice (Linux: per thread)
        with priority.realtime(1):
            seen["inside"] = os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
            child = threading.Thread(target=lambda: seen.update(child=os.sched_getscheduler(0)))
            child.start()
            child.join()
        seen["after"] = os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)

    thread = threading.Thread(target=sender)
    thread.start()
    thread.join()
    assert seen["inside"] == (os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, 1)
    assert seen["child"] == os.SCHED_OTHER  # a thread started while sending is born normal
    assert seen["after"] == (os.SCHED_OTHER, 5)
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the test's own thread never changed


REALTIME = "from benchd.loadgen import priority; print(priority.allowed({}))"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="drops a capability (util-linux)")
def test_a_worker_without_the_privilege_sends_at_normal_priority_and_says_so():
    refused = subprocess.run(["setpriv", "--bounding-set=-sys_nice", sys.executable, "-c", REALTIME.format(1)],
                             capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert refused.returncode == 0 and refused.stdout.split() == ["0"], refused.stderr
    assert "open loops send at normal priority: real-time priority 1 was refused" in refused.stderr
    off = subprocess.run([sys.executable, "-c", REALTIME.format(0)], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert off.stdout.split() == ["0"] and off.stderr == ""
