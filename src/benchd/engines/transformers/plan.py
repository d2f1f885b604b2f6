"""benchd's plan for transformers' paged KV cache on a GPU (no torch): the cache, its steps and the CUDA graphs'
pool sized within the memory a run may use, for the attention it runs; the worker makes it
(engines/transformers/batching.py) and admission makes the same before the 202 (engines/transformers/memory.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from benchd.models.flops import Shape
from benchd.models.memory import LOGIT_BYTES, PlanError, gib
from benchd.spec.stack import ATTENTION

if TYPE_CHECKING:
    from benchd.engines.transformers.spec import TransformersOptions


# Transformers sizes the cache itself from 90 % of the free memory and counts neither CUDA graphs nor what paged
# sdpa allocates at each step. On an H100 (docs/memory.md) the default cache took 43 GiB and its attention mask
# 22 GiB; the warm-up of the largest step then failed quietly, and under an open loop the graph pool grew with
# each new step shape until a step ran out of memory. benchd plans every part instead:

BLOCK_SIZE = 256  # tokens a cache block holds (transformers' default)
CUDA_BATCH_TOKENS = 2048  # tokens one step may carry, prefill chunks and decodes together (max_batch_tokens)
# A step's attention mask slice (its tokens × the cache read) stays under 2^31 elements: at 8,192 × 262,144 paged
# sdpa's step needed 8.0 GiB on an H100, at 2,048 × 524,288 4.6 GiB (the K/V it reads, as the formula below says).
MASK_ELEMENTS = 2**31 - 1
BEYOND_MASK_BYTES = 3  # per mask element beyond that limit, as measured: 5.5 GiB more at 2^31
# The CUDA-graph pool against the worst step: transformers' warm-up runs the largest step eagerly, then captures it,
# both in the graph pool; later captures of other shapes reuse it. On an H100 the pool peaked at 1.8× the step
# during the warm-up (llama-3.2-1b: 18.1 GiB, then 10.1 GiB held; docs/memory.md).
GRAPH_POOL_MARGIN = 2.0
CUDA_RESERVE = 1 << 30  # outside torch's allocator: the CUDA context and libraries' workspaces (0.68 GiB measured)
REQUESTS_PER_BATCH = 1024  # transformers' fallback max_requests_per_batch: rows of logits in one step


@dataclass(frozen=True, slots=True)
class CachePlan:
    """transformers' continuous-batching settings on a GPU and the peak they are planned to reach (bytes)."""

    block_size: int
    num_blocks: int
    max_batch_tokens: int
    weights: int
    kv_cache: int
    masks: int  # the step's attention masks and cache indices, allocated once
    step: int  # the worst step's own tensors: its tokens against the whole cache
    graph_pool: int  # what CUDA graphs keep (the worst step with the margin); the step alone without graphs
    reserve: int  # the CUDA context and libraries, outside torch's allocator

    @property
    def cache_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.masks + self.graph_pool + self.reserve

    def describe(self) -> str:
        return (f"weights {gib(self.weights)} + KV cache {gib(self.kv_cache)} ({self.cache_tokens:,} tokens) + masks "
                f"{gib(self.masks)} + graph pool {gib(self.graph_pool)} (a step of {self.max_batch_tokens:,} tokens "
                f"against the whole cache: {gib(self.step)}) + CUDA {gib(self.reserve)}")

    def as_dict(self) -> dict[str, int]:
        return {"block_size": self.block_size, "num_blocks": self.num_blocks, "max_batch_tokens": self.max_batch_tokens,
                "weights_bytes": self.weights, "kv_cache_bytes": self.kv_cache, "masks_bytes": self.masks,
                "step_bytes": self.step, "graph_pool_bytes": self.graph_pool, "reserve_bytes": self.reserve,
                "total_bytes": self.total}


