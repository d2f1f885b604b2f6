"""transformers' continuous batching as benchd configures it: the defaults for the device, the cache planned on a
GPU (engines/transformers/plan.py), and torch's CPU threads while the engine runs."""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
from transformers.generation.configuration_utils import ContinuousBatchingConfig

from benchd.engines.paged import PAGED
from benchd.engines.transformers.memory import CPU_BATCH_TOKENS, CPU_BLOCK_SIZE, CPU_CACHE_TOKENS
from benchd.engines.transformers.plan import CachePlan, chosen, io_pairs, plan_cache
from benchd.engines.transformers.scheduling import SPLIT
from benchd.engines.transformers.spec import TransformersOptions
from benchd.models.flops import Shape
from benchd.models.loading import LoadedModel
from benchd.models.memory import MEMORY_FRACTION, PlanError
from benchd.spec import SpecError, Workload, traces

log = logging.getLogger("benchd.engines")

# benchd's defaults where the user sets nothing. On CPU the cache must be sized explicitly (transformers sizes it
# from free GPU memory). On CUDA, CUDA graphs: on an H200 (1.2B Llama shape, bf16, 256 × 256/256 tokens,
# transformers 5.17) library defaults gave 1,967 output tok/s and use_cuda_graph=True 3,080
# (docs/benchmarks/gpu-engine-and-overhead.md); async batching where the attention has no mask (io_pairs); and
# benchd's split steps (engines/transformers/scheduling.py): on an H200, a chat-like Poisson load at 160/s completed
# 70 requests a second against FIFO's 6, the closed loop of 512 long prompts ran ITL p50 24 ms against 71
# (docs/benchmarks/scheduling.md).
CPU_DEFAULTS: dict[str, Any] = {"block_size": CPU_BLOCK_SIZE, "num_blocks": CPU_CACHE_TOKENS // CPU_BLOCK_SIZE,
                                "max_batch_tokens": CPU_BATCH_TOKENS}
CUDA_DEFAULTS: dict[str, Any] = {"use_cuda_graph": True, "scheduler": "split"}

# torch's intra-op threads for a CUDA engine, at most. Without flash-attn, continuous batching runs paged sdpa, whose
# generation thread fills a query × (cache + query) attention mask on the CPU before every step (~27 ms of a ~93 ms
# step on the reference workload). Those ops are memory-bound, so a few threads saturate them; torch's default, one
# thread a core, was slower, likely because a parallel region over every core waits for whichever worker another
# waking thread (benchd's or the host's) displaced. On an H100 host with 16 cores (bench/gpu_overhead.py, bare
# generate_batch, medians of 3): 16 threads 2,589 output tok/s, 12 2,604, 8 2,692, 6 2,796, 4 2,751; 6 against 16
# over 7 pairs, 1.027× (docs/benchmarks/gpu-engine-and-overhead.md).
CUDA_CPU_THREADS = 6

SCHEDULERS = {"fifo": "fifo", "prefill_first": "prefill_first", "split": SPLIT}

# 5.18 renamed the cache's token granularity from block_size to page_size (block_size stays as a deprecated alias).
SIZE_FIELD = "page_size" if hasattr(ContinuousBatchingConfig, "page_size") else "block_size"


def cb_config(options: TransformersOptions, device_type: str, plan: CachePlan | None = None,
              attention: str = "sdpa") -> ContinuousBatchingConfig:
    """plan: benchd's sizing of the cache and steps on a GPU (engines/transformers/plan.py, plan_cache); what the
    spec sets is in it. attention: the implementation's base name, which async batching's default follows (plan.py,
    io_pairs)."""
    chosen = options.model_dump(exclude_none=True, exclude={"library_defaults", "cpu_threads"})
    defaults = {} if options.library_defaults else CPU_DEFAULTS if device_type == "cpu" else \
        {**CUDA_DEFAULTS, "use_async_batching": io_pairs(options, attention, device_type) == 2}
    kwargs = {**defaults, **chosen}
    if plan is not None:
        kwargs.update(block_size=plan.block_size, num_blocks=plan.num_blocks, max_batch_tokens=plan.max_batch_tokens)
    if "scheduler" in kwargs:  # transformers' own names, and benchd's registered one (scheduling.py)
        kwargs["scheduler_type"] = SCHEDULERS[kwargs.pop("scheduler")]
    if "compile_level" in kwargs:
        kwargs["default_compile_level"] = kwargs.pop("compile_level")
    if "block_size" in kwargs:
        kwargs[SIZE_FIELD] = kwargs.pop("block_size")
    return ContinuousBatchingConfig(**kwargs)


