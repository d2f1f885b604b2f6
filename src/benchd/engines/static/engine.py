"""Static batching: model.generate() over fixed batches of waiting requests, the baseline."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from benchd.engines.attention import adopted
from benchd.engines.base import EngineFailure, EngineLoad, GenerationRequest, TokenSink
from benchd.engines.oom import failure_of, is_out_of_memory
from benchd.engines.static.spec import StaticOptions, StaticSpec
from benchd.measure.roofline import StepLog
from benchd.models.loading import LoadedModel, greedy_config
from benchd.spec import Workload


class _Slot:
    __slots__ = ("request", "sink", "produced", "done")

    def __init__(self, request: GenerationRequest, sink: TokenSink) -> None:
        self.request, self.sink = request, sink
        self.produced = 0
        self.done = False


class _Logprobs(LogitsProcessor):
    """Each step's greedy token's log-probability per row, from the scores generate() picks it by (the last
    processor: every other has acted); the streamer passes them on with the tokens."""

    def __init__(self) -> None:
        self.last: list[float] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores32 = scores.float()
        self.last = (scores32.max(dim=-1).values - torch.logsumexp(scores32, dim=-1)).tolist()
        return scores


class _StampingStreamer(BaseStreamer):
    """generate() calls put() once with the prompt, then once per step with that step's tokens (batch,): each step
    counted into steps as it ends. Every row is computed until the batch ends, padding and finished rows too: the
    first step prefills batch × width tokens, the k-th after it decodes one a row after width + k − 1 cached."""

    def __init__(self, slots: list[_Slot], eos_ids: frozenset[int], width: int, steps: StepLog,
                 logprobs: _Logprobs | None = None) -> None:
        self.slots, self.logprobs = slots, logprobs
        self.eos_ids = eos_ids
        self.prompt_seen = False
        self.width, self.steps, self.step = width, steps, 0

    def put(self, value: torch.Tensor) -> None:
        t = time.perf_counter()  # put() receives tokens already on the host: the step has completed
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        rows, width, past = len(self.slots), self.width, self.width + self.step - 1
        if self.step == 0:
            self.steps.add(rows * width, 0, 0, rows * width * (width + 1) // 2, rows)
        else:
            self.steps.add(0, rows, rows * past, rows * (past + 1), rows)
        self.step += 1
        logprobs = self.logprobs.last if self.logprobs is not None else None
        for row, (slot, token) in enumerate(zip(self.slots, value.tolist())):
            if slot.done:
                continue
            if logprobs:
                slot.sink.tokens(slot.request.request_id, t, 1, (token,), (logprobs[row],))
            else:
                slot.sink.tokens(slot.request.request_id, t, 1, (token,))
            slot.produced += 1
            # After EOS generate() pads the row: those are not tokens of the request.
            if slot.produced >= slot.request.max_new_tokens or token in self.eos_ids:
                slot.done = True
                slot.sink.finished(slot.request.request_id, t)

    def end(self) -> None:
        pass


class _RowsDone(StoppingCriteria):
    """Rows whose request is complete or cancelled stop; the batch ends when all have."""

    def __init__(self, slots: list[_Slot]) -> None:
        self.slots = slots

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        return torch.tensor([slot.done for slot in self.slots], device=input_ids.device)


class StaticEngine:
    name = "static"
    dispatch_lead_s = 0.0  # the stage submits at the scheduled time
    handoff = None

    def __init__(self, loaded: LoadedModel, options: StaticOptions, workload: Workload,
                 compile_mode: str = "off", logprobs: bool = False) -> None:
        self._loaded = loaded
        self._logprobs = logprobs  # each token's, with it (spec.quality.logprobs)
        self._batch_size = options.batch_size
        self._compile = compile_mode
        self._ignore_eos = workload.ignore_eos
        self._eos_ids = frozenset() if workload.ignore_eos else frozenset(loaded.eos_ids)
        self._pad_id = greedy_config(loaded, True).pad_token_id
        self._waiting: deque[_Slot] = deque()
        self._running: list[_Slot] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._failure: EngineFailure | None = None
        self.steps = StepLog()  # its forward steps since a stage last took them (benchd.measure.roofline)
        self.attention = adopted(loaded.model.config._attn_implementation)  # generate() runs what the model loaded

    def start(self) -> None:
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="benchd-static", daemon=True)
        self._thread.start()

    def submit(self, request: GenerationRequest, sink: TokenSink) -> None:
        with self._cond:
            self._waiting.append(_Slot(request, sink))
            self._cond.notify()

    def cancel(self, request_id: str, reason: str = "cancelled") -> None:
        with self._cond:
            for slot in list(self._waiting) + self._running:
                if slot.request.request_id == request_id and not slot.done:
                    slot.done = True
                    if slot in self._waiting:
                        self._waiting.remove(slot)
                    slot.sink.finished(request_id, time.perf_counter(), reason)

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def failure(self) -> EngineFailure | None:
        return self._failure

    def forget(self) -> None:
        """generate() keeps nothing from one batch to the next."""

    def load(self) -> EngineLoad:
        return EngineLoad(running=len(self._running), waiting=len(self._waiting))

    def settings(self) -> dict[str, Any]:
        return {"engine": self.name, "batch_size": self._batch_size, "compile": self._compile}

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._cond:
            leftover = list(self._waiting) + self._running
            self._waiting.clear()
        for slot in leftover:
            if not slot.done:
                slot.done = True
                slot.sink.finished(slot.request.request_id, time.perf_counter(), "engine stopped")

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                batch = [self._waiting.popleft() for _ in range(min(self._batch_size, len(self._waiting)))]
                self._running = batch
            try:
                self._generate(batch)
            except Exception as error:  # the engine thread's one boundary: fail this batch, keep serving
                if is_out_of_memory(error):  # the stage reports it; a new engine serves the next
                    self._failure = failure_of(error, self._loaded.device)
                t = time.perf_counter()
                for slot in batch:
                    if not slot.done:
                        slot.done = True
                        slot.sink.finished(slot.request.request_id, t, f"{type(error).__name__}: {error}")
            finally:
                with self._cond:
                    self._running = []

    def _generation(self, max_new: int):
        """Greedy; compiled: a static cache (fixed shapes) and transformers' CompileConfig, which compiles the forward
        pass on the first batch of each shape (on CPU too: benchd asks for it, so tests can run it)."""
        config = greedy_config(self._loaded, self._ignore_eos, max_new)
        if self._compile == "off":
            config.disable_compile = True
            return config
        from transformers import CompileConfig

        compile_config = CompileConfig(mode=self._compile)
        compile_config._compile_all_devices = True
        config.cache_implementation = "static"
        config.compile_config = compile_config
        return config

    @torch.inference_mode()
    def _generate(self, batch: list[_Slot]) -> None:
        device = self._loaded.device
        width = max(len(s.request.prompt_ids) for s in batch)
        # Left padding: every row's next token is at the same position. input_ids: (batch, width)
        input_ids = torch.full((len(batch), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, slot in enumerate(batch):
            prompt = slot.request.prompt_ids
            input_ids[row, width - len(prompt):] = torch.tensor(prompt)
            mask[row, width - len(prompt):] = 1
        input_ids, mask = input_ids.to(device), mask.to(device)
        max_new = max(s.request.max_new_tokens for s in batch)
        t = time.perf_counter()
        for slot in batch:
            slot.sink.admitted(slot.request.request_id, t)
        logprobs = _Logprobs() if self._logprobs else None
        self._loaded.model.generate(
            input_ids,
            attention_mask=mask,
            generation_config=self._generation(max_new),
            streamer=_StampingStreamer(batch, self._eos_ids, width, self.steps, logprobs),
            stopping_criteria=StoppingCriteriaList([_RowsDone(batch)]),
            logits_processor=LogitsProcessorList([logprobs] if logprobs is not None else []),
        )
        t = time.perf_counter()
        for slot in batch:  # a row generate() ended some other way (max_length of the model)
            if not slot.done:
                slot.done = True
                slot.sink.finished(slot.request.request_id, t)


def create(loaded: LoadedModel, spec: StaticSpec) -> StaticEngine:
    """The engine's record's `create` (engines/static/spec.py)."""
    return StaticEngine(loaded, spec.static, spec.workload, spec.compile, bool(spec.quality.logprobs))
