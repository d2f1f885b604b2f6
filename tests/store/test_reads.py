"""Every run the main before issue 44 stored reads the same: the current daemon answers each read of the API on a
database that main's daemon wrote as that daemon did (tests/data/write_answers.py wrote both): every field it
answered, the same; a field added since, empty for what an older daemon stored. A comparison is computed when
asked, not stored: its figures read the same, its verdicts are the current rule's (issue 53)."""

import json

from tests.data.write_answers import answers, load
from tests.helpers import ROOT

FIXTURES = ROOT / "tests" / "data"
# What a comparison computes from the stored runs (their figures, what the sides are), which reads the same; its
# intervals, verdicts, reasons, warnings and the stack's names are the comparison rule's.
FIGURES = ("metric", "a", "b", "relative_change", "samples_a", "samples_b")
SIDES = ("runs", "workloads", "labels", "first", "last", "reports")


# Counts added since, none for what was stored before them: a stage's requests whose token counts a server's usage
# checked, and those that disagreed (issue 49).
COUNTS = {"counts_checked", "counts_disagree"}


def same(old, new, where: str) -> None:
    """new answers everything old did, the same; what new adds is empty (null, [], {})."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in old:
            assert key in new, f"{where}: {key} is gone"
            same(old[key], new[key], f"{where}.{key}")
        for key in set(new) - set(old):
            assert new[key] in (None, [], {}) or (key in COUNTS and new[key] == 0), \
                f"{where}.{key}: {new[key]!r} added to what was stored"
    elif isinstance(old, list) and isinstance(new, list):
        assert len(old) == len(new), where
        for i, (x, y) in enumerate(zip(old, new)):
            same(x, y, f"{where}[{i}]")
    else:
        assert old == new, where


def test_what_the_main_before_issue_44_stored_reads_the_same(tmp_path):
    written = json.loads((FIXTURES / "answers-2d6c4ea.json").read_text())
    now = answers(load(FIXTURES / "store-2d6c4ea.sqlite.sql", tmp_path / "benchd.db"), tmp_path)
    assert sorted(now) == sorted(written)
    assert len([path for path in written if path.startswith("/runs/") and "/" not in path[6:]]) == 9
    for path, answer in written.items():
        if path.startswith("/compare"):
            old, new = answer["body"], now[path]["body"]
            assert now[path]["status"] == answer["status"] and (new["a"], new["b"]) == (old["a"], old["b"])
            assert [{k: m[k] for k in FIGURES} for m in new["metrics"]] == \
                [{k: m[k] for k in FIGURES} for m in old["metrics"]]
            for side in ("context_a", "context_b"):
                assert {k: new[side][k] for k in SIDES} == {k: old[side][k] for k in SIDES}
        else:
            same(answer, now[path], path)
