"""heap.settle and heap.release in this process: what is frozen escapes collections, and comes back to them."""

import gc
import weakref

from benchd import heap


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_settle_hides_what_exists_and_release_collects_what_it_hid():
    heap.release()
    try:
        node = Node()
        alive = weakref.ref(node)
        heap.settle()
        assert gc.get_freeze_count() > 0
        del node
        gc.collect()
        assert alive() is not None, "a full collection walked a frozen object"
        heap.release()
        assert alive() is None and gc.get_freeze_count() == 0
    finally:
        heap.release()


def test_garbage_frozen_by_one_settle_is_collected_once_the_frozen_heap_has_grown():
    heap.release()
    try:
        heap.settle()  # the full pass: what the process holds now is the base the growth is measured from
        base = gc.get_freeze_count()
        nodes = [Node() for _ in range(int(base * (heap.GROWTH + 0.05)) + 1)]  # what a run left referenced
        last = weakref.ref(nodes[-1])
        heap.settle()  # not yet grown at its start: only the new objects are walked, and they are alive
        assert gc.get_freeze_count() > base * (1 + heap.GROWTH)
        del nodes
        heap.settle()  # grown past the rule at its start: everything thawed and walked
        assert last() is None
        assert gc.get_freeze_count() < base * (1 + heap.GROWTH)
    finally:
        heap.release()


def test_a_settle_after_the_first_walks_only_what_is_new():
    heap.release()
    try:
        heap.settle()
        node = Node()
        alive = weakref.ref(node)
        heap.settle()  # frozen with the rest, no full pass: the heap has not grown by a quarter
        del node
        heap.settle()
        assert alive() is not None, "a settle below the growth rule thawed the heap"
    finally:
        heap.release()


def test_a_worker_frees_a_frozen_model_in_a_reference_cycle_when_another_loads():
    """The model is frozen before the run measures; hooks and closures often put a module in a reference cycle,
    which no collection frees while it is frozen: the worker's release where it drops the model must."""
    from benchd.models.loading import load_model
    from benchd.protocol.messages import Done
    from benchd.worker.core import WorkerCore
    from tests.helpers import make_spec

    def loader(ref, dtype, device, seed=0, **kwargs):
        loaded = load_model(ref, dtype, device, seed, **kwargs)
        loaded.model.__dict__["_cycle"] = [loaded.model]
        return loaded

    messages = []
    core = WorkerCore(messages.append, loader=loader)
    try:
        core.run("first", make_spec().model_dump(mode="json"), None)
        assert gc.get_freeze_count() > 0
        model = weakref.ref(core._loaded.model)
        core.run("second", make_spec(dtype="bfloat16").model_dump(mode="json"), None)  # another model loads
        done = [(m.status, m.error) for m in messages if isinstance(m, Done)]
        assert done == [("succeeded", None), ("succeeded", None)]
        assert model() is None, "the dropped model outlived the worker's release"
    finally:
        core.close()
        heap.release()
