"""What the openai engine's tests share: a spec against a server, a run's records in order, a real `transformers
serve`."""

import contextlib
import os
import socket
import subprocess
import sys

from benchd.spec import parse_spec
from tests.helpers import free_port, wait_for


def openai_spec(base_url, model="ok", api="completions", requests=4, output=7, prompts=None, tokenizer=None,
                arrivals=None, stop=None, **openai):
    workload = {"arrivals": arrivals or {"profile": "concurrent", "concurrency": 2},
                "stop": stop or {"requests": requests},
                "output_tokens": {"dist": "fixed", "value": output}}
    if prompts is not None:
        workload["dataset"] = {"format": "jsonl", "path": prompts}
    else:
        workload["prompt_tokens"] = {"dist": "fixed", "value": 12}
    return parse_spec({"name": "oa", "engine": "openai", "model": model, "workload": workload,
                       "openai": {"base_url": base_url, "api": api, "tokenizer": tokenizer, **openai}})


def records(outcome):
    return sorted(outcome.stages[0].records, key=lambda r: r.index)


@contextlib.contextmanager
def transformers_serve(path):
    """`transformers serve` of a model directory on the CPU in float32, offline: its base URL until the block ends."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    process = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "transformers"), "serve", str(path), "--host",
         "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype", "float32"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def listening():
        if process.poll() is not None:
            raise RuntimeError(f"transformers serve exited: {process.stderr.read()[-2000:]}")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_for(listening, 240, "transformers serve to listen")  # imports and loads under load
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(30)
