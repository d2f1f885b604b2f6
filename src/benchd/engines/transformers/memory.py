"""transformers' continuous batching in memory, before anything loads (no torch): benchd's defaults for its cache,
what it holds on a CPU (or under the library's own sizing), and on a GPU the plan its worker will make
(engines/transformers/plan.py), which admission makes the same before the 202."""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchd.engines.transformers.plan import (
    BLOCK_SIZE,
    CUDA_BATCH_TOKENS,
    REQUESTS_PER_BATCH,
    CachePlan,
    cache_figures,
    chosen,
    io_pairs,
    plan_cache,
)
from benchd.models.flops import Shape
from benchd.models.memory import EngineMemory, Footprint
from benchd.spec import traces
from benchd.spec.stack import base_attention, batching_attention

if TYPE_CHECKING:
    from benchd.engines.transformers.spec import TransformersOptions, TransformersSpec

# What benchd gives continuous batching where the spec sets nothing (engines/transformers/batching.py): on CPU a
# fixed small cache; on CUDA a planned one (plan_cache).
CPU_BLOCK_SIZE, CPU_CACHE_TOKENS = 32, 256 * 32
CPU_BATCH_TOKENS = 256


class TransformersMemory(EngineMemory["TransformersSpec"]):  # the spec by name: its module imports this one
    def footprint(self, spec: TransformersSpec, device_type: str, shape: Shape, weights: int,
                  element: int) -> Footprint:
        """Where benchd does not plan (a CPU, or the library's own sizing on a GPU, for which the cache holds one
        request at least): the cache and its worst step, a step reading all of it."""
        sequence = sum(traces.longest(spec.workload))  # a conversation's last turn, or a trace's longest request
        options = spec.transformers
        cpu = device_type == "cpu"
        size = options.block_size or (CPU_BLOCK_SIZE if cpu else BLOCK_SIZE)
        blocks = options.num_blocks or (CPU_CACHE_TOKENS // size if cpu else -(-sequence // size))
        batch_tokens = options.max_batch_tokens or (CPU_BATCH_TOKENS if cpu else CUDA_BATCH_TOKENS)
        attention = attention_of(spec, device_type)
        figures = cache_figures(shape, element, weights, attention, options.use_cuda_graph is True and not cpu,
                                io_pairs(options, attention, device_type) if not options.library_defaults else 1,
                                size, blocks, batch_tokens, options.max_requests_per_batch or REQUESTS_PER_BATCH,
                                device_type)
        return Footprint(weights=weights, kv_cache=figures.kv_cache, activations=figures.masks + figures.graph_pool,
                         other=figures.reserve)

    def planned(self, spec: TransformersSpec, device_type: str) -> bool:
        """On a GPU, unless the spec asks for the library's own sizing."""
        return device_type == "cuda" and not spec.transformers.library_defaults

    def plan(self, spec: TransformersSpec, shape: Shape, element: int, weights: int, available: int) -> CachePlan:
        attention = attention_of(spec, "cuda")
        return plan_cache(shape, element, weights, available, sum(traces.longest(spec.workload)), attention,
                          **chosen(spec.transformers, attention))

    def fit_problems(self, spec: TransformersSpec, device_type: str, need: int) -> list[tuple[tuple, str]]:
        cache = cache_tokens(spec.transformers, device_type)
        if cache is None or cache[0] * cache[1] >= need:
            return []
        return [(("transformers", "num_blocks"), f"the cache holds {cache[0]} × {cache[1]} tokens, but one request "
                                                 f"may need {need} (prompt + output)")]


def attention_of(spec: TransformersSpec, device_type: str) -> str:
    """The attention continuous batching will run (its base name): the spec's, or what the worker will choose for
    the device (spec/stack.py's BATCHING_ORDER); transformers' own choice under library_defaults is taken as sdpa,
    the one that needs the most."""
    if spec.attn_implementation is not None:
        return base_attention(spec.attn_implementation)
    return "sdpa" if spec.transformers.library_defaults else batching_attention(device_type, spec.dtype)


def cache_tokens(options: TransformersOptions, device_type: str) -> tuple[int, int] | None:
    """(blocks, tokens a block) of continuous batching's cache where the spec or benchd's CPU default sizes it; None
    where a plan (CUDA: plan_cache) or transformers (library_defaults) sizes it from the memory."""
    cpu = device_type == "cpu"
    if options.num_blocks is None and (options.library_defaults or not cpu):
        return None
    size = options.block_size or (CPU_BLOCK_SIZE if cpu else BLOCK_SIZE)
    return options.num_blocks or CPU_CACHE_TOKENS // size, size
