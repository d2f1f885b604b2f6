"""Every run the main before issue 44 stored reads the same: the current daemon answers each read of the API on a
database that main's daemon wrote exactly as that daemon did (tests/data/write_answers.py wrote both)."""

import json

from tests.data.write_answers import answers, load
from tests.helpers import ROOT

FIXTURES = ROOT / "tests" / "data"


# Figures added since, which a run stored before them has none of (null): what a stage's good requests output, and
# what a good token cost (issue 51).
ADDED = {"good_output_tokens", "good_tokens"}


def without_added(answer, written):
    """The answer less the keys ADDED holds where they are null and the written answer lacks them."""
    if isinstance(answer, dict) and isinstance(written, dict):
        return {k: without_added(v, written.get(k)) for k, v in answer.items()
                if not (k in ADDED and v is None and k not in written)}
    if isinstance(answer, list) and isinstance(written, list) and len(answer) == len(written):
        return [without_added(a, w) for a, w in zip(answer, written)]
    return answer


def test_what_the_main_before_issue_44_stored_reads_the_same(tmp_path):
    written = json.loads((FIXTURES / "answers-2d6c4ea.json").read_text())
    now = answers(load(FIXTURES / "store-2d6c4ea.sqlite.sql", tmp_path / "benchd.db"), tmp_path)
    assert sorted(now) == sorted(written)
    assert len([path for path in written if path.startswith("/runs/") and "/" not in path[6:]]) == 9
    for path, answer in written.items():
        assert without_added(now[path], answer) == answer, path
