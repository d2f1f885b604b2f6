"""transformers continuous batching: every token with the timestamp transformers records as it is produced."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import transformers
from transformers.generation.continuous_batching.utils import WorkloadHints

from benchd.engines import attention
from benchd.engines.base import EngineFailure, EngineLoad, GenerationRequest, TokenSink
from benchd.engines.handoff import Handoff
from benchd.engines.oom import failure_of
from benchd.engines.transformers import warmup
from benchd.engines.transformers.batching import (
    SIZE_FIELD,
    admit_after_cancels,
    cb_config,
    cpu_threads,
    decode_by_block_table,
    device_memory,
    generated,
    gpu_plan,
    stamps_survive_resets,
)
from benchd.engines.transformers.hooks import count_steps, handoff_hooks
from benchd.engines.transformers.paged_cache import accepted_blocks, forget_prefixes, kv_blocks
from benchd.engines.transformers.scheduling import register as register_scheduler
from benchd.engines.transformers.spec import TransformersOptions, TransformersSpec
from benchd.measure.roofline import StepLog
from benchd.models.loading import LoadedModel, greedy_config
from benchd.spec import SpecError, Workload, traces
from benchd.spec.stack import base_attention

log = logging.getLogger("benchd.engines")

# How often running requests' new tokens are read. Their stamps are exact whatever this is; it sets how soon
# metrics see them, and what reading them costs the generation loop, whose scheduling needs the GIL this reading
# takes: 2.5 µs a request and token read one at a time, 0.7 µs five at a time. On an H100 (reference workload,
# bench/gpu_overhead.py) the generation thread waited 0.18–0.24 s of a 24 s run for the GIL at 50 ms, 0.06 s here.
LIVE_POLL_S = 0.5

@dataclass(slots=True)
class _Stream:
    sink: TokenSink
    seen: int = 0
    admitted: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class TransformersEngine:
    name = "transformers"
    dispatch_lead_s = 0.0  # the stage submits at the scheduled time

    def __init__(self, loaded: LoadedModel, options: TransformersOptions, workload: Workload,
                 attn_implementation: str | None = None, logprobs: bool = False) -> None:
        self._loaded = loaded
        admit_after_cancels()  # transformers' loop, left blocked by a cancel, admits again (batching.unblock)
        stamps_survive_resets()  # a request soft-reset for want of blocks keeps its tokens' stamps
        register_scheduler()  # benchd's split steps, by transformers' scheduler_type (scheduling.py)
        # The attention it runs (engines/attention.py): the spec's, as named (transformers would otherwise switch
        # sdpa to flash attention by itself where flash-attn is installed), else the best the device runs; with
        # library_defaults and none named, transformers' own choice (read once it has started).
        named = attn_implementation is not None or not options.library_defaults
        self.attention = attention.choose(loaded.model, loaded.device, attn_implementation) if named else None
        self._attention = self.attention.implementation if self.attention is not None else None
        attention.register(self._attention)
        self._attention_before: str | None = None
        planned = loaded.device.type == "cuda" and not options.library_defaults
        self._options, self._workload = options, workload
        self._memory = device_memory(loaded.device) if planned else None
        self.plan = gpu_plan(loaded, options, workload, base_attention(self._attention), self._memory) \
            if planned else None
        self._config = cb_config(options, loaded.device.type, self.plan, base_attention(self._attention or "sdpa"))
        self._config.return_logprobs = logprobs  # each token's, with it (spec.quality.logprobs)
        self._threads = cpu_threads(options, loaded.device.type)
        self._threads_before: int | None = None
        prompt, output = traces.longest(workload)
        self._generation = greedy_config(loaded, workload.ignore_eos, output)
        self._eos: list[int] = [] if workload.ignore_eos else loaded.eos_ids
        self._hints = WorkloadHints(max_prompt_length=prompt, max_generated_length=output)
        self._check_capacity(workload)
        self._streams: dict[str, _Stream] = {}
        self._lock = threading.Lock()
        self._manager = None
        self._consumer: threading.Thread | None = None
        self._stopping = threading.Event()
        # On a CPU the generation thread runs the model's Python and keeps the GIL; on a GPU it waits on the device
        # without it, and a compiled forward would break its graph at every hook.
        compiled = getattr(self._config, "default_compile_level", 0)
        self.handoff = Handoff() if loaded.device.type == "cpu" and not compiled else None
        self._hooks: list = []
        self.steps = StepLog()  # its forward steps since a stage last took them (benchd.measure.roofline)

    def _check_capacity(self, workload: Workload) -> None:
        size = getattr(self._config, SIZE_FIELD)
        need = sum(traces.longest(workload))
        if self._config.num_blocks is not None and self._config.num_blocks * size < need:
            raise SpecError(
                f"transformers.num_blocks: the cache holds {self._config.num_blocks} × {size} tokens, "
                f"but one request may need {need} (prompt + output)"
            )

    def start(self, gate=None) -> None:
        """gate: called between preparing and warming up, where a tensor-parallel group's ranks learn whether
        every rank could prepare (worker/parallel.py): transformers' warm-up is collective, and a rank that failed
        alone would leave the others waiting in it."""
        self._start_manager(gate)
        if self.handoff is not None:
            self._hooks = handoff_hooks(self._loaded.model, self.handoff)
        self._stopping.clear()
        self._consumer = threading.Thread(target=self._consume, name="benchd-cb-results", daemon=True)
        self._consumer.start()

    def forget(self) -> None:
        """A warm engine keeps the complete blocks of finished requests for prefix sharing (transformers keeps them
        across generation sessions), and a run of the same seeded prompts after another found every prompt cached:
        prefill skipped, TTFT p50 350 ms instead of 3.3 s for the reference workload on an H100. Each run starts
        with none (sharing within a run is kept)."""
        if self._manager is not None and self._manager.batch_processor is not None:
            forget_prefixes(self._manager.batch_processor.cache)

    def follow(self, gate=None) -> None:
        """On a tensor-parallel rank other than the driver (rank 0): run the batching loop in step with the
        driver's, which broadcasts the requests it admits and its stop, until it stops."""
        self._start_manager(gate)
        try:
            while self._manager.is_running():
                time.sleep(0.05)
        finally:
            self._manager.stop(block=True, timeout=10)
            self._manager.destroy()
            self._manager = None
            self._restore_threads()

    def _start_manager(self, gate=None) -> None:
        try:
            failure = None
            try:
                self._prepare()
            except Exception as error:  # told to the group's other ranks before it is raised
                failure = error
            if gate is not None:
                gate(failure)  # raises any rank's failure on every rank
            if failure is not None:
                raise failure
            self._manager.warmup()  # CUDA graph capture: before any timed request
            warmup.warm_skipped_pair(self._manager, self._loaded.model)
            warmup.check_warmup(self._manager, self.plan, self._loaded.device)
            self._manager.start()
        except BaseException as error:
            manager, self._manager = self._manager, None
            try:
                warmup.let_go(manager, error, self._loaded.model)
            finally:
                self._restore_threads()
                self._restore_attention()
            raise
        if self.attention is None:  # transformers chose (library_defaults)
            self.attention = attention.adopted(self._loaded.model.config._attn_implementation)

    def _prepare(self) -> None:
        """The manager, made with the attention and the plan, and the plan fitted to transformers' own check."""
        if self._threads is not None:
            # Process-wide while the engine runs; set before the generation thread starts, which takes the count on
            # its first parallel op.
            self._threads_before = torch.get_num_threads()
            torch.set_num_threads(self._threads)
        model = self._loaded.model
        if self._attention is not None and model.config._attn_implementation != self._attention:
            self._attention_before = model.config._attn_implementation
            model.set_attn_implementation(self._attention)
        self._manager = model.init_continuous_batching(generation_config=self._generation,
                                                       continuous_batching_config=self._config,
                                                       workload_hints=self._hints)
        count_steps(self._manager, self.steps)
        decode_by_block_table(self._manager.continuous_batching_config, self._attention,
                              sum(traces.longest(self._workload)))
        self._fit_transformers_check()

    def _fit_transformers_check(self) -> None:
        """transformers checks the cache it is given against its own accounting (5.17: PagedAttentionMemoryHandler),
        which counts a step mask for any attention but flash ones and every K/V head on each tensor-parallel rank
        (it allocates a rank's share): a plan within the device could be refused ("Memory footprint … is more than
        available memory"). The plan's cache shrinks to what that accounting accepts, and says so."""
        if self.plan is None:
            return
        config = self._manager.continuous_batching_config
        config.max_memory_percent = 1.0  # the plan keeps the run within its share of the device; transformers' own
        accepted = accepted_blocks(self._loaded.model.config.get_text_config(), config,  # share is not applied twice
                                   self._loaded.dtype, self.plan.max_batch_tokens, self.plan.num_blocks)
        if accepted is None or accepted >= self.plan.num_blocks:
            return
        if accepted * self.plan.block_size < sum(traces.longest(self._workload)):
            raise SpecError(f"model: transformers {transformers.__version__}'s own memory accounting accepts a cache "
                            f"of {accepted:,} × {self.plan.block_size} tokens, less than one request of the workload")
        log.info("the cache planned at %s blocks is cut to %s, what transformers' own accounting accepts",
                 self.plan.num_blocks, accepted)
        fitted = self._options.model_copy(update={"num_blocks": accepted, "block_size": self.plan.block_size,
                                                  "max_batch_tokens": self.plan.max_batch_tokens})
        self.plan = gpu_plan(self._loaded, fitted, self._workload, base_attention(self._attention), self._memory)
        config.num_blocks = accepted

    def _restore_attention(self) -> None:
        """The model is shared with the next engine (a static one runs the unpaged implementation)."""
        if self._attention_before is not None:
            self._loaded.model.set_attn_implementation(self._attention_before)
            self._attention_before = None

    def _restore_threads(self) -> None:
        if self._threads_before is not None:
            torch.set_num_threads(self._threads_before)
            self._threads_before = None

    def submit(self, request: GenerationRequest, sink: TokenSink) -> None:
        with self._lock:
            self._streams[request.request_id] = _Stream(sink)
        accepted = self._manager.add_request(
            request.prompt_ids,
            request_id=request.request_id,
            max_new_tokens=request.max_new_tokens,
            streaming=False,  # tokens are read from the live request state instead (_poll_live)
            record_timestamps=True,
            eos_token_id=self._eos,
        )
        if accepted is None:  # the manager refuses requests once its loop has died or is stopping
            self._finish(request.request_id, time.perf_counter(), "engine is not accepting requests")

    def cancel(self, request_id: str, reason: str = "cancelled") -> None:
        # transformers drops a cancelled request without a final output: take the tokens it has produced since
        # the last poll, then finish it here.
        stream = self._streams.get(request_id)
        if stream is None:
            return
        processor = self._manager.batch_processor
        state = processor.scheduler.active_requests.get(request_id) if processor is not None else None
        if state is not None:
            self._deliver(request_id, stream, state.lifespan[0], state.timestamps or (), generated(state),
                          state.logprobs)
        self._manager.cancel_request(request_id)
        self._finish(request_id, time.perf_counter(), reason)

    def _finish(self, request_id: str, t: float, error: str | None) -> None:
        with self._lock:
            stream = self._streams.pop(request_id, None)
        if stream is not None:
            stream.sink.finished(request_id, t, error)

    def _consume(self) -> None:
        try:
            self._consume_outputs()
        except Exception as error:  # the thread's boundary: a dead consumer must not leave requests waiting
            self._fail_all(f"result consumer failed: {type(error).__name__}: {error}")
            raise

    def _consume_outputs(self) -> None:
        manager = self._manager
        next_poll = 0.0
        while not self._stopping.is_set():
            now = time.perf_counter()
            if now >= next_poll:
                self._poll_live(manager)
                next_poll = now + LIVE_POLL_S
            output = manager.get_result(timeout=max(0.0, next_poll - time.perf_counter()))
            if output is None:
                if not manager.is_running():
                    self._fail_all("continuous batching loop stopped")
                    self._stopping.wait(LIVE_POLL_S)
                continue
            stream = self._streams.get(output.request_id)
            if stream is None:  # cancelled, or an output after the end
                continue
            # The final output carries every token and its stamp: deliver what polling has not.
            self._deliver(output.request_id, stream, output.lifespan[0], output.timestamps or (),
                          output.generated_tokens, output.logprobs)
            stamps = output.timestamps
            end = stamps[-1] if stamps and output.error is None else time.perf_counter()
            self._finish(output.request_id, end, output.error)

    def _poll_live(self, manager) -> None:
        """Tokens of running requests, read from their live state: the stamps transformers records as each token
        is produced, seen here within LIVE_POLL_S. Only reads (len and slices of growing lists), so the generation
        thread does no per-token work for benchd (streaming=True copies every request's token and stamp lists on
        every step and queues an output for each). This thread's work still takes the GIL the generation loop
        needs to schedule its next step, so a request with nothing new costs a dict lookup and a length."""
        processor = manager.batch_processor
        if processor is None:
            return
        active = processor.scheduler.active_requests
        for request_id, stream in list(self._streams.items()):
            state = active.get(request_id)
            if state is None:
                continue
            tokens = generated(state)
            if not stream.admitted or len(tokens) > stream.seen:
                self._deliver(request_id, stream, state.lifespan[0], state.timestamps or (), tokens, state.logprobs)

    def _deliver(self, request_id: str, stream: _Stream, admitted_s: float, stamps, tokens, logprobs=()) -> None:
        """Pass on the tokens not yet passed on, in one call; the result thread and cancel() may both call this."""
        sink = stream.sink
        with stream.lock:
            if not stream.admitted and admitted_s > 0:
                stream.admitted = True
                sink.admitted(request_id, admitted_s)
            # The generation thread appends the stamp, then the token (and its log-probability with it, when asked
            # for): only what is present in each is complete.
            ready = min(len(stamps), len(tokens), len(logprobs) if self._config.return_logprobs else len(tokens))
            if ready > stream.seen and self._config.return_logprobs:
                sink.stamped_tokens(request_id, stamps[stream.seen:ready], tokens[stream.seen:ready],
                                    logprobs[stream.seen:ready])
            elif ready > stream.seen:
                sink.stamped_tokens(request_id, stamps[stream.seen:ready], tokens[stream.seen:ready])
            stream.seen = max(stream.seen, ready)

    def _fail_all(self, error: str) -> None:
        t = time.perf_counter()
        for request_id in list(self._streams):
            self._finish(request_id, t, error)

    def alive(self) -> bool:
        return self._manager is not None and self._manager.is_running()

    def failure(self) -> EngineFailure | None:
        status = getattr(self._manager, "background_thread_status", None)
        error = getattr(status, "fatal_error", None)
        return None if error is None else failure_of(error, self._loaded.device)

    def load(self) -> EngineLoad:
        manager = self._manager
        processor = manager.batch_processor if manager is not None else None
        if processor is None:
            return EngineLoad(running=0, waiting=len(self._streams))
        used, total = kv_blocks(processor.cache)
        scheduler = processor.scheduler
        return EngineLoad(
            running=len(scheduler.active_requests),
            waiting=len(scheduler.waiting_requests) + manager.input_queue.qsize(),
            kv_blocks_used=used,
            kv_blocks_total=total,
        )

    def settings(self) -> dict[str, Any]:
        config = self._manager.continuous_batching_config if self._manager is not None else self._config
        plain = (int, float, bool, str, tuple, type(None))
        resolved = {k: v for k, v in vars(config).items() if isinstance(v, plain)}
        load = self.load()
        if load.kv_blocks_total is not None:
            resolved["num_blocks"] = load.kv_blocks_total
        return {"engine": self.name, "continuous_batching": resolved,
                "cpu_threads": self._threads if self._threads is not None else torch.get_num_threads(),
                **({"attention": {"implementation": self.attention.implementation, "kernel": self.attention.kernel}}
                   if self.attention is not None else {}),
                **({"memory_plan": self.plan.as_dict()} if self.plan is not None else {})}

    def stop(self) -> None:
        if self._manager is None:
            return
        self._fail_all("engine stopped")
        self._manager.stop(block=True, timeout=10, hard_stop=True)  # nothing left to flush: all finished above
        self._stopping.set()
        if self._consumer is not None:
            self._consumer.join(timeout=5)
        self._manager.destroy()
        self._manager = None
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        self._restore_threads()
        self._restore_attention()


def create(loaded: LoadedModel, spec: TransformersSpec) -> TransformersEngine:
    """The engine's record's `create` (engines/transformers/spec.py)."""
    return TransformersEngine(loaded, spec.transformers, spec.workload, spec.attn_implementation,
                              bool(spec.quality.logprobs))
