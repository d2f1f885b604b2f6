"""The worker's watch (measure/watch.py): its stop rules on errors, and a backlog that keeps growing, on simulated
M/M/8 queues."""


import pytest

from benchd.measure.watch import MIN_FINISHED_FOR_RATE, Backlog, Watch
from benchd.spec.validity import ValidityRules
from tests.measure.helpers import queue_counts


def test_watch_stops_on_the_error_count_and_on_the_rate_once_enough_finished():
    watch = Watch(ValidityRules(max_errors=2), open_loop=False)
    assert [watch.finished(ok) for ok in (True, False, False)] == [None, None, None]
    assert watch.finished(False) == "3 measured requests failed, over max_errors 2"
    rate = Watch(ValidityRules(max_error_rate=0.1), open_loop=False)
    assert rate.finished(False) is None  # one in one is no rate yet
    reasons = [rate.finished(True) for _ in range(MIN_FINISHED_FOR_RATE - 3)]
    assert not any(reasons) and rate.finished(False) is None  # 2 of 19
    assert rate.finished(True) is None  # 2 of 20: at the rate, not over it
    assert rate.finished(False) == "error rate 14.3% (3 of 21) over max_error_rate 10.0%"


@pytest.mark.parametrize("load", [0.5, 0.8, 0.9])
def test_a_stable_queue_is_not_over_saturated(load):
    # 8 servers, 160 ms a request: 50 requests/s at load 1; ten minutes, two seeds.
    for seed in (0, 1):
        backlog = Backlog(10.0)
        for t, sent, finished in queue_counts(50 * load, 8, 0.16, 600, seed):
            assert backlog.add(t, sent, finished) is None, (load, seed, t, sent - finished)


@pytest.mark.parametrize(("over", "within_s"), [(1.2, 40), (1.5, 20), (2.0, 12)])
def test_a_growing_backlog_is_over_saturated(over, within_s):
    for seed in (0, 1):
        backlog, reason = Backlog(10.0), None
        for t, sent, finished in queue_counts(50 * over, 8, 0.16, 120, seed):
            if reason := backlog.add(t, sent, finished):
                break
        assert reason is not None and t <= within_s, (over, seed, t)
        assert reason.startswith("over-saturated: requests in flight grew from")
        assert "in 10 s without draining" in reason


def test_a_backlog_that_drains_is_not_over_saturated():
    backlog = Backlog(2.0)
    # Sent 10 a tick; nothing finishes for 1.5 s, then everything at once: it grows fast, but empties every 1.5 s.
    assert all(backlog.add(i * 0.1, 10 * i, 150 * (i // 15)) is None for i in range(100))


def test_the_watch_samples_only_open_loops():
    assert Watch(ValidityRules(oversaturation_s=1), open_loop=False).backlog is None
    assert Watch(ValidityRules(oversaturation_s=1), open_loop=True).backlog is not None
    assert Watch(ValidityRules(), open_loop=True).backlog is None
