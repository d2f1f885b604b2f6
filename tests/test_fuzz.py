"""The OpenAPI document is the truth: schemathesis sends a thousand and more generated requests (valid and
invalid, from the live document) to a real daemon, with and without the bearer token. Every response must be
documented (status, content type, headers, body schema), none a server error, and nothing mutating may succeed
without the token."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import free_port, serve

CHECKS = ["not_a_server_error", "status_code_conformance", "content_type_conformance",
          "response_headers_conformance", "response_schema_conformance"]
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
# Small limits: accepted runs finish in seconds while the fuzzing goes on.
LIMITS = {"BENCHD_API_TOKEN": "fuzz-token", "BENCHD_LIMITS__MAX_REQUESTS": "4", "BENCHD_LIMITS__MAX_PROMPT_TOKENS": "16",
          "BENCHD_LIMITS__MAX_OUTPUT_TOKENS": "8", "BENCHD_LIMITS__MAX_DURATION_S": "5",
          "BENCHD_LIMITS__MAX_STEPS": "20", "BENCHD_LIMITS__MAX_REPEATS": "20", "BENCHD_LIMITS__MAX_STAGES": "4",
          "BENCHD_LIMITS__MEMORY_BYTES": str(32 << 20), "BENCHD_QUEUE_MAX": "4"}


def schemathesis(url: str, report: Path, checks: list[str], examples: int, seed: int, *headers: str) -> list[dict]:
    """Runs schemathesis; the requests it sent with their responses."""
    command = [str(Path(sys.executable).parent / "schemathesis"), "run", f"{url}/openapi.json", "--checks",
               ",".join(checks), "--max-examples", str(examples), "--seed", str(seed), "--phases", "coverage,fuzzing",
               "--no-color", "--report", "ndjson", "--report-dir", str(report), "--request-timeout", "30"]
    for header in headers:
        command += ["--header", header]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=report.parent)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    interactions = []
    for path in report.glob("*.ndjson"):
        for line in path.read_text().splitlines():
            event = json.loads(line).get("ScenarioFinished")
            if event is None:
                continue
            for interaction in event["recorder"]["interactions"].values():
                if interaction.get("response") is not None:
                    interactions.append(interaction)
    return interactions


@pytest.mark.timeout(1200)
def test_a_thousand_generated_requests_with_and_without_the_token(tmp_path):
    process, url = serve(tmp_path, free_port(), BENCHD_SPOOL_DIR=str(tmp_path / "spool"), **LIMITS)
    try:
        with_token = schemathesis(url, tmp_path / "with-token", CHECKS, 25, 1, "Authorization: Bearer fuzz-token")
        without = schemathesis(url, tmp_path / "without", [*CHECKS, "ignored_auth"], 25, 2)
        for name, interactions in (("with the token", with_token), ("without it", without)):
            statuses = [i["response"]["status_code"] for i in interactions]
            assert len(interactions) >= 1000, (name, len(interactions))
            assert not [s for s in statuses if s >= 500], name
        accepted = [i for i in without if i["request"]["method"] in MUTATING and i["response"]["status_code"] < 300]
        assert accepted == [], accepted[:3]
        assert any(i["response"]["status_code"] == 202 for i in with_token)  # the token does let runs in
        assert process.poll() is None  # and the daemon lives on
    finally:
        process.terminate()
        process.wait(60)
    log = process.log_path.read_text()
    assert "Traceback" not in log, log[-4000:]
