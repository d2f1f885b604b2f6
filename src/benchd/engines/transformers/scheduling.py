"""benchd's scheduler for transformers' continuous batching: steps of decodes alone and steps of prefills alone, never
one that mixes them, registered under transformers' own scheduler option (scheduler_type, SCHEDULER_MAPPING).

transformers' FIFO scheduler fills every step's token budget: decodes first, then prefill chunks of running or
waiting requests. A step of decodes alone takes its fast path (a block table: O(requests) for the host to build,
engines/transformers/batching.py: decode_by_block_table); a step with any prefill in it takes the read index, one entry
per token every request of the step reads, built in Python and copied to the device (transformers 5.17, 5.24:
input_outputs.py). Offered more than it serves, every step carries a prefill: on an H200 (llama-3.2-1b, chat-like
Poisson at 160/s, docs/benchmarks/scheduling.md) ITL p50 was 118 ms against 3.5 ms at 16/s, and the engine
completed 5.8 requests a second where it completed 28.6 at 48/s. Here a step is either every decoding request (the
fast path) or prefill chunks alone (whose read index spans only the prefilling requests), alternating while both
wait: a decode then waits for at most one prefill step, whose size the token budget bounds. And no more requests run
than a step carries (max_requests_per_batch): the rest wait in order."""

from __future__ import annotations

from typing import Any

SPLIT = "benchd_split"  # the name transformers' scheduler_type takes for it


def register() -> None:
    """Make transformers' scheduler_type="benchd_split" this scheduler, once a process; a transformers without the
    registry (a future one that moved it) is left alone, and the spec's choice falls back to FIFO there."""
    try:
        from transformers.generation.continuous_batching import scheduler as schedulers
    except ImportError:
        return
    mapping = getattr(schedulers, "SCHEDULER_MAPPING", None)
    if mapping is None or SPLIT in mapping:
        return
    mapping[SPLIT] = _split_scheduler(schedulers)


def _split_scheduler(schedulers: Any) -> type:
    from transformers.generation.continuous_batching.requests import RequestStatus

    class SplitScheduler(schedulers.FIFOScheduler):
        """FIFO's order and its safety margin, each step of one kind: decodes alone, or prefills alone."""

        def reset(self) -> None:
            super().reset()
            self.prefill_turn = False  # the next step prefills, if any prefill waits

        def schedule_batch(self, token_budget: int, cache_budget: int):
            decoding, prefilling = [], []
            for state in self.active_requests.values():
                if state.status == RequestStatus.DECODING:
                    decoding.append(state)
                elif state.status == RequestStatus.PREFILLING:
                    prefilling.append(state)
            # a waiting request is admitted only while every running one fits a step (max_requests_per_batch):
            # past it, decodes would skip steps and the running set would grow with the queue (on an H200 at 480/s,
            # ITL p50 51 ms and completions fell to 61 % of those at 160/s)
            room = 0 if self.block_new_requests else self.max_requests_per_batch - len(self.active_requests)
            waiting = self._get_waiting_candidates()[:room] if room > 0 else []
            prefills = prefilling + waiting
            prefill_step = bool(prefills) and (self.prefill_turn or not decoding)
            self.prefill_turn = not prefill_step  # alternate while both kinds wait
            removed: set[str] = set()
            scheduled, allocation_failed, fast_path, q_tokens, kv_read = self._process_candidates(
                prefills if prefill_step else decoding, token_budget, cache_budget, removed)
            self._cleanup_waiting_queue(removed)
            if not scheduled and prefill_step and decoding:  # no prefill fitted: the decodes go on
                self.prefill_turn = False
                scheduled, allocation_failed, fast_path, q_tokens, kv_read = self._process_candidates(
                    decoding, token_budget, cache_budget, set())
            if not scheduled and allocation_failed:
                return None, fast_path, 0, 0  # the cache is full: transformers offloads, then asks again
            return scheduled, fast_path, q_tokens, kv_read

    return SplitScheduler