def decode_by_block_table(config: ContinuousBatchingConfig, attention: str | None, longest: int) -> None:
    """transformers' decode fast path for benchd's in-place kernel (engines/paged.py): a step of decode rows alone
    then comes with a block table (each sequence's blocks) instead of a read index (each of its tokens' rows), which
    transformers 5.17 builds in Python and copies to the device every step: 98,304 rows for a decode step of the
    reference workload, where the H100's kernels ran 29 % of the time (docs/benchmarks/paged-attention.md). transformers
    turns the path on for flash-attn's kernels alone (initialization.py: ensure_decode_fast_path_is_available);
    here it is set on the resolved configuration before the cache is made, for requests up to the workload's
    longest (a longer one, which cannot come, would go by the read index). transformers turns it off again for a
    model with sliding-window layers."""
    if attention != f"paged|{PAGED}" or config.max_blocks_per_request:
        return
    blocks = -(-longest // getattr(config, SIZE_FIELD)) + 1
    config.max_blocks_per_request = blocks + blocks % 2  # even, as transformers sizes it from a workload's hints


def device_memory(device: torch.device) -> tuple[int, int, int]:
    """(free on the device, held by this process's allocator, allocated in it: the weights), in bytes."""
    free, _ = torch.cuda.mem_get_info(device)
    return free, torch.cuda.memory_reserved(device), torch.cuda.memory_allocated(device)


def gpu_plan(loaded: LoadedModel, options: TransformersOptions, workload: Workload, attention: str,
             memory: tuple[int, int, int] | None = None) -> CachePlan:
    """benchd's plan for the cache on the model's GPU, within the share of the memory a run may use: what is free
    and what this process holds (the weights) together, × BENCHD_LIMITS__MEMORY_FRACTION (which the daemon hands
    its workers). memory: device_memory()'s figures, read now when None. Raises SpecError naming the field when
    one request cannot fit."""
    free, held, weights = memory or device_memory(loaded.device)
    fraction = float(os.environ.get("BENCHD_WORKER_MEMORY_FRACTION", MEMORY_FRACTION))
    ranks = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    shape = Shape.of(loaded.model.config).sharded(ranks)
    try:
        return plan_cache(shape, loaded.dtype.itemsize, weights, int((free + held) * fraction),
                          sum(traces.longest(workload)), attention, **chosen(options, attention))
    except PlanError as error:
        raise SpecError(f"{error.field}: out of GPU memory as planned: {error.reason}") from None


def cpu_threads(options: TransformersOptions, device_type: str) -> int | None:
    """torch's intra-op threads while the engine runs; None leaves torch's setting alone (on CPU the model itself
    runs on those threads, and library_defaults means transformers as it comes)."""
    if options.cpu_threads is not None:
        return options.cpu_threads
    if options.library_defaults or device_type == "cpu":
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(CUDA_CPU_THREADS, cores // 2))  # half the cores at most: the rest for benchd and the host


def admit_after_cancels() -> None:
    """Every scheduler of this process checks, each time its loop clears cancelled requests (before every step, and
    every 0.1 s while idle), that it is not left admitting none (unblock). Installed once a process, on transformers'
    Scheduler: the check runs on the loop's own thread, so a request waits for no poll of benchd's."""
    try:
        from transformers.generation.continuous_batching import scheduler
    except ImportError:  # a transformers that moved it: nothing to wrap
        return
    original = getattr(scheduler.Scheduler, "clear_cancelled_requests", None)
    if original is None or getattr(original, "benchd_unblocks", False):  # nothing to wrap, or wrapped already
        return

    def clear_cancelled_requests(self):
        states = original(self)
        if unblock(self):
            log.warning("continuous batching was left admitting no request with none running (a cancel after its "
                        "cache filled): admitting again")
        return states

    clear_cancelled_requests.benchd_unblocks = True
    scheduler.Scheduler.clear_cancelled_requests = clear_cancelled_requests


def unblock(scheduler) -> bool:
    """Let a batching loop admit requests again where it never would by itself; True if it was stuck.

    transformers (5.17 to 5.24 at least) stops admitting waiting requests once it has offloaded one for want of cache
    blocks (OffloadingManager sets scheduler.block_new_requests) and admits again only when a request finishes
    (update_batch): a cancelled one frees its blocks but clears nothing. A stage cut at its drain while its requests
    filled the cache, or a run cancelled then, left the loop with none running and every later request waiting
    forever: the next stage, and every later run of the kept engine, measured no token (tests/engines/test_batching.py).
    With nothing running, nothing can finish, so the flag only stands in the way."""
    if getattr(scheduler, "block_new_requests", False) and not scheduler.active_requests and scheduler.waiting_requests:
        scheduler.block_new_requests = False
        return True
    return False


def stamps_survive_resets() -> None:
    """A request transformers soft-resets keeps its tokens' stamps. Installed once a process, on RequestState.

    Out of cache blocks, and with no room left in its CPU pool, transformers (5.17 to 5.24 at least) replaces a
    request by an equivalent fresh one whose prompt is the old prompt and the tokens generated so far
    (offloading_manager.py, create_equivalent_initial_request): the new state's tokens and outputs still carry the
    old ones (to_generation_output), but its stamps start empty, and a reader pairing stamps with tokens lost or
    misplaced every token before the reset (3 requests of 200 tokens read as 107, 200 and 152;
    tests/engines/test_reservation.py). The new state takes the old one's stamps, so stamps and generated tokens
    (generated(), below) stay aligned."""
    from transformers.generation.continuous_batching.requests import RequestState

    original = getattr(RequestState, "create_equivalent_initial_request", None)
    if original is None or getattr(original, "benchd_keeps_stamps", False):
        return

    def create_equivalent_initial_request(self):
        state = original(self)
        if self.record_timestamps and hasattr(state, "_timestamps"):
            state._timestamps = self._timestamps[:]
        return state

    create_equivalent_initial_request.benchd_keeps_stamps = True
    RequestState.create_equivalent_initial_request = create_equivalent_initial_request


def generated(state) -> list[int]:
    """A live request's tokens generated so far: after a soft reset, those before it (now the end of its prompt)
    and those since, as transformers' own output gives them (requests.py, to_generation_output)."""
    true_prompt = getattr(state, "_true_initial_tokens", 0)
    return state.initial_tokens[true_prompt:] + state.generated_tokens if true_prompt else state.generated_tokens
