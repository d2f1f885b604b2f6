"""Writes tests/data/specs-COMMIT.json: specs that commit's HTTP API and command line accept, each with what it resolved
to there (tests/spec/test_spec.py checks that each still means the same).

    PYTHONPATH=<that commit's checkout>/src:. python tests/data/write_specs.py COMMIT CAPTURED_DIR

CAPTURED_DIR holds JSON lines {"test", "input"}: every document the commit's RunSpec accepted while its tests ran
(specs-14d1cbb.json: its tests/test_spec, _matrix, _admission, _cli, _daemon, _timed, _openai, _validity, _capacity,
_footprint, _store, _runner, _faults, _workers, _pages, _server_metrics, _telemetry, _parallel and tests/engines,
under a wrap validator added to its RunSpec for the purpose; the workers' too, which validate the daemon's whole
dumps). Before those come the examples (a matrix's variants too).

Each spec is {"source", "spec", "resolved"}: resolved is what the spec's model_dump gave, as [path, value] changes to
"default" (the dump of an empty spec); spec is the document as sent, or "resolved" when it was that dump itself. Its
set fields (model_dump(exclude_unset=True)) were the document again: checked here, not kept. Each command is the
arguments of `benchd run` with what its spec's dump was."""

from __future__ import annotations

import copy
import importlib
import json
import sys
from pathlib import Path

from benchd.cli import main as cli
from benchd.spec import parse_spec
from benchd.spec.matrix import RESERVED, _set

# 14d1cbb did not export it from benchd.spec, and it has left benchd.spec.run since
read_document = getattr(importlib.import_module("benchd.spec"), "read_document", None) \
    or importlib.import_module("benchd.spec.run").read_document

ROOT = Path(__file__).parent.parent.parent
OUT = Path(__file__).parent
# Quick specs (no file), and files with flags over them (the flags replace the file's fields).
ARGV = [
    [], ["--rate", "2.5"], ["--concurrency", "4"], ["--requests", "5", "--duration", "3"],
    ["--engine", "static"], ["--model", "tiny", "--dtype", "float32", "--device", "cpu", "--seed", "7",
                             "--label", "abc123"],
    ["--prompt-tokens", "16", "--output-tokens", "4", "--warmup-requests", "2", "--concurrency", "1"],
    ["examples/tiny-poisson.yaml"], ["examples/tiny-poisson.yaml", "--engine", "static"],
    ["examples/tiny-sweep.yaml", "--seed", "3"], ["examples/train-step-tiny.yaml", "--warmup-study"],
    ["examples/matmul-gpu.yaml", "--device", "cpu"], ["examples/openai.yaml", "--model", "served"],
]


def in_root(argv: list[str]) -> list[str]:
    """The arguments with the examples' paths made absolute."""
    return [str(ROOT / arg) if arg.startswith("examples/") else arg for arg in argv]


def changes(base: object, value: object, path: tuple = ()) -> list[list]:
    """[path, value] pairs that make base into value; a mapping whose keys differ (another member of a union) is
    replaced whole."""
    if isinstance(base, dict) and isinstance(value, dict) and set(base) == set(value):
        return [change for key in value for change in changes(base[key], value[key], (*path, key))]
    return [] if base == value else [[list(path), value]]


def entry(source: str, data: dict, default: dict) -> dict:
    spec = parse_spec(copy.deepcopy(data))
    assert spec.model_dump(mode="json", exclude_unset=True) == data, source  # the set fields: the document
    resolved = spec.model_dump(mode="json")
    return {"source": source, "spec": "resolved" if data == resolved else data,
            "resolved": changes(default, resolved)}


def documents(captured: Path) -> list[tuple[str, dict]]:
    found = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        data = read_document(path)
        source = f"examples/{path.name}"
        if "matrix" not in data:
            found.append((source, data))
            continue
        base = {k: v for k, v in data.items() if k not in RESERVED}
        found.append((source, base))
        for path_, values in data["matrix"].items():  # each value on the base spec
            for value in values:
                variant = copy.deepcopy(base)
                _set(variant, path_, value)
                found.append((f"{source} {path_}={json.dumps(value)}", variant))
    for path in sorted(captured.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            item = json.loads(line)
            found.append((item["test"].split(" (")[0], item["input"]))
    return found


def main(commit: str, captured: Path) -> None:
    default = parse_spec({}).model_dump(mode="json")
    seen, specs = set(), []
    for source, data in documents(captured):
        key = json.dumps(data, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        specs.append(entry(source, data, default))
    commands = []
    for argv in ARGV:
        args = cli.build_parser().parse_args(["run", *in_root(argv)])
        commands.append({"argv": argv, "resolved": cli._spec(args).model_dump(mode="json")})
    document = {"commit": commit, "default": default, "specs": specs, "commands": commands}
    (OUT / f"specs-{commit}.json").write_text(json.dumps(document, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
