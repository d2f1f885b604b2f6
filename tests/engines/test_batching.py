"""transformers' continuous batching as benchd configures it, on the tiny model: the KV cache's occupancy live and
across cache generations, a cache too small refused, the library's own defaults, torch's CPU threads, a warm
engine that forgets the prefixes an earlier run cached."""

import time

import pytest
import torch

from benchd.engines import GenerationRequest, create_engine
from benchd.engines.transformers.paged_cache import kv_blocks
from benchd.spec import SpecError
from tests.engines.helpers import Sink, prompts, run_requests
from tests.helpers import make_spec

pytestmark = pytest.mark.engine


def test_kv_cache_occupancy_is_live(tiny):
    engine = create_engine(tiny, make_spec())
    engine.start()
    try:
        idle = engine.load()
        assert idle.kv_blocks_used == 0 and idle.kv_blocks_total >= 64
        sink = Sink(4)
        for i, p in enumerate(prompts(4, seed=5, low=40, high=60)):
            engine.submit(GenerationRequest(f"r{i}", p, 150), sink)
        peak = 0.0
        while not sink.all_done.is_set():
            load = engine.load()
            peak = max(peak, load.kv_occupancy)
            assert 0 <= load.kv_blocks_used <= load.kv_blocks_total
            time.sleep(0.002)
        # 4 requests of ~200 tokens in 16-token blocks hold ~52 of 64 blocks at their longest.
        assert peak > 0.3
        assert engine.load().kv_blocks_used == 0  # all freed at the end
    finally:
        engine.stop()


def test_cache_adapter_reads_both_cache_generations(tiny):
    engine = create_engine(tiny, make_spec())
    engine.start()
    try:
        cache = engine._manager.batch_processor.cache
        used, total = kv_blocks(cache)
        assert (used, total) == (0, cache.num_blocks)
        version_api = "get_num_free_blocks" if hasattr(cache, "get_num_free_blocks") else "compute_free_capacity"
        assert hasattr(cache, version_api)
    finally:
        engine.stop()


def test_cache_too_small_for_the_workload_is_a_spec_error(tiny):
    spec = make_spec(transformers={"block_size": 16, "num_blocks": 2},
                     workload={"prompt_tokens": {"dist": "fixed", "value": 40}})
    with pytest.raises(SpecError, match="transformers.num_blocks"):
        create_engine(tiny, spec)


def test_library_defaults_pass_nothing_of_benchds(tiny):
    from benchd.engines.transformers.batching import cb_config
    from benchd.engines.transformers.spec import TransformersOptions

    ours = cb_config(TransformersOptions(), "cuda")
    library = cb_config(TransformersOptions(library_defaults=True), "cuda")
    assert ours.use_cuda_graph is True and library.use_cuda_graph is None
    assert cb_config(TransformersOptions(), "cpu").num_blocks == 256


def test_cpu_threads_default_to_a_few_on_cuda_and_to_torchs_elsewhere(monkeypatch):
    import os

    from benchd.engines.transformers.batching import CUDA_CPU_THREADS, cb_config, cpu_threads
    from benchd.engines.transformers.spec import TransformersOptions

    for cores, expected in ((16, CUDA_CPU_THREADS), (64, CUDA_CPU_THREADS), (4, 2), (1, 1)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cores: set(range(n)))
        assert cpu_threads(TransformersOptions(), "cuda") == expected
    assert cpu_threads(TransformersOptions(), "cpu") is None  # the model itself runs on them
    assert cpu_threads(TransformersOptions(library_defaults=True), "cuda") is None
    assert cpu_threads(TransformersOptions(cpu_threads=3), "cpu") == 3
    assert cb_config(TransformersOptions(cpu_threads=3), "cuda").use_cuda_graph  # not passed on to transformers


def test_cpu_threads_hold_in_the_generation_thread_while_the_engine_runs(tiny, monkeypatch):
    torch.set_num_threads(2)
    engine = create_engine(tiny, make_spec(transformers={"cpu_threads": 1}))
    engine.start()
    try:
        seen = []  # the count as the generation thread sees it, from inside the model's forward
        hook = tiny.model.register_forward_pre_hook(lambda module, args: seen.append(torch.get_num_threads()))
        try:
            run_requests(engine, [GenerationRequest("r0", prompts(1)[0], 4)])
        finally:
            hook.remove()
        assert seen and set(seen) == {1}
        assert engine.settings()["cpu_threads"] == 1
    finally:
        engine.stop()
    assert torch.get_num_threads() == 2  # restored when the engine stops

    def fails(*args, **kwargs):
        raise RuntimeError("no cache for you")

    monkeypatch.setattr(tiny.model, "init_continuous_batching", fails)
    engine = create_engine(tiny, make_spec(transformers={"cpu_threads": 1}))
    with pytest.raises(RuntimeError, match="no cache"):
        engine.start()
    assert torch.get_num_threads() == 2  # and when it fails to start


def test_a_warm_engine_forgets_the_prefixes_an_earlier_run_cached(tiny):
    """transformers keeps finished requests' complete blocks for prefix sharing across sessions: the same seeded
    prompts in the next run would skip their prefill. forget() drops them, and the next request computes its own."""
    from benchd.engines.transformers.paged_cache import cached_prefix_blocks

    engine = create_engine(tiny, make_spec())
    engine.start()
    try:
        cache = engine._manager.batch_processor.cache
        prompt = prompts(1, seed=9, low=48, high=49)[0]  # three complete 16-token blocks
        run_requests(engine, [GenerationRequest("first", prompt, 8)])
        assert cached_prefix_blocks(cache) >= 3
        engine.forget()
        assert cached_prefix_blocks(cache) == 0 and engine.load().kv_blocks_used == 0
        sink = run_requests(engine, [GenerationRequest("again", prompt, 8)])  # still serves, from scratch
        assert sink.ends["again"][1] is None and len(sink.token_ids["again"]) == 8
    finally:
        engine.stop()


def test_requests_cancelled_after_their_cache_filled_leave_the_engine_admitting(tiny):
    """Two requests that outgrow a 16-block cache: transformers offloads one and stops admitting until a request
    finishes; both are cancelled before either does (a stage cut at its drain, a run cancelled). The engine's next
    request is admitted and generates (transformers alone left it waiting forever: batching.unblock)."""
    engine = create_engine(tiny, make_spec(transformers={"block_size": 16, "num_blocks": 16, "max_batch_tokens": 64}))
    engine.start()
    try:
        sink = Sink(2)
        for i, p in enumerate(prompts(2, seed=3, low=30, high=40)):
            engine.submit(GenerationRequest(f"long{i}", p, 200), sink)  # 240 tokens a request, 256 in the cache
        deadline = time.monotonic() + 60
        # the offload: one request back to waiting, the other running (the loop's own scheduler, made as it starts)
        while not engine._manager.batch_processor.scheduler.block_new_requests:
            assert not sink.ends and time.monotonic() < deadline, "the cache never filled"
            time.sleep(0.001)
        for i in range(2):
            engine.cancel(f"long{i}")
        assert sink.all_done.wait(10) and all(e == "cancelled" for _, e in sink.ends.values()), sink.ends
        after = Sink(1)
        engine.submit(GenerationRequest("next", prompts(1, seed=4)[0], 8), after)
        assert after.all_done.wait(30), "the request after the cancels was never admitted"
        assert after.ends["next"][1] is None and len(after.token_ids["next"]) == 8
    finally:
        engine.stop()
