"""The OpenAPI document is the truth: schemathesis sends thousands of generated requests (valid and invalid, from the
live document) to a real daemon, with the bearer token in its coverage, fuzzing and stateful phases, and without it
in the last two. Besides what it generates from the schemas, its bodies are nested around and far past the depth
limit and hold numbers JSON cannot hold exactly (tests/fuzz_hooks.py); its stateful phase follows the document's
links from POST /runs, /schedules and /matrices to the runs, schedules and matrices they made. Every response must be
documented (status, content type, headers, body schema), none a server error, nothing mutating may succeed without
the token, and every too-deep or non-finite body is refused."""

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from benchd.spec.documents import DEPTH_MAX
from tests import fuzz_hooks
from tests.helpers import ROOT, free_port, serve

CHECKS = ["not_a_server_error", "status_code_conformance", "content_type_conformance",
          "response_headers_conformance", "response_schema_conformance"]
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
# Small limits: accepted runs finish in seconds while the fuzzing goes on.
LIMITS = {"BENCHD_API_TOKEN": "fuzz-token", "BENCHD_LIMITS__MAX_REQUESTS": "4",
          "BENCHD_LIMITS__MAX_PROMPT_TOKENS": "16", "BENCHD_LIMITS__MAX_OUTPUT_TOKENS": "8",
          "BENCHD_LIMITS__MAX_DURATION_S": "5",
          "BENCHD_LIMITS__MAX_STEPS": "20", "BENCHD_LIMITS__MAX_REPEATS": "20", "BENCHD_LIMITS__MAX_STAGES": "4",
          "BENCHD_LIMITS__MEMORY_BYTES": str(32 << 20), "BENCHD_QUEUE_MAX": "4"}
EXAMPLES = 40  # examples per operation and phase
ALL_PHASES = "coverage,fuzzing,stateful"
MIN_CASES = {"with the token": 2000, "without it": 1000}  # all three phases; fuzzing and stateful
NOT_FINITE = set(fuzz_hooks.NOT_FINITE)


def schemathesis(url: str, report: Path, checks: list[str], seed: int, phases: str,
                 *headers: str) -> tuple[list[dict], list[dict]]:
    """Runs schemathesis with the hooks; the requests it sent with their responses, and the altered bodies it sent
    with their statuses."""
    command = [str(Path(sys.executable).parent / "schemathesis"), "run", f"{url}/openapi.json", "--checks",
               ",".join(checks), "--max-examples", str(EXAMPLES), "--seed", str(seed),
               "--phases", phases, "--no-color", "--report", "ndjson", "--report-dir",
               str(report), "--request-timeout", "30"]
    for header in headers:
        command += ["--header", header]
    altered = report.parent / f"{report.name}-altered.jsonl"
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.fuzz_hooks", "BENCHD_FUZZ_LOG": str(altered),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=report.parent, env=env)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    interactions = []
    for path in report.glob("*.ndjson"):
        for line in path.read_text().splitlines():
            event = json.loads(line).get("ScenarioFinished")
            if event is None:
                continue
            for interaction in event["recorder"].get("interactions", {}).values():
                if interaction.get("response") is not None:
                    interactions.append(interaction)
    return interactions, [json.loads(line) for line in altered.read_text().splitlines()]


def test_the_document_links_what_a_post_makes_to_where_it_is_read_and_ended(tmp_path):
    from benchd.api import create_app
    from benchd.daemon.settings import Settings

    document = create_app(Settings(default_schedule=False)).openapi()
    operations = {op["operationId"]: (method, path) for path, item in document["paths"].items()
                  for method, op in item.items()}
    found = {}
    for path, method, code in (("/runs", "post", "202"), ("/schedules", "post", "201"), ("/matrices", "post", "202")):
        for name, link in document["paths"][path][method]["responses"][code]["links"].items():
            found[name] = operations[link["operationId"]]  # every link leads to an operation of the document
    assert found["GetRun"] == ("get", "/runs/{run_id}") and found["CancelRun"] == ("delete", "/runs/{run_id}")
    assert found["DeleteSchedule"] == ("delete", "/schedules/{name}")
    assert found["GetMatrix"] == ("get", "/matrices/{matrix_id}")
    assert found["CancelMatrix"] == ("delete", "/matrices/{matrix_id}")
    assert found["GetFirstRun"] == ("get", "/runs/{run_id}")


@pytest.mark.timeout(1200)
def test_thousands_of_generated_requests_with_and_without_the_token(tmp_path):
    process, url = serve(tmp_path, free_port(), BENCHD_SPOOL_DIR=str(tmp_path / "spool"), **LIMITS)
    timings = {}

    def timed(name: str, *args) -> tuple[list[dict], list[dict]]:
        started = time.monotonic()
        try:
            return schemathesis(*args)
        finally:
            timings[name] = time.monotonic() - started

    try:
        # Both at once, as two clients would (each process waits on the daemon's answers half the time).
        with ThreadPoolExecutor(2) as pool:
            token = pool.submit(timed, "with the token", url, tmp_path / "with-token", CHECKS, 1, ALL_PHASES,
                                "Authorization: Bearer fuzz-token")
            # Without the token every mutating request is a 401 before its body is read: the coverage phase's
            # thousands of schema-edge bodies (half the test's time) would all be that one answer.
            anonymous = pool.submit(timed, "without it", url, tmp_path / "without", [*CHECKS, "ignored_auth"], 2,
                                    "fuzzing,stateful")
            (with_token, altered_with), (without, altered_without) = token.result(), anonymous.result()
        for name, interactions in (("with the token", with_token), ("without it", without)):
            statuses = [i["response"]["status_code"] for i in interactions]
            print(f"schemathesis {name}: {len(interactions)} cases in {timings[name]:.0f} s")
            assert len(interactions) >= MIN_CASES[name], (name, len(interactions))
            assert not [s for s in statuses if s >= 500], name
        accepted = [i for i in without if i["request"]["method"] in MUTATING and i["response"]["status_code"] < 300]
        assert accepted == [], accepted[:3]
        assert any(i["response"]["status_code"] == 202 for i in with_token)  # the token does let runs in
        # The stateful phase followed the links: a run made by POST /runs was read back by its id.
        read_back = [i for i in with_token if i["request"]["method"] == "GET" and i["response"]["status_code"] == 200
                     and "/runs/" in i["request"]["uri"]]
        assert read_back, "no run was read back through the document's links"
        # Too deep and not finite: refused whatever the operation, 422 with the token, 401 without.
        for altered, refused in ((altered_with, {413, 422}), (altered_without, {401})):
            deep = [a for a in altered if a["kind"] == "nested" and int(a["detail"]) > DEPTH_MAX]
            inexact = [a for a in altered if a["kind"] == "number" and a["detail"] in NOT_FINITE]
            print(f"altered bodies: {len(deep)} too deep, {len(inexact)} not finite")
            # Each kind reached the daemon (18 to 49 of each a mode in runs so far: how many the generator's draws give
            # is its own): a few suffice to show the hooks work, and every one is refused.
            assert len(deep) >= 5 and len(inexact) >= 5, (len(deep), len(inexact))
            assert {a["status"] for a in deep + inexact} <= refused, [a for a in deep + inexact
                                                                     if a["status"] not in refused][:3]
            assert all(a["status"] < 500 for a in altered)
        assert process.poll() is None  # and the daemon lives on
        assert httpx.get(f"{url}/schedules").status_code == 200  # what the fuzzing stored lists again
    finally:
        process.terminate()
        process.wait(60)
    log = process.log_path.read_text()
    assert "Traceback" not in log, log[-4000:]
