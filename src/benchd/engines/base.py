"""The small interface every generation backend implements, and the records it passes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from benchd.engines.handoff import Handoff
    from benchd.measure.records import TokenCounts
    from benchd.measure.roofline import StepLog


@dataclass(slots=True, frozen=True)
class GenerationRequest:
    request_id: str
    prompt_ids: list[int]
    max_new_tokens: int
    prompt_text: str | None = None  # what a server engine sends
    traceparent: str | None = None  # W3C trace context a server engine sends: the request's span, decided here


class TokenSink(Protocol):
    """Receives a request's events, on the engine's thread: keep these cheap (they are the hot path)."""

    def admitted(self, request_id: str, t: float) -> None: ...

    # logprobs: each token's log-probability, where the engine gives them (none, or one a token id)
    def tokens(self, request_id: str, t: float, n: int, token_ids: Sequence[int] = (),
               logprobs: Sequence[float] = ()) -> None: ...

    # Engines that stamp every token themselves pass on a run of them at once: token_ids[i] arrived at stamps[i].
    def stamped_tokens(self, request_id: str, stamps: Sequence[float], token_ids: Sequence[int],
                       logprobs: Sequence[float] = ()) -> None: ...

    def finished(self, request_id: str, t: float, error: str | None = None) -> None: ...

    # Engines that send requests themselves at their scheduled time (dispatch_lead_s > 0) say when they did,
    # and servers report the prompt's length as they counted it.
    def submitted(self, request_id: str, t: float) -> None: ...

    def prompt_tokens(self, request_id: str, n: int) -> None: ...

    # A server's request, counted twice: by the server's usage and by benchd's tokenizer (measure/records.py).
    def counted(self, request_id: str, counts: TokenCounts) -> None: ...


@dataclass(slots=True, frozen=True)
class EngineLoad:
    running: int
    waiting: int
    kv_blocks_used: int | None = None
    kv_blocks_total: int | None = None

    @property
    def kv_occupancy(self) -> float | None:
        if not self.kv_blocks_total or self.kv_blocks_used is None:
            return None
        return self.kv_blocks_used / self.kv_blocks_total


@dataclass(frozen=True, slots=True)
class Choice:
    """The attention an engine runs: transformers' name for it (continuous batching's paged|…) and where its kernel
    comes from (package and version), as a run's stack records them (engines/attention.py chooses)."""

    implementation: str
    kernel: str


@dataclass(slots=True, frozen=True)
class EngineFailure:
    """Why a started engine can no longer serve: out of memory (a new engine can), or a fault of another kind."""

    message: str
    out_of_memory: bool = False


class Engine(Protocol):
    """What runs a spec's requests in the worker, made by its record's `create` (spec/engines.py). Every engine
    keeps these contracts, which engines/contracts.py checks on a stage's records and tests/engines/test_contracts.py
    on every engine found:

    - every submitted request ends with exactly one sink.finished, at its end, never before its last token;
    - stamps are perf_counter() seconds, in order: submitted ≤ admitted ≤ each token, in the order they came ≤ the
      end;
    - an engine that stamps its tokens (its record's stamps "engine") stamps each token, with its id, and ends a
      request that succeeded at its last token's stamp: its finish time is that stamp, not a later reading of the
      clock;
    - an engine that loads the model into benchd's worker (its record's loads_model) makes exactly max_new_tokens
      when the workload ignores EOS, and counts its forward steps (`steps`): each token it gives is sampled at a
      step it counted.
    """

    name: str
    # > 0: submit() takes `at` (the scheduled perf_counter() time) and is called up to this many seconds early;
    # the engine sends the request at that time itself and reports it with sink.submitted.
    dispatch_lead_s: float
    # An engine whose thread runs Python in the dispatcher's process gives way to a due send (engines/handoff.py);
    # None: it does not share the dispatcher's GIL, or never keeps it long.
    handoff: Handoff | None
    # The forward steps the engine ran, counted by its own loop (benchd.measure.roofline); None: a server's, unseen
    # (an engine that loads the model must count them).
    steps: StepLog | None
    # The attention it runs and its kernel's source, known once it has started; None: a server's, unseen.
    attention: Choice | None

    def start(self) -> None:
        """Allocate caches, warm up (CUDA graphs), start threads. Not timed as part of any run."""

    def forget(self) -> None:
        """Before each run on a started engine, none running: nothing an earlier run left (cached prefixes) may
        serve this one."""

    def submit(self, request: GenerationRequest, sink: TokenSink) -> None:
        """Thread-safe and non-blocking; every submitted request ends with exactly one sink.finished."""

    def cancel(self, request_id: str, reason: str = "cancelled") -> None:
        """End a request early; its sink.finished carries the reason as the error."""

    def load(self) -> EngineLoad: ...

    def alive(self) -> bool:
        """Started and still able to serve (a fatal error stops continuous batching's loop)."""

    def failure(self) -> EngineFailure | None:
        """What stopped the engine, or left it out of device memory (read at once: it carries the allocator's
        figures of that moment); None while it serves."""

    def settings(self) -> dict[str, Any]:
        """The resolved configuration, stored with the run."""

    def stop(self) -> None: ...
