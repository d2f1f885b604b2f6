"""A planned engine's warm-up checked before it starts: no graph captured, a second IO pair skipped, a start refused
after it (what it held let go, and the next run runs)."""

import gc
import weakref
from types import SimpleNamespace

import pytest
import torch
from transformers.generation.continuous_batching.input_outputs import HostDeviceIOPair

from benchd.daemon.inprocess import run_local
from benchd.engines import create_engine
from benchd.engines.transformers import warmup
from benchd.engines.transformers.plan import plan_cache
from benchd.engines.transformers.warmup import check_warmup, warm_skipped_pair
from benchd.models.flops import Shape
from benchd.spec import SpecError
from tests.helpers import make_spec

pytestmark = pytest.mark.engine


def test_a_planned_engine_whose_warm_up_captured_no_graph_does_not_start(tiny):
    """transformers says nothing when the largest step's capture fails at warm-up (out of memory), and the graph pool
    then fragments under load (docs/memory.md): a planned engine checks its warm-up captured that graph. On the CPU no
    graph is ever captured, so the check is run on a started engine's real objects with CUDA graphs marked on."""
    engine = create_engine(tiny, make_spec())
    engine.start()
    try:
        engine.plan = plan_cache(Shape.of(tiny.model.config), 4, 0, 2 << 30, 64, num_blocks=64, block_size=16,
                                 max_batch_tokens=128)
        engine._manager.continuous_batching_config.use_cuda_graph = (True, True)
        with pytest.raises(torch.OutOfMemoryError, match="the warm-up could not capture the largest step"):
            check_warmup(engine._manager, engine.plan, tiny.device)
        engine._manager.batch_processor.inputs_and_outputs.graphs._storage[(128, 1024)] = "captured"
        check_warmup(engine._manager, engine.plan, tiny.device)  # captured: it starts
        engine._manager.batch_processor.inputs_and_outputs.graphs._storage.clear()
    finally:
        engine._manager.continuous_batching_config.use_cuda_graph = (False, False)
        engine.stop()


def test_an_async_engine_whose_warm_up_skipped_its_second_io_pair_has_it_warmed(tiny):
    """transformers 5.17 warms only the first of async batching's two IO pairs when the attention has no decode fast
    path (paged sdpa, torch's varlen kernel), and the second would capture its largest step under load, outside the
    plan; on an H200 the start check called that out of memory with 86 GiB free (docs/memory.md). benchd warms the
    second pair itself, as transformers warms the first: the largest step, then back to the first pair. A second
    pair still unwarmed names the setting; one whose warm-up step was prepared but not captured ran out of memory.
    Async IO pairs need CUDA: the pairs here are transformers' own host/device pairs built on the CPU, their
    buffers filled as a warm-up would; the GPU run checked the real ones (docs/benchmarks.md)."""
    engine = create_engine(tiny, make_spec())
    engine.start()
    processor, config = engine._manager.batch_processor, engine._manager.continuous_batching_config
    sync_io, runner, graphs_before, pairs = processor.inputs_and_outputs, processor.model_runner, \
        config.use_cuda_graph, []
    try:
        engine.plan = plan_cache(Shape.of(tiny.model.config), 4, 0, 2 << 30, 64, io_pairs=2, num_blocks=64,
                                 block_size=16, max_batch_tokens=128)
        config.use_cuda_graph = (True, True)
        pairs += [HostDeviceIOPair(processor.cache, tiny.model.config, config, torch.device("cpu"), tiny.model.dtype,
                                   processor.logit_processor) for _ in range(2)]
        io = SimpleNamespace(io_pairs=pairs, current_pair=0)
        io.swap_io_pairs = lambda: setattr(io, "current_pair", 1 - io.current_pair)
        processor.inputs_and_outputs = io
        graph = SimpleNamespace(reset=lambda: None)
        warmed = []

        def run_one_warmup(model, num_q_tokens, max_kv_read):  # prepares the step on the current pair, captures it
            warmed.append((io.current_pair, num_q_tokens, max_kv_read))
            pairs[io.current_pair].host_io.num_q_tokens = num_q_tokens
            pairs[io.current_pair].device_io.graphs._storage[(num_q_tokens, max_kv_read)] = graph

        processor.model_runner = SimpleNamespace(run_one_warmup=lambda **kwargs: None)
        pairs[0].host_io.num_q_tokens = 128  # the first pair's warm-up step, captured
        pairs[0].device_io.graphs._storage[(128, 1024, 1024)] = graph
        warm_skipped_pair(engine._manager, tiny.model)  # a warm-up that did nothing: the check names the setting
        with pytest.raises(SpecError, match="transformers.use_async_batching: .* never reached the second"):
            check_warmup(engine._manager, engine.plan, tiny.device)
        processor.model_runner = SimpleNamespace(run_one_warmup=run_one_warmup)
        warm_skipped_pair(engine._manager, tiny.model)
        cache = processor.cache
        if hasattr(cache, "block_size"):  # 5.17: the whole cache but the step, as its warm-up reads it
            read = cache.num_blocks * cache.block_size - cache.max_batch_tokens
        else:  # later: the longest request the cache holds, but the step
            from transformers.generation.continuous_batching.model_runner import infer_max_single_request_tokens

            read = infer_max_single_request_tokens(cache) - cache.max_batch_tokens
        assert read > 0 and warmed == [(1, cache.max_batch_tokens, read)]
        assert io.current_pair == 0
        check_warmup(engine._manager, engine.plan, tiny.device)  # both warmed: it starts
        warm_skipped_pair(engine._manager, tiny.model)
        assert len(warmed) == 1  # nothing left to warm
        pairs[1].device_io.graphs._storage.clear()  # the second pair's step prepared, its capture failed
        with pytest.raises(torch.OutOfMemoryError, match="the warm-up could not capture the largest step"):
            check_warmup(engine._manager, engine.plan, tiny.device)
    finally:
        for pair in pairs:
            pair.device_io.graphs._storage.clear()
        processor.inputs_and_outputs, processor.model_runner = sync_io, runner
        config.use_cuda_graph = graphs_before
        engine.stop()


def test_a_start_refused_after_the_warm_up_lets_go_of_its_cache_and_the_next_run_runs(tiny, monkeypatch):
    """A start refused after the warm-up (the checks above) held the cache and the graphs, and left the model on the
    paged attention transformers had switched it to (5.17 switches plain sdpa; 5.24 runs it as it is): the run fails
    with the cause, and the next one runs."""
    attention, held = tiny.model.config._attn_implementation, []

    def refused(manager):
        processor = manager.batch_processor  # a local of a frame the error passes through, as in the check
        held.append(weakref.ref(processor.cache))
        raise SpecError("transformers.use_async_batching: refused after the warm-up")

    monkeypatch.setattr(warmup, "check_warmup", lambda manager, plan, device: refused(manager))
    engine = create_engine(tiny, make_spec())
    with pytest.raises(SpecError, match="refused after the warm-up"):  # its ExceptionInfo keeps the error alive
        engine.start()
    assert engine._manager is None and tiny.model.config._attn_implementation == attention
    gc.collect()
    assert held[0]() is None  # the cache is gone while the error still lives
    failed = run_local(make_spec(), tiny)
    assert failed.status == "failed" and "refused after the warm-up" in failed.error
    monkeypatch.undo()
    assert run_local(make_spec(), tiny).status == "succeeded"
