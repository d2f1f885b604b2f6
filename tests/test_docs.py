"""Docs that cannot drift: the reference pages are what docs/generate.py writes from the code today."""

import importlib.util
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def generator():
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reference_pages_are_what_the_code_says(monkeypatch):
    for name in [n for n in os.environ if n.startswith("BENCHD_")]:
        monkeypatch.delenv(name)  # the defaults are the code's, whatever this shell sets
    generate = generator()
    stale = []
    for path, text in generate.pages().items():
        if not path.exists() or path.read_text() != text:
            stale.append(str(path.relative_to(ROOT)))
    assert not stale, (f"{', '.join(stale)} no longer match the code: run `make docs` ({generate.COMMAND}) "
                       "and commit the pages")


def test_every_setting_metric_and_endpoint_is_on_its_page():
    """Spot checks that the pages hold what they are generated from (the generator could go blind)."""
    from benchd.daemon.settings import Settings

    reference = ROOT / "docs" / "reference"
    configuration = (reference / "configuration.md").read_text()
    for name in Settings.model_fields:
        assert f"BENCHD_{name.upper()}" in configuration
    metrics = (reference / "metrics.md").read_text()
    for name in ("benchd_time_to_first_token_seconds", "benchd_gpu_utilization_ratio", "benchd_gpu_info",
                 "benchd_host_process_cpu_seconds_total", "gen_ai.server.time_to_first_token"):
        assert f"`{name}`" in metrics, name
    ttft = next(line for line in metrics.splitlines() if line.startswith("| `benchd_time_to_first_token_seconds`"))
    assert "`gpu`" in ttft and "`hostname`" in ttft
    api = (reference / "http-api.md").read_text()
    for endpoint in ("### POST `/runs`", "### GET `/compare`", "### PUT `/baselines/{workload}`", "### RunSpec"):
        assert endpoint in api, endpoint

