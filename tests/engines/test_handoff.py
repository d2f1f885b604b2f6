"""The engine's thread giving way to a due send (engines/handoff.py): once and within its bound, around each send of
an open loop, never for a send a concurrency cap holds back, and not where the thread does not keep the GIL."""

import math
import threading
import time

import pytest
import torch

from benchd.daemon.inprocess import run_local
from benchd.engines.handoff import MAX_WAIT_S, Handoff
from benchd.engines.transformers.engine import TransformersEngine
from benchd.engines.transformers.spec import TransformersOptions
from tests.helpers import make_spec

pytestmark = pytest.mark.engine


def test_the_engine_thread_gives_way_to_a_due_send_once_and_not_past_the_bound():
    handoff = Handoff()
    handoff.expect(time.perf_counter() + 60)
    start = time.perf_counter()
    handoff.give_way()  # not due yet: no wait
    assert time.perf_counter() - start < MAX_WAIT_S and handoff.due != math.inf
    handoff.expect(time.perf_counter() - 1)  # due, never sent: one wait of the bound, then no more for this send
    start = time.perf_counter()
    handoff.give_way()
    assert time.perf_counter() - start >= MAX_WAIT_S and handoff.due == math.inf
    handoff.expect(time.perf_counter())
    sent = threading.Event()
    threading.Thread(target=lambda: (time.sleep(0.0005), handoff.clear(), sent.set())).start()
    handoff.give_way()  # waits for the send
    assert sent.wait(5) and handoff.due == math.inf


def test_an_open_loop_hands_off_around_each_send_and_the_engine_drops_its_hooks(tiny, monkeypatch):
    """The engine's thread passes its hooks during an open-loop run (each layer, each forward pass) with sends
    expected, and the run leaves none due; the stopped engine takes its hooks off the model it shares."""
    calls = []
    give_way = Handoff.give_way
    monkeypatch.setattr(Handoff, "give_way", lambda self, *args: calls.append(self.due) or give_way(self, *args))
    spec = make_spec(workload={"arrivals": {"profile": "poisson", "rate": 40}, "stop": {"requests": 12}})
    outcome = run_local(spec, tiny)
    assert outcome.status == "succeeded"
    layers = next(m for m in tiny.model.modules() if isinstance(m, torch.nn.ModuleList))
    assert len(calls) > 12 * (len(layers) + 2)  # every forward pass: before each layer, before and after the model
    assert any(due != math.inf for due in calls)  # sends were expected while the engine ran
    assert not tiny.model._forward_pre_hooks and not tiny.model._forward_hooks
    assert all(not layer._forward_pre_hooks for layer in layers)


def test_a_send_held_back_by_a_concurrency_cap_does_not_hold_the_engine(tiny, monkeypatch):
    """At a cap, a due send waits for a completion, which needs the engine: the engine's thread must not wait for
    it (once a request, that would cost a saturated engine MAX_WAIT_S a request)."""
    waits = []
    give_way = Handoff.give_way

    def timed(self, *args):
        start = time.perf_counter()
        give_way(self, *args)
        waits.append(time.perf_counter() - start)

    monkeypatch.setattr(Handoff, "give_way", timed)
    spec = make_spec(workload={"arrivals": {"profile": "poisson", "rate": 400, "max_concurrency": 2},
                               "stop": {"requests": 24}})
    outcome = run_local(spec, tiny)
    assert outcome.status == "succeeded" and waits
    assert sum(w >= MAX_WAIT_S for w in waits) <= 2, sorted(waits)[-5:]


def test_no_handoff_where_the_engine_thread_does_not_keep_the_gil_or_the_forward_is_compiled(tiny):
    compiled = TransformersEngine(tiny, TransformersOptions(block_size=16, num_blocks=64, compile_level=1),
                                  make_spec().workload)
    assert compiled.handoff is None  # hooks would break the compiled graph at every layer
    plain = TransformersEngine(tiny, TransformersOptions(block_size=16, num_blocks=64), make_spec().workload)
    assert plain.handoff is not None
