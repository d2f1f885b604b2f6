"""The events of a run, worker → daemon: each a typed record, made in the worker where it happens and read by the
daemon's ingest (daemon/ingest.py), one handler a type."""

from __future__ import annotations

from typing import Any

import msgspec

# Worker-side stamps (`*_s` of a moment, not a length) are time.perf_counter(): CLOCK_MONOTONIC on Linux, comparable
# between processes, so every latency is derived in the daemon exactly as it would be in the worker.


# The hot path: a Tokens event is made per request per engine poll, and batches leave every 100 ms.
# bench/protocol_codec.py (2-core CPU machine, Python 3.11, msgspec 0.22), µs an event, the tuples the pipe pickled
# before → these records:
#   transformers' poll, 256 Tokens of 16 stamps: make + put 0.36 → 0.39, encode 0.44 → 0.12, decode 0.45 → 0.42,
#   ingest's dispatch 0.12 → 0.07; in all 1.36 → 1.00
#   a per-token engine, 1,150 events of one stamp: 0.27 → 0.30, 0.18 → 0.05, 0.14 → 0.22, 0.11 → 0.06; 0.70 → 0.64
# gc=False saves about 0.05 of decoding (not tracked by the collector: they hold no other record, and heap.py keeps
# its walks short); frozen and tuple fields cost nothing measurable.


class Event(msgspec.Struct, tag=True, array_like=True, frozen=True, gc=False):
    """The base of every event. On the wire an event is an array: its class name (the tag), then its fields in
    order (array_like, as vLLM V1's EngineCoreOutputs), decoded by the tag into its class."""


# ---- generation --------------------------------------------------------------------------------


class Phase(Event, frozen=True):
    """What a quiet worker is busy with: load | start | run."""

    name: str
    t_s: float


class StageStart(Event, frozen=True):
    """A load level starts dispatching."""

    index: int
    label: str
    t0_s: float


class Request(Event, frozen=True):
    """A request of stage `stage` is made; submitted_s None: the engine sends it at scheduled_s itself and reports
    Submitted. span_id: its span's id, when the run is traced (a server's span is put under it)."""

    stage: int
    index: int
    request_id: str
    warmup: bool
    prompt_tokens: int
    max_new_tokens: int
    scheduled_s: float
    submitted_s: float | None
    span_id: str | None


class Submitted(Event, frozen=True):
    """An engine that sends at the scheduled time itself did so."""

    request_id: str
    t_s: float


class Admitted(Event, frozen=True):
    request_id: str
    t_s: float


class Tokens(Event, frozen=True):
    """Output arrived: arrival_s[i] carried arrival_tokens[i] tokens (None: one each), the ids in token_ids and
    their log-probabilities in logprobs (where the engine gives them). The names are RequestRecord's
    (measure/records.py), whose lists these extend."""

    request_id: str
    arrival_s: tuple[float, ...]
    arrival_tokens: tuple[int, ...] | None
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...] = ()


class Prompt(Event, frozen=True):
    """The prompt's length as a server counted it (a chat template included)."""

    request_id: str
    prompt_tokens: int


class Counted(Event, frozen=True):
    """A server's request counted twice: by the server's usage (None: it gave none) and by benchd's tokenizer
    (measure/records.py, TokenCounts)."""

    request_id: str
    server_prompt: int | None
    server_output: int | None
    prompt: int
    output: int


class Finished(Event, frozen=True):
    request_id: str
    t_s: float
    error: str | None


class Load(Event, frozen=True):
    """The engine's load, sampled during stage `stage` (engines.EngineLoad's fields)."""

    stage: int
    t_s: float
    running: int
    waiting: int
    kv_blocks_used: int | None
    kv_blocks_total: int | None


class Drain(Event, frozen=True):
    """Stage `stage` stopped sending at t_s: it waits for its requests in flight at most bound_s (stop.drain_s), then
    cuts those still out."""

    stage: int
    t_s: float
    bound_s: float


class StageEnd(Event, frozen=True):
    """end_s: where an aborted stage's window closes, or a stage cut at its drain's end (None: at its last request);
    status stopped: a stop rule ended it, stop_reason says why."""

    index: int
    status: str
    end_s: float | None
    kv_peak: float | None
    stop_reason: str | None


class Steps(Event, frozen=True):
    """The forward steps the engine counted during a stage (benchd.measure.roofline.StepLog's lists, a step an
    entry), sent before its StageEnd; an engine that counts none (a server) sends none."""

    stage: int
    prefill_tokens: tuple[int, ...]
    decode_tokens: tuple[int, ...]
    kv_read_tokens: tuple[int, ...]
    attended: tuple[int, ...]
    sampled: tuple[int, ...]


class EngineRestart(Event, frozen=True):
    """Stage `stage`'s engine was replaced by a new one, which runs the stages after it (reason: out_of_memory)."""

    stage: int
    reason: str


# ---- timed runs --------------------------------------------------------------------------------


class Timing(Event, frozen=True):
    """One repetition of a timed series in stage `stage`; shape and dtype: a kernel's."""

    stage: int
    series: str
    index: int
    warmup: bool
    seconds: float
    shape: str | None
    dtype: str | None


class TimedStage(Event, frozen=True):
    """Stage `index` closed with its summary (a timed run's stage summary as JSON); sent again when a later figure
    changes it."""

    index: int
    summary: dict[str, Any]
    start_s: float
    end_s: float


class Span(Event, frozen=True):
    """A span of the run's trace, timed in the worker (a training step's phases)."""

    name: str
    start_s: float
    end_s: float
    attributes: dict[str, Any]


class TimedProgress(Event, frozen=True):
    """How far a timed run's stage `index` (of `stages`) is: completed of expected repetitions."""

    label: str
    index: int
    stages: int
    completed: int
    expected: int
    elapsed_s: float
    duration_s: float | None


AnyEvent = (Phase | StageStart | Request | Submitted | Admitted | Tokens | Prompt | Counted | Finished | Load | Drain
            | StageEnd | Steps | EngineRestart | Timing | TimedStage | Span | TimedProgress)

# Made whatever the engine does: not progress (a stalled engine still gets requests and has its load sampled).
DISPATCH = frozenset({Request, Submitted, Load, Drain})
