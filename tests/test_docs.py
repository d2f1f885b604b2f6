"""Docs that cannot drift: the reference pages are what docs/generate.py writes from the code today, every relative
link in README.md and docs/ reaches a file (and a heading, where it names one), every repository path the docs
name in code spans exists, and README.md stays a front page."""

import importlib.util
import os
import re
import unicodedata
from functools import cache
from pathlib import Path

import pytest

from benchd.cli.client import DEADLINE_ENV, IDLE_ENV

ROOT = Path(__file__).resolve().parent.parent
README_MAX_BYTES = 10 * 1024


def generator():
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


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
    for endpoint in ("### POST `/runs`", "### GET `/compare`", "### PUT `/baselines/{workload}`",
                     "### TransformersSpec"):
        assert endpoint in api, endpoint


def test_the_readme_is_a_front_page():
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes: move detail into docs/ and link it"
    readme = (ROOT / "README.md").read_text()
    for command in ("make serve", "make test", "docker compose up"):
        assert command in readme, command


# ---- links ----------------------------------------------------------------------------------------------------

FENCE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)
SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.MULTILINE)


def prose(text: str) -> str:
    """The text with fenced blocks and code spans blanked (links there are examples, not links)."""
    return SPAN.sub(" ", FENCE.sub(" ", text))


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: markup dropped, lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = "".join(c for c in text.lower() if c in " -_" or unicodedata.category(c)[0] in "LN")
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for match in HEADING.finditer(FENCE.sub(" ", path.read_text())):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return frozenset(out)


def links(path: Path) -> list[str]:
    return [target for target in LINK.findall(prose(path.read_text()))
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target)]  # http:, https:, mailto:…


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path):
    broken = []
    for target in links(page):
        file, _, anchor = target.partition("#")
        resolved = (page.parent / file).resolve() if file else page
        if not resolved.exists() or not resolved.is_relative_to(ROOT):
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


# Code spans that name a file or directory of this repository by its path from the root (or from src/).
REPO_PATH = re.compile(r"^(?:src/|tests/|bench/|docs/|examples/|charts/|grafana/|prometheus-rules/|benchd/)"
                       r"[\w.*/-]*$")


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_named_exists(page: Path):
    text = FENCE.sub(" ", page.read_text())
    missing = []
    for _, span in SPAN.findall(text):
        for word in span.split():
            word = word.rstrip(".,;:)")
            if not REPO_PATH.match(word):
                continue
            relative = f"src/{word}" if word.startswith("benchd/") else word
            if not any(ROOT.glob(relative)) and not (ROOT / relative).exists():
                missing.append(word)
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {', '.join(missing)}"


def test_the_link_checker_sees_a_broken_link(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("# A title\n\n[fine](#a-title) [gone](missing.md) `[not a link](nowhere.md)`\n"
                    "```\n[nor this](nowhere.md)\n```\n")
    assert links(page) == ["#a-title", "missing.md"]
    assert "a-title" in anchors(page)
    assert slug("The figures: `TTFT`, ITL & E2E") == "the-figures-ttft-itl--e2e"


# Names the docs use that the code defines: a setting or a metric renamed or gone must not live on in prose.
SETTING = re.compile(r"\bBENCHD_[A-Z0-9_]*[A-Z0-9]\b")
METRIC = re.compile(r"\bbenchd_[a-z0-9_]*[a-z0-9]\b(?![:*])")
# read by the CLI (its client: cli/client.py), the tests
NOT_SETTINGS = {"BENCHD_CONFIG", "BENCHD_SERVER", "BENCHD_TEST_ARTIFACTS", DEADLINE_ENV, IDLE_ENV}


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_setting_and_metric_named_exists(page: Path):
    reference = ROOT / "docs" / "reference"
    settings = set(SETTING.findall((reference / "configuration.md").read_text()))
    metrics = (reference / "metrics.md").read_text()
    families = {m.removesuffix("_total").removesuffix("_info") for m in re.findall(r"`(benchd_[a-z0-9_]+)`", metrics)}
    text = page.read_text()
    unknown = sorted({name for name in SETTING.findall(text)
                      if name not in settings and name not in NOT_SETTINGS
                      and not any(s.startswith(name + "__") for s in settings)})
    unknown += sorted({name for name in METRIC.findall(text)
                       if name.removesuffix("_total").removesuffix("_info") not in families
                       and not any(f.startswith(name + "_") for f in families)})
    assert not unknown, f"{page.relative_to(ROOT)} names settings or metrics the code does not have: {unknown}"


def test_every_page_is_linked_from_another():
    """A page no other page links to is a page nobody finds."""
    linked = set()
    for page in markdown_files():
        for target in links(page):
            file = target.partition("#")[0]
            if file:
                linked.add((page.parent / file).resolve())
    orphans = [str(p.relative_to(ROOT)) for p in markdown_files()[1:] if p.resolve() not in linked]
    assert not orphans, f"no page links to {', '.join(orphans)}: link them from README.md's table or their topic"


def test_comments_and_docs_cite_files_of_this_repository_only():
    """The design lives in docs/: nothing the repository ships cites a design document outside it."""
    outside = re.compile(r"\.\./shared|\b(?:DESIGN|STYLE)\.md\b")
    shipped = [p for top in ("src", "tests", "bench", "docs", "grafana", "charts", "deploy", "examples")
               for p in (ROOT / top).rglob("*") if p.is_file() and p.suffix in (".py", ".md", ".yaml", ".yml", ".json")]
    cited = [f"{p.relative_to(ROOT)}:{n}" for p in [ROOT / "README.md", ROOT / "Dockerfile", *shipped]
             for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             if outside.search(line) and p != Path(__file__)]
    assert not cited, cited