def cache_figures(shape: Shape, element: int, weights: int, attention: str, graphs: bool, io_pairs: int,
                  block_size: int, num_blocks: int, batch_tokens: int, requests: int,
                  device_type: str = "cuda") -> CachePlan:
    """What a cache of num_blocks and steps of batch_tokens (M) take, by the parts of a plan."""
    m, n = batch_tokens, num_blocks * block_size
    read = n + m  # a step reads the cache and its own tokens
    head_bytes = shape.head_dim * element
    kv_cache = (num_blocks + 2) * block_size * 2 * shape.layers * shape.kv_heads * head_bytes  # 2 spare blocks
    method = ATTENTION[attention]
    masked = method.masked
    masks = io_pairs * ((m * read * element if masked else 0) + 8 * (read + m))  # + read and write indices
    # Per layer, paged attention gathers K and V of every token it reads, and sdpa and eager repeat them for
    # each query head (grouped-query attention); eager also holds the scores and their float32 softmax. A
    # FlashAttention kernel (flash-attn's, torch's varlen) reads the gathered K/V once, by sequence. A kernel that
    # reads the cache in place gathers nothing (but for a sliding-window layer, the window of each request) and
    # holds its step_bytes instead.
    gathered = read
    if method.in_place:
        gathered = min(read, requests * shape.window + m) if shape.window else 0
    per_read = 2 * shape.kv_heads * head_bytes
    if method.repeats_kv and shape.heads != shape.kv_heads:
        per_read += 2 * shape.heads * head_bytes
    if attention == "eager":
        per_read += shape.heads * m * (2 * element + LOGIT_BYTES)
    elif masked and device_type == "cpu":  # a CPU's sdpa holds float32 scores per KV-head group (tiny: 7.9 B an
        per_read += shape.kv_heads * m * LOGIT_BYTES  # element of the mask measured, tests/models/test_models.py)
    per_token = (3 * shape.hidden + (shape.heads + 2 * shape.kv_heads) * shape.head_dim + 3 * shape.ffn) * element
    step = per_read * gathered + per_token * m + min(requests, m) * shape.vocab * (element + LOGIT_BYTES) + \
        method.step_bytes
    if masked and m * read > MASK_ELEMENTS:
        step += m * read * BEYOND_MASK_BYTES
    pool = int(step * GRAPH_POOL_MARGIN) if graphs else step
    return CachePlan(block_size, num_blocks, m, weights, kv_cache, masks, step, pool,
                     CUDA_RESERVE if device_type == "cuda" else 0)


def plan_cache(shape: Shape, element: int, weights: int, available: int, longest: int, attention: str = "sdpa",
               graphs: bool = True, io_pairs: int = 1, block_size: int | None = None, num_blocks: int | None = None,
               max_batch_tokens: int | None = None, max_requests: int | None = None) -> CachePlan:
    """The largest cache (and steps) whose planned peak fits `available` bytes, weights included; what the spec
    sets is kept. longest: one request's prompt + output, which the cache must hold. Raises PlanError."""
    size = block_size or BLOCK_SIZE
    requests = max_requests or REQUESTS_PER_BATCH
    need_blocks = -(-longest // size)
    m = max_batch_tokens or CUDA_BATCH_TOKENS
    masked = ATTENTION[attention].masked
    if masked and max_batch_tokens is None and num_blocks is not None:  # the largest step within the mask limit
        m = max(64, min(m, (MASK_ELEMENTS // (num_blocks * size + m)) // 64 * 64))

    def figures(blocks: int) -> CachePlan:
        return cache_figures(shape, element, weights, attention, graphs, io_pairs, size, blocks, m, requests)

    if num_blocks is None:
        base, per_block = figures(0).total, figures(1).total - figures(0).total
        num_blocks = max(0, (available - base) // per_block)
        if masked:
            num_blocks = min(num_blocks, (MASK_ELEMENTS // m - m) // size)
        if num_blocks < need_blocks:
            plan = figures(need_blocks)
            field = "transformers.max_batch_tokens" if max_batch_tokens is not None else "model"
            raise PlanError(field, f"needs about {gib(plan.total)} ({plan.describe()}) to hold one request of "
                                   f"{longest:,} tokens, more than the {gib(available)} it may use")
        return figures(num_blocks)
    plan = figures(num_blocks)
    if num_blocks < need_blocks:
        raise PlanError("transformers.num_blocks", f"the cache holds {num_blocks} × {size} tokens, but one request "
                                                    f"may need {longest:,} (prompt + output)")
    if plan.total > available:
        raise PlanError("transformers.num_blocks", f"needs about {gib(plan.total)} ({plan.describe()}), more than "
                                                    f"the {gib(available)} it may use")
    return plan


def chosen(options: TransformersOptions, attention: str) -> dict:
    """What the spec's continuous-batching options (and benchd's defaults for the attention) fix of the plan."""
    return {"graphs": options.use_cuda_graph is not False, "io_pairs": io_pairs(options, attention, "cuda"),
            "block_size": options.block_size, "num_blocks": options.num_blocks,
            "max_batch_tokens": options.max_batch_tokens, "max_requests": options.max_requests_per_batch}


def io_pairs(options: TransformersOptions, attention: str, device_type: str) -> int:
    """Continuous batching's IO pairs: two with async batching (the host prepares a step while the device runs the
    last), one without. The spec's choice, else benchd's default: on a GPU, async for an attention with no step
    mask, which two pairs would double; on an H100 the reference workload ran 11,048 output tok/s async against
    7,458 with torch_varlen, ITL p50 17.2 against 28.5 ms (docs/benchmarks.md). A CPU has no async batching."""
    if options.use_async_batching is not None:
        return 2 if options.use_async_batching else 1
    masked = ATTENTION[attention].masked
    return 2 if device_type == "cuda" and not options.library_defaults and not masked else 1
