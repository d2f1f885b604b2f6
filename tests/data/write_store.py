"""Writes tests/data/store-COMMIT.sqlite.sql and .postgresql.sql: the store a daemon of that commit leaves, through its
HTTP API, after a run of every kind and engine, schedules and a matrix (tests/store/test_store.py reads them back).

    PYTHONPATH=<that commit's checkout>/src:. python tests/data/write_store.py COMMIT

store-14d1cbb.* were written so at 14d1cbb, where every stored spec holds every kind's and engine's section."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchd.api import create_app
from benchd.daemon.settings import Settings
from tests.helpers import CPU_CACHE, LiveServer, PostgresServer, wait_for
from tests.openai_server import OpenAIServer

HERE = Path(__file__).parent
WORKLOAD = {"arrivals": {"profile": "concurrent", "concurrency": 2}, "stop": {"requests": 3},
            "prompt_tokens": {"dist": "fixed", "value": 8}, "output_tokens": {"dist": "fixed", "value": 4}}


def bodies(base_url: str, prompts: str) -> dict[str, dict]:
    """A spec of each kind and engine, as a client sends them (sections of other engines included, as a client
    sharing one file between engines does)."""
    return {
        "transformers": {"name": "fixture", "label": "v1", "transformers": CPU_CACHE, "workload": WORKLOAD},
        "static": {"name": "fixture-static", "engine": "static", "static": {"batch_size": 2},
                   "transformers": CPU_CACHE, "workload": WORKLOAD},
        "openai": {"name": "fixture-openai", "engine": "openai", "model": "ok",
                   "openai": {"base_url": base_url, "max_connections": 2},
                   "workload": {**WORKLOAD, "dataset": {"format": "jsonl", "path": prompts}}},
        "train_step": {"name": "fixture-train", "kind": "train_step",
                       "train_step": {"batch_size": 1, "context_length": 16, "warmup_steps": 1, "steps": 2}},
        "kernel": {"name": "fixture-kernel", "kind": "kernel",
                   "kernel": {"op": "matmul", "shapes": [{"m": 32, "n": 32, "k": 32}], "warmup": 1, "repeats": 3,
                              "flush_l2": False}},
    }


def post(server: LiveServer, path: str, body: dict, status: int) -> dict:
    for _ in range(240):  # a timed run waits for its worker to have measured the device (503)
        response = server.http.post(path, json=body)
        if response.status_code != 503:
            break
        time.sleep(0.5)
    assert response.status_code == status, response.text
    return response.json()


def fill(url: str, work: Path) -> None:
    work.mkdir(parents=True)
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"prompt {i}"}) + "\n" for i in range(4)))
    settings = Settings(database_url=url, device="cpu", dtype="float32", default_schedule=False,
                        spool_dir=str(work / "spool"), model_roots=[str(work)], workers={"log_dir": str(work / "w")})
    with OpenAIServer() as served, LiveServer(create_app(settings)) as server:
        server.wait_ready(120)
        specs = bodies(served.base_url, str(prompts))
        run_ids = [post(server, "/runs", body, 202)["id"] for body in specs.values()]
        # schedules run at once when put, then every interval_s
        post(server, "/schedules", {"name": "nightly", "spec": specs["transformers"], "interval_s": 86400}, 201)
        post(server, "/schedules", {"name": "kernels", "spec": specs["kernel"], "interval_s": 86400}, 201)
        matrix = post(server, "/matrices", {**specs["transformers"], "name": "fixture-matrix",
                                            "matrix": {"engine": ["transformers", "static"]}, "repeats": 1}, 202)

        def ended() -> bool:
            runs = server.http.get("/runs", params={"limit": 100}).json()["items"]
            done = server.http.get(f"/matrices/{matrix['id']}").json()["status"] not in ("queued", "running")
            return done and len(runs) == len(run_ids) + 2 + 2 and all(r["status"] == "succeeded" for r in runs)

        wait_for(ended, 600, "every run to succeed")
        assert server.http.put("/baselines/fixture", json={"run_id": run_ids[0]}).status_code == 200


def dump_sqlite(path: Path, out: Path) -> None:
    with sqlite3.connect(path) as db:
        out.write_text("\n".join(db.iterdump()) + "\n")


def main(commit: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        fill(f"sqlite:///{work}/benchd.db", work / "sqlite")
        dump_sqlite(work / "benchd.db", HERE / f"store-{commit}.sqlite.sql")
        with PostgresServer() as server:
            fill(server.create_database("fixture"), work / "postgresql")
            with open(HERE / f"store-{commit}.postgresql.sql", "w") as out:
                subprocess.run([f"{server.bindir}/pg_dump", "-h", "127.0.0.1", "-p", str(server.port), "-U", "benchd",
                                "--no-owner", "fixture"], check=True, stdout=out)


if __name__ == "__main__":
    main(sys.argv[1])
