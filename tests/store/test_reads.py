"""Every run the main before issue 44 stored reads the same: the current daemon answers each read of the API on a
database that main's daemon wrote exactly as that daemon did (tests/data/write_answers.py wrote both), but for
fields added since, which are null where the old store holds nothing for them (issue 49's quality, log-probabilities
and token counts)."""

import json

from tests.data.write_answers import answers, load
from tests.helpers import ROOT

FIXTURES = ROOT / "tests" / "data"


def test_what_the_main_before_issue_44_stored_reads_the_same(tmp_path):
    written = json.loads((FIXTURES / "answers-2d6c4ea.json").read_text())
    now = answers(load(FIXTURES / "store-2d6c4ea.sqlite.sql", tmp_path / "benchd.db"), tmp_path)
    assert sorted(now) == sorted(written)
    assert len([path for path in written if path.startswith("/runs/") and "/" not in path[6:]]) == 9
    for path, answer in written.items():
        assert known(now[path], answer) == answer, path


def known(now, written):
    """now without the keys written lacks whose value is null: fields added since, with nothing stored for them."""
    if isinstance(now, dict) and isinstance(written, dict):
        return {k: known(v, written.get(k)) for k, v in now.items() if k in written or v is not None}
    if isinstance(now, list) and isinstance(written, list) and len(now) == len(written):
        return [known(x, y) for x, y in zip(now, written)]
    return now
