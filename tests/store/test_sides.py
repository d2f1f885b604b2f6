"""A comparison's side read from the store: a side of one run borrows the run-to-run spread of the stored runs of its
own stack in its own segment of the history, and of no others (issue 53: the spread of a one-run comparison was
taken over stored runs that spanned a +190 % step)."""

import zlib

import numpy as np
import pytest

from benchd.measure.compare import compare
from benchd.measure.records import RequestRecord
from benchd.measure.summary import summarize
from benchd.store.operations import FinishRun, Requests, stage_row
from tests.helpers import make_spec
from tests.measure.helpers import noise

TOKENS = 6


def store_run(store, run_id: str, itl: float, label: str | None = None, engine_run: int = 2) -> None:
    """A run as the daemon stores one: 30 requests of TOKENS tokens each arriving itl apart (each request a little
    apart from the next), their summary, the stage's row, its metadata."""
    rng = np.random.default_rng(zlib.crc32(run_id.encode()))  # the same draws in every process (hash() is not)
    records = []
    for i in range(30):
        stamps = (0.5 * i + 0.02 + np.cumsum(itl * rng.lognormal(0, 0.05, TOKENS))).tolist()
        records.append(RequestRecord(i, f"q{i}", False, 8, TOKENS, 0.5 * i, 0.5 * i, 0.5 * i, stamps, [1] * TOKENS,
                                     finished_s=stamps[-1]))
    summary = summarize("concurrent=1", "succeeded", records)
    store.create_run(run_id, {**make_spec(name="w").model_dump(mode="json"), "label": label})
    store.spool.submit(Requests(run_id, [{"stage_index": 0, "gpu": "", **r.to_row("concurrent=1", 0.0)}
                                         for r in records]).as_json())
    metadata = {"device": "cpu", "device_name": "x86_64", "model": "tiny", "label": label, "engine_run": engine_run,
                "transformers_version": "5.17.0"}
    store.spool.submit(FinishRun(run_id, {
        "status": "succeeded", "error": None, "error_stage": None, "finished_at": "2026-11-20T14:00:00+00:00",
        "summary": [summary.model_dump(mode="json")], "run_metadata": metadata, "timeline": None, "valid": True,
        "model": "tiny", "label": label, "hardware": None, "energy_per_token_j": None, "parts": None,
        "capacity_requests_per_s": None}, [stage_row(0, "", summary)], []).as_json())


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """One workload on node n1: 12 runs at ITL 10 ms (±2 %), four of them labelled "other" (another stack) and one
    cold; a change point (the history's own analysis) where ITL steps to 15 ms for 8 runs."""
    from benchd.daemon.history import History
    from benchd.measure.history import HistorySettings
    from benchd.store.database import Store

    path = tmp_path_factory.mktemp("sides")
    store = Store(f"sqlite:///{path}/benchd.db", spool_dir=path / "spool", node="n1")
    store.start()
    assert store.wait_ready(30)
    scale = [float(v) for v in noise(20, 0.02, 3)]
    for i in range(20):
        label = "other" if i in (2, 5, 7, 9) else None
        store_run(store, f"run{i:02d}", 0.010 * scale[i] * (1.5 if i >= 12 else 1.0), label,
                  engine_run=1 if i == 4 else 2)
    assert store.flush(30)
    found = History(HistorySettings(), store, None, "n1", set()).analyse("w")
    assert {c.run_id for c in found} >= {"run12"}
    yield store
    store.close()


def test_one_run_borrows_the_spread_of_its_stack_in_its_segment_only(history):
    from benchd.store.sides import side_from_store

    side = side_from_store(history, ["run06"])
    (group,) = side.history
    # Its segment's runs before the step, of its stack (no "other" label), warm, itself among them.
    assert sorted(group) == ["run00", "run01", "run03", "run06", "run08", "run10", "run11"]
    assert group["run00"]["itl_s.p50"] == pytest.approx(0.010 * float(noise(20, 0.02, 3)[0]), rel=0.1)
    after = side_from_store(history, ["run15"])
    assert sorted(after.history[0]) == [f"run{i}" for i in range(12, 20)]
    # Two runs of one stack and segment, one against the other: their ITL moves about 2 % a run, so the interval
    # rests on that and no verdict comes from the 50 % step or the other label's runs.
    result = compare(side, side_from_store(history, ["run08"]))
    itl = next(m for m in result.metrics if m.metric == "itl_s.p50")
    assert itl.spread_runs == 7 and itl.spread < 0.05 and itl.verdict in ("equivalent", "inconclusive")
    assert "rests on the run-to-run spread of 7 runs of the same stacks" in itl.reason
    # Across the step, two single runs: slower, and said so.
    step = next(m for m in compare(side, after).metrics if m.metric == "itl_s.p50")
    assert step.verdict == "slower" and step.relative_change == pytest.approx(0.5, abs=0.1)


def test_a_side_of_several_runs_borrows_once_for_its_stack_and_once_a_segment(history):
    from benchd.store.sides import side_from_store

    (group,) = side_from_store(history, ["run00", "run01", "run03"]).history
    assert sorted(group) == ["run00", "run01", "run03", "run06", "run08", "run10", "run11"]
    before, after = side_from_store(history, ["run10", "run13"]).history  # one segment each side of the step
    assert len(before) == 7 and "run10" in before and sorted(after) == [f"run{i}" for i in range(12, 20)]
