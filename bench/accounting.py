"""Where a measurement's time goes in transformers' continuous batching and benchd's engine around it: wrappers on
their methods (bench/gpu_overhead.py's accounting of each mode)."""

from __future__ import annotations

import gc
import threading
import time
from collections import defaultdict

from transformers.generation.continuous_batching.continuous_api import (
    ContinuousBatchingManager,
    ContinuousBatchProcessor,
)
from transformers.generation.continuous_batching.input_outputs import ContinuousBatchingIOs

from benchd.loadgen import stage
from benchd.engines.transformers.engine import TransformersEngine


class Accounting:
    """Where the time of one measurement goes, from wrappers on transformers' and benchd's methods (a clock read
    or two a call, the same in every mode): the generation thread's CPU time; for each phase of its steps — the
    CPU phases (scheduling the next batch, updating the requests) and the step proper (launch, then wait for the
    GPU) — the calls, the wall time and the thread's CPU time, so wall − CPU of a CPU phase is time spent waiting
    for the GIL; the result consumer's CPU time; the calling thread's; the whole process's; and the cyclic garbage
    collector's passes by generation, with the time they held the interpreter (every thread waits on them) and the
    part the generation thread triggered."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self._wrap(ContinuousBatchProcessor, "prepare_next_batch", "schedule")
        self._wrap(ContinuousBatchProcessor, "update_batch", "update")
        self._wrap(ContinuousBatchingManager, "_generation_step", "step")
        self._wrap(TransformersEngine, "_poll_live", "poll")
        self._wrap(stage.Stage, "_sample_load", "sample")
        self._wrap_thread(ContinuousBatchingManager, "_run_generation_loop", "generation_cpu_s")
        self._wrap_thread(TransformersEngine, "_consume", "consumer_cpu_s")
        self._wrap_batches()
        self.generation_threads: set[int] = set()
        self._gc_start = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
            return
        duration, generation = time.perf_counter() - self._gc_start, info["generation"]
        self.totals[f"gc{generation}_n"] += 1
        self.totals[f"gc{generation}_s"] += duration
        if threading.get_ident() in self.generation_threads:
            self.totals["gc_in_generation_s"] += duration

    def _wrap(self, cls, name: str, phase: str) -> None:
        original, totals = getattr(cls, name), self.totals

        def timed(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                totals[f"{phase}_wall_s"] += time.perf_counter() - wall
                totals[f"{phase}_cpu_s"] += time.thread_time() - cpu
                totals[f"{phase}_calls"] += 1

        setattr(cls, name, timed)

    def _wrap_batches(self) -> None:
        """What the scheduler put in each batch: query tokens, cache tokens read, and their product (the CPU builds
        an attention mask of query × (cache + query) elements for paged sdpa on every step)."""
        original, totals = ContinuousBatchingIOs.prepare_batch_tensors, self.totals

        def counted(io, requests_in_batch, logits_processors, use_decode_fast_path, num_q_tokens, max_kv_read,
                    use_padding):
            if not totals.get("batches"):
                totals["first_batch_requests"] = len(requests_in_batch)
            totals["batches"] += 1
            totals["q_tokens"] += num_q_tokens
            totals["kv_read_tokens"] += max_kv_read
            totals["mask_elements"] += num_q_tokens * (max_kv_read + num_q_tokens)
            return original(io, requests_in_batch, logits_processors, use_decode_fast_path, num_q_tokens,
                            max_kv_read, use_padding)

        ContinuousBatchingIOs.prepare_batch_tensors = counted

    def _wrap_thread(self, cls, name: str, key: str) -> None:
        original, totals = getattr(cls, name), self.totals

        def whole(*args, **kwargs):
            if key == "generation_cpu_s":
                self.generation_threads.add(threading.get_ident())
            cpu = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                totals[key] += time.thread_time() - cpu

        setattr(cls, name, whole)

    def measure(self, fn) -> dict:
        self.totals.clear()
        process, caller = time.process_time(), time.thread_time()
        row = fn()
        if "process_cpu_s" in row:  # measured in a process of its own (bare-fresh): its accounting is its own
            return row
        row["caller_cpu_s"] = time.thread_time() - caller
        row["process_cpu_s"] = time.process_time() - process
        row.update(self.totals)
        for phase in ("schedule", "update"):
            row[f"{phase}_gil_wait_s"] = row.get(f"{phase}_wall_s", 0.0) - row.get(f"{phase}_cpu_s", 0.0)
        return row


def frozen(fn):
    """With every object alive before the run moved out of the garbage collector's reach (gc.freeze(), as vLLM does
    after start-up): its full passes then scan only what the run allocates."""
    gc.collect()
    gc.freeze()
    try:
        return fn()
    finally:
        gc.unfreeze()
