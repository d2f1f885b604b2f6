"""transformers' paged KV cache across versions (5.17's block manager, 5.18+'s sector allocators), read from
another thread: occupancy, and the prefixes it keeps for sharing."""

from __future__ import annotations


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
