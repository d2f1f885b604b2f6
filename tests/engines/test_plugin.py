"""An engine in a folder of its own, outside benchd: installed as a package of the `benchd.engines` entry-point group
(docs/architecture.md, "Adding an engine"), it is a member of RunSpec, admitted, run by the worker and stored like
benchd's own, with nothing of benchd changed."""

import os
import subprocess
import sys
import textwrap

import httpx

from tests.helpers import ROOT, free_port, serve, wait_for

SPEC = '''
"""A throwaway engine: it echoes each prompt's tokens back, one every delay_s, from a thread of its own."""

from typing import Annotated, Literal

from pydantic import Field

from benchd.spec.engines import EngineRecord
from benchd.spec.fields import Strict
from benchd.spec.run import GenerateSpec


class EchoOptions(Strict):
    delay_s: Annotated[float, Field(ge=0, le=0.1)] = 0.001


class EchoSpec(GenerateSpec):
    engine: Literal["echo"]
    echo: EchoOptions = Field(default_factory=EchoOptions)


ENGINE = EngineRecord(name="echo", spec=EchoSpec, create="echo_engine.engine:create", loads_model=True,
                      stamps="engine", genai_provider="echo")
'''

ENGINE = '''
"""The echo engine itself (the worker imports it through the record's create)."""

import queue
import threading
import time

from benchd.engines.base import EngineLoad
from benchd.measure.roofline import StepLog


class EchoEngine:
    """It keeps the contracts of engines/base.py: a stamp a token, the end at the last one, a step a token."""

    name = "echo"
    dispatch_lead_s = 0.0
    handoff = attention = None

    def __init__(self, delay_s):
        self.delay_s = delay_s
        self.steps = StepLog()
        self.waiting = queue.Queue()
        self.cancelled = set()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def start(self):
        self.thread.start()

    def forget(self):
        pass

    def submit(self, request, sink):
        self.waiting.put((request, sink))

    def cancel(self, request_id, reason="cancelled"):
        self.cancelled.add((request_id, reason))

    def _loop(self):
        while (item := self.waiting.get()) is not None:
            request, sink = item
            t = time.perf_counter()
            sink.admitted(request.request_id, t)
            prompt = len(request.prompt_ids)
            for i in range(request.max_new_tokens):
                time.sleep(self.delay_s)
                self.steps.add(0 if i else prompt, 1 if i else 0, prompt + i - 1 if i else 0, 0, 1)
                t = time.perf_counter()
                sink.tokens(request.request_id, t, 1, [request.prompt_ids[i % prompt]])
            sink.finished(request.request_id, t)

    def load(self):
        return EngineLoad(running=0, waiting=self.waiting.qsize())

    def alive(self):
        return self.thread.is_alive()

    def failure(self):
        return None

    def settings(self):
        return {"delay_s": self.delay_s}

    def stop(self):
        self.waiting.put(None)


def create(loaded, spec):
    return EchoEngine(spec.echo.delay_s)
'''


def install(place):
    """The engine's folder, and the record pip would write of its package: the entry point that names it."""
    (place / "echo_engine").mkdir(parents=True)
    (place / "echo_engine" / "__init__.py").write_text('"""A throwaway engine."""\n')
    (place / "echo_engine" / "spec.py").write_text(textwrap.dedent(SPEC))
    (place / "echo_engine" / "engine.py").write_text(textwrap.dedent(ENGINE))
    (place / "echo_engine-0.1.dist-info").mkdir()
    (place / "echo_engine-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-engine\n"
                                                                   "Version: 0.1\n")
    (place / "echo_engine-0.1.dist-info" / "entry_points.txt").write_text("[benchd.engines]\necho = echo_engine.spec\n")


def test_an_engine_of_its_own_folder_runs_through_the_daemon(tmp_path):
    install(tmp_path / "site")
    path = os.pathsep.join(filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")]))
    process, url = serve(tmp_path, free_port(), PYTHONPATH=path)
    try:
        http = httpx.Client(base_url=url, timeout=30)
        schemas = http.get("/openapi.json").json()["components"]["schemas"]
        assert schemas["EchoSpec"]["properties"]["engine"]["const"] == "echo"
        bad = http.post("/runs", json={"engine": "echo", "echo": {"delay_s": 5}})
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "echo", "delay_s"]
        unknown = http.post("/runs", json={"engine": "vllm"})
        assert unknown.status_code == 422 and "'echo'" in unknown.json()["detail"][0]["msg"]
        spec = {"name": "echo", "engine": "echo", "device": "cpu", "workload": {
            "arrivals": {"profile": "concurrent", "concurrency": 2}, "stop": {"requests": 6},
            "prompt_tokens": {"dist": "fixed", "value": 8}, "output_tokens": {"dist": "fixed", "value": 5}}}
        created = http.post("/runs", json=spec)
        assert created.status_code == 202, created.text
        run_id = created.json()["id"]
        found = {}
        wait_for(lambda: found.update(http.get(f"/runs/{run_id}").json()) or found["status"] in (
            "succeeded", "failed"), 120, "the echo run to end")
        assert found["status"] == "succeeded", found.get("error")
        stage = found["summary"][0]
        assert (stage["requests"], stage["output_tokens"]) == (6, 30)
        assert found["metadata"]["engine_settings"] == {"delay_s": 0.001}
        assert found["engine"] == "echo" and found["spec"]["echo"] == {"delay_s": 0.001}
    finally:
        process.terminate()
        process.wait(60)


def test_an_installed_engine_is_checked_by_the_contract_test(tmp_path):
    """Installed, the engine is one of the contract test's cases (tests/engines/test_contracts.py), run and kept
    (that an engine breaking a contract fails there, the test shows in process)."""
    install(tmp_path / "site")
    path = os.pathsep.join(filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")]))
    case = "tests/engines/test_contracts.py::test_every_engine_keeps_the_contracts[echo]"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", case],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
