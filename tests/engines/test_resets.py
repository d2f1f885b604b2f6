"""A request transformers soft-resets for want of cache blocks (its tokens moved into its prompt, to be prefilled
again) is read in full: every token with its own stamp (engines/transformers/batching.py, stamps_survive_resets)."""

import time

import pytest

from benchd.engines import GenerationRequest, create_engine
from tests.engines.helpers import Sink, prompts
from tests.helpers import make_spec

pytestmark = pytest.mark.engine


def test_requests_soft_reset_for_want_of_blocks_keep_every_token_and_its_stamp(tiny):
    """Three requests of 240 tokens in a cache of 256: transformers admits them all, runs out of blocks and resets
    some (with no CPU pool, as benchd configures it, every offload is a soft reset). Read naively, requests of 200
    tokens came back with 107 and 152: the tokens before a reset lost their stamps."""
    engine = create_engine(tiny, make_spec(transformers={"block_size": 16, "num_blocks": 16, "max_batch_tokens": 64}))
    engine.start()
    try:
        sink = Sink(3)
        for i, p in enumerate(prompts(3, seed=3, low=30, high=40)):
            engine.submit(GenerationRequest(f"long{i}", p, 200), sink)
        scheduler = engine._manager.batch_processor.scheduler
        offloaded = False
        deadline = time.monotonic() + 120
        while not sink.all_done.is_set():
            offloaded |= scheduler.block_new_requests  # set at an offload, until a request finishes
            assert time.monotonic() < deadline, "the requests never finished"
            time.sleep(0.001)
        assert offloaded, "no request was offloaded: the test no longer tests a reset"
        assert all(error is None for _, error in sink.ends.values()), sink.ends
        assert [len(sink.token_ids[f"long{i}"]) for i in range(3)] == [200] * 3
        assert [len(sink.stamps[f"long{i}"]) for i in range(3)] == [200] * 3
        assert all(stamps == sorted(stamps) for stamps in sink.stamps.values())
        assert all(end == sink.stamps[rid][-1] for rid, (end, _) in sink.ends.items())  # finished at its last token
    finally:
        engine.stop()
