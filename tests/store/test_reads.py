"""Every run the main before issue 44 stored reads the same: the current daemon answers each read of the API on a
database that main's daemon wrote exactly as that daemon did (tests/data/write_answers.py wrote both), but for
fields added since (issue 49's quality, log-probabilities, token counts)."""

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


# Fields added since (issue 49): a run's quality, a request's log-probabilities and counts, a stage's counts checked,
# and a comparison's quality (computed again from the stored tokens).
ADDED = {"quality", "logprobs", "counts", "counts_checked", "counts_disagree"}


def known(now, written):
    """now without the fields added since that written lacks."""
    if isinstance(now, dict) and isinstance(written, dict):
        return {k: known(v, written.get(k)) for k, v in now.items() if k in written or k not in ADDED}
    if isinstance(now, list) and isinstance(written, list) and len(now) == len(written):
        return [known(x, y) for x, y in zip(now, written)]
    return now
