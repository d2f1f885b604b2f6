"""transformers' continuous-batching warm-up as benchd completes and checks it before a planned engine starts (async
batching's second IO pair, the largest step's graph captured), and what a start that failed lets go of."""

from __future__ import annotations

import logging
import traceback

import torch
import transformers

from benchd.engines.oom import figures
from benchd.engines.transformers.plan import CachePlan
from benchd.spec import SpecError

log = logging.getLogger("benchd.engines")


def warm_skipped_pair(manager, model: torch.nn.Module) -> None:
    """transformers 5.17's warm-up moves to async batching's second IO pair only after warming the decode fast
    path, which flash-attn's kernels have and paged sdpa and torch's varlen kernel lack: the second pair would
    capture its largest step under load, outside the plan. benchd warms it as transformers warms the first."""
    processor = manager.batch_processor
    io = getattr(processor, "inputs_and_outputs", None)
    pairs = getattr(io, "io_pairs", ())
    if len(pairs) < 2 or not pairs[0].host_io.num_q_tokens or pairs[1].host_io.num_q_tokens:
        return
    cache = processor.cache
    io.swap_io_pairs()
    try:
        with torch.no_grad():
            processor.model_runner.run_one_warmup(model=model, num_q_tokens=cache.max_batch_tokens,
                                                  max_kv_read=_largest_read(cache))
    finally:
        io.swap_io_pairs()


def _largest_read(cache) -> int:
    """The cached tokens transformers' own warm-up reads beside the largest step: 5.17 fills the cache but for the
    step (num_blocks × block_size); later versions, whose cache has pages and sectors instead, ask it for the longest
    single request it can hold (model_runner.infer_max_single_request_tokens)."""
    if hasattr(cache, "block_size"):
        return cache.num_blocks * cache.block_size - cache.max_batch_tokens
    from transformers.generation.continuous_batching.model_runner import infer_max_single_request_tokens

    return max(0, infer_max_single_request_tokens(cache) - cache.max_batch_tokens)


def check_warmup(manager, plan: CachePlan | None, device: torch.device) -> None:
    """transformers captures the largest step's graph first, so that the graphs captured later reuse its pool,
    and says nothing when that capture fails; the pool then grows with every new step shape until a step runs
    out of memory (docs/memory.md). A planned engine whose warm-up captured nothing does not start."""
    processor = manager.batch_processor
    if plan is None or processor is None or not any(manager.continuous_batching_config.cuda_graph_booleans):
        return
    io = processor.inputs_and_outputs
    ios = [pair.device_io for pair in io.io_pairs] if hasattr(io, "io_pairs") else [io]
    stored = [getattr(getattr(each, "graphs", None), "_storage", None) for each in ios]
    # A pair the warm-up never prepared a step on was skipped, not out of memory
    skipped = [not pair.host_io.num_q_tokens for pair in getattr(io, "io_pairs", [])[1:]]
    if stored[0] and any(skipped):  # not even by warm_skipped_pair
        raise SpecError(
            f"transformers.use_async_batching: transformers {transformers.__version__}'s warm-up never reached "
            "the second of async batching's two IO pairs; that pair would capture its graphs under load, "
            "outside the plan (docs/memory.md): set use_async_batching: false or use_cuda_graph: false")
    if any(graphs is not None and not graphs for graphs in stored):
        raise torch.OutOfMemoryError(
            f"the warm-up could not capture the largest step ({plan.max_batch_tokens:,} tokens against "
            f"{plan.cache_tokens:,} cached), planned at {plan.describe()} "
            f"({figures(device)})")


def let_go(manager, error: BaseException, model: torch.nn.Module) -> None:
    """A start that failed after the warm-up holds the cache and the graph pool: let them go at once, so that
    the worker can hand the memory back before the next engine plans. The frames the error (and any error it
    arose from) passed through would keep the batch processor alive as long as the error lives; nothing reads
    their locals after the failure, so they are cleared. The manager's own references form cycles (count_steps'
    wrappers), which the worker's collection then frees. An unstarted manager's stop() returns at once, before
    it switches the model back from the paged attention it chose: done here. A cleanup that fails is logged, so
    that the start's own error is the one the run reports."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)
        error = error.__cause__ or error.__context__
    if manager is None:
        return
    try:
        manager.destroy()
        if getattr(manager, "_original_attn_impl", None) is not None:
            model.set_attn_implementation(manager._original_attn_impl)
    except Exception:
        log.warning("the engine that failed to start did not close cleanly", exc_info=True)
    manager.batch_processor = None
