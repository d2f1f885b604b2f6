"""benchd's split scheduler (engines/transformers/scheduling.py) on the tiny model: no step mixes prefills with
decodes, transformers' FIFO does, and both generate the same greedy tokens."""

import time

import pytest

from benchd.engines import GenerationRequest, create_engine
from tests.engines.helpers import Sink, prompts
from tests.helpers import make_spec

pytestmark = pytest.mark.engine


def run(tiny, scheduler):
    """Four requests decoding when four more arrive, each prompt longer than a step's token budget (chunked)."""
    engine = create_engine(tiny, make_spec(transformers={"block_size": 16, "num_blocks": 128, "max_batch_tokens": 48,
                                                         "scheduler": scheduler}))
    engine.start()
    try:
        sink = Sink(8)
        first, later = prompts(4, seed=1, low=20, high=40), prompts(4, seed=2, low=60, high=90)
        for i, p in enumerate(first):
            engine.submit(GenerationRequest(f"first{i}", p, 40), sink)
        deadline = time.monotonic() + 60
        while len(sink.token_ids) < 4 or min(map(len, sink.token_ids.values())) < 4:  # all four decoding
            assert time.monotonic() < deadline
            time.sleep(0.001)
        for i, p in enumerate(later):
            engine.submit(GenerationRequest(f"later{i}", p, 20), sink)
        assert sink.all_done.wait(120)
        assert all(error is None for _, error in sink.ends.values())
        return sink.token_ids, engine.steps.rows, engine.settings()["continuous_batching"]["scheduler_type"]
    finally:
        engine.stop()


def test_split_steps_never_mix_prefills_with_decodes_and_generate_what_fifo_generates(tiny):
    fifo_tokens, fifo_steps, fifo_name = run(tiny, "fifo")
    split_tokens, split_steps, split_name = run(tiny, "split")
    assert (fifo_name, split_name) == ("fifo", "benchd_split")  # transformers made the registered one
    mixed = [row for row in fifo_steps if row[0] and row[1]]  # (prefill tokens, decode tokens, …)
    assert mixed, "FIFO mixed no step: the workload no longer tests the split"
    assert not [row for row in split_steps if row[0] and row[1]]
    assert any(row[0] for row in split_steps) and any(row[1] for row in split_steps)
    assert split_tokens == fifo_tokens  # greedy, float32: the same tokens whichever step carried them


def test_split_runs_no_more_requests_than_a_step_carries(tiny):
    """max_requests_per_batch 2, six requests at once: the others wait in transformers' queue, in order, instead of
    running beside them and skipping decode steps."""
    engine = create_engine(tiny, make_spec(transformers={"block_size": 16, "num_blocks": 128, "max_batch_tokens": 64,
                                                         "max_requests_per_batch": 2, "scheduler": "split"}))
    engine.start()
    try:
        sink = Sink(6)
        for i, p in enumerate(prompts(6, seed=4, low=10, high=30)):
            engine.submit(GenerationRequest(f"r{i}", p, 12), sink)
        most = 0
        while not sink.all_done.wait(0.0005):
            most = max(most, len(engine._manager.batch_processor.scheduler.active_requests))
        assert 1 <= most <= 2
        assert all(error is None for _, error in sink.ends.values())
        assert [rid for rid, _ in sorted(sink.admitted_at.items(), key=lambda kv: kv[1])] == [f"r{i}" for i in range(6)]
    finally:
        engine.stop()


def test_the_gpu_default_is_split_and_the_cpu_default_fifo():
    from benchd.engines.transformers.batching import cb_config
    from benchd.engines.transformers.spec import TransformersOptions

    assert cb_config(TransformersOptions(), "cuda").scheduler_type == "benchd_split"
    assert cb_config(TransformersOptions(), "cpu").scheduler_type == "fifo"
    assert cb_config(TransformersOptions(library_defaults=True), "cuda").scheduler_type == "fifo"  # transformers'
    assert cb_config(TransformersOptions(scheduler="prefill_first"), "cuda").scheduler_type == "prefill_first"
