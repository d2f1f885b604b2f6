"""transformers' paged KV cache across versions (5.17's block manager, 5.18+'s sector allocators): occupancy and the
prefixes it keeps for sharing (read from another thread), and the cache its own accounting accepts."""

from __future__ import annotations

import inspect


def kv_blocks(cache) -> tuple[int, int]:
    """(used, total) blocks of the paged cache, read live from another thread.

    Used means referenced by a request: finished requests' complete blocks that are kept only for prefix reuse
    can be evicted at any time, so they count as free (as 5.17's block manager and vLLM's usage figure count them).
    """
    total = cache.num_blocks
    if hasattr(cache, "get_num_free_blocks"):  # transformers 5.17: one block manager
        return total - cache.get_num_free_blocks(), total
    # 5.18+: sectors shared among cache allocators, each with a ledger of evictable cached blocks
    free_bytes = cache.compute_free_capacity(relative=False)
    for allocator in cache.cache_allocators.values():
        ledger = getattr(allocator, "ledger", None)
        if ledger is not None:
            free_bytes += len(ledger.cached_blocks) * allocator.bytes_per_block
    capacity = cache.num_sectors * cache.bytes_per_sector
    return total - round(free_bytes / capacity * total), total


def cached_prefix_blocks(cache) -> int:
    """Blocks no request references that the cache keeps for prefix sharing (the complete blocks of finished ones)."""
    if hasattr(cache, "evict_cached_blocks"):  # 5.18+: a ledger of cached blocks per allocator
        return sum(len(allocator.ledger.cached_blocks) for allocator in cache.cache_allocators.values())
    return len(cache._block_manager._init_block_ids)  # 5.17: the initialized (complete, unreferenced) blocks


def forget_prefixes(cache) -> None:
    """Every cached prefix dropped, as transformers drops them under memory pressure. Call with no request running."""
    if hasattr(cache, "evict_cached_blocks"):  # 5.18+
        cache.evict_cached_blocks()
        return
    manager = cache._block_manager  # 5.17: asking for every free block uninitializes the initialized ones
    manager.has_enough_free_blocks(manager.num_free_blocks)


def accepted_blocks(config, cb_config, dtype, max_batch_tokens: int, num_blocks: int) -> int | None:
    """The most blocks, up to num_blocks, that transformers' own footprint check takes at this step size (it refuses
    the cache otherwise), by its own accounting; None where this transformers sizes its cache otherwise (5.18+
    plans sectors, counting a tensor-parallel rank's share of the heads itself). Called before the cache is made,
    with the manager's resolved configuration."""
    from transformers.generation.continuous_batching import cache as paged

    handler_type = getattr(paged, "PagedAttentionMemoryHandler", None)
    if handler_type is None or "group_size" not in inspect.signature(handler_type).parameters:
        return None
    layer_groups, group_types = paged.group_layers_by_attn_type(config)
    handler = handler_type(config=config, continuous_batching_config=cb_config, dtype=dtype,
                           group_types=group_types, group_size=len(layer_groups[0]))

    def fits(blocks: int) -> bool:
        return handler.compute_memory_footprint(max_batch_tokens, blocks) <= handler.available_memory

    if fits(num_blocks):
        return num_blocks
    low, high = 0, num_blocks  # fits(low) or low == 0; not fits(high): the footprint grows with the blocks
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low
