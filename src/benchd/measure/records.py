"""Raw per-request stamps and the latencies derived from them; a run's records as they arrive (RecordBook)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchd.measure import latency
from benchd.spec.slo import SLO

# The error of a request still in flight when its stage's drain ended (loadgen/stage.py): cancelled by benchd at the
# stage's end, counted as cut, apart from the failed ones (docs/figures.md).
CUT = "cut: still in flight when the stage's drain ended"
# The errors of those in flight when their stage ended early (loadgen/stage.py's abort): the run cancelled or
# interrupted, or a stop rule ("stopped: …"). Cut too: benchd ended them, the engine did not fail them.
STOPPED = ("cancelled", "interrupted")


# A server's request counted twice agrees when its tokens by benchd's tokenizer are within this many tokens, or this
# share, of the server's usage (the larger). benchd encodes the answer's text, which gives its canonical tokens: a
# server counts the end-of-sequence token the text leaves out, and a model may emit a text in other tokens than its
# tokenizer would make of it (SmolLM2 writes "\n\n" as one token its tokenizer encodes as two: 6 of 200 tokens, 3 %,
# in one answer of the tests'). A server that counts something else (characters, a template it left out, another
# request's usage) is off by far more (docs/figures.md, quality).
COUNT_TOLERANCE_TOKENS = 2
COUNT_TOLERANCE_SHARE = 0.10
COUNT_KEYS = ("server_prompt", "server_output", "prompt", "output")  # as stored (the requests' counts column)


@dataclass(slots=True, frozen=True)
class TokenCounts:
    """A server's request's tokens by the server's usage (None: it gave none) and by benchd's tokenizer."""

    server_prompt: int | None
    server_output: int | None
    prompt: int
    output: int

    def as_tuple(self) -> tuple[int | None, int | None, int, int]:
        return self.server_prompt, self.server_output, self.prompt, self.output

    def disagreement(self) -> str | None:
        """How they disagree beyond the tolerance; None when they agree (or the server said nothing)."""
        found = []
        for name, server, ours in (("prompt", self.server_prompt, self.prompt),
                                   ("output", self.server_output, self.output)):
            if server is not None and abs(server - ours) > max(COUNT_TOLERANCE_TOKENS,
                                                               COUNT_TOLERANCE_SHARE * server):
                found.append(f"{name} {server} by the server, {ours} by benchd")
        return "; ".join(found) or None


@dataclass(slots=True)
class RequestRecord:
    """Everything measured about one request: perf_counter() seconds, one process."""

    index: int
    request_id: str
    warmup: bool
    prompt_tokens: int
    max_new_tokens: int
    scheduled_s: float  # t_s: when the schedule (open loop) or a freed slot (closed loop) said to send it
    submitted_s: float | None = None
    admitted_s: float | None = None  # the engine started work on it (left its waiting queue)
    arrival_s: list[float] = field(default_factory=list)  # one stamp per arrival (token or stream chunk)
    arrival_tokens: list[int] = field(default_factory=list)  # tokens carried by each arrival
    token_ids: list[int] = field(default_factory=list)
    # each generated token's, where the engine gave them (stored as null where not finite: a broken stack's NaN)
    logprobs: list[float | None] = field(default_factory=list)
    finished_s: float | None = None
    counts: TokenCounts | None = None  # a server's request: its tokens by the server and by benchd
    error: str | None = None
    trace_id: str | None = None  # the request's span, when it was sampled
    span_id: str | None = None  # its id, decided when it is sent (a server engine's traceparent header)

    @property
    def done(self) -> bool:
        return self.finished_s is not None

    @property
    def ok(self) -> bool:
        return self.finished_s is not None and self.error is None and bool(self.arrival_s)

    @property
    def cut(self) -> bool:
        """Ended by benchd while in flight: at its stage's drain's end, or as the stage ended early."""
        return self.error is not None and (self.error in (CUT, *STOPPED) or self.error.startswith("stopped: "))

    @property
    def output_tokens(self) -> int:
        return sum(self.arrival_tokens)

    @property
    def dispatch_lag_s(self) -> float | None:
        return None if self.submitted_s is None else self.submitted_s - self.scheduled_s

    @property
    def queue_s(self) -> float | None:
        return None if self.admitted_s is None else self.admitted_s - self.scheduled_s

    @property
    def ttft_s(self) -> float | None:
        return latency.ttft(self.scheduled_s, self.arrival_s)

    @property
    def e2e_s(self) -> float | None:
        return latency.e2e(self.scheduled_s, self.arrival_s)

    @property
    def tpot_s(self) -> float | None:
        return latency.tpot(self.arrival_s, self.output_tokens)

    def itl_s(self) -> list[float]:
        return latency.itl(self.arrival_s, self.arrival_tokens)

    def meets(self, slo: SLO) -> bool:
        if not self.ok:
            return False
        if slo.ttft_s is not None and self.ttft_s > slo.ttft_s:
            return False
        tpot = self.tpot_s
        return slo.tpot_s is None or tpot is None or tpot <= slo.tpot_s

    def to_row(self, stage: str, origin: float) -> dict[str, Any]:
        """The record as plain data with every stamp in seconds from origin (the stage's start): what the store
        keeps and the API returns. from_row() gives the record back, so every latency can be derived again."""

        def rel(t: float | None) -> float | None:
            return None if t is None else t - origin

        return {
            "stage": stage, "index": self.index, "request_id": self.request_id, "warmup": self.warmup,
            "prompt_tokens": self.prompt_tokens, "max_new_tokens": self.max_new_tokens,
            "output_tokens": self.output_tokens, "scheduled_s": rel(self.scheduled_s),
            "submitted_s": rel(self.submitted_s), "admitted_s": rel(self.admitted_s),
            "finished_s": rel(self.finished_s), "dispatch_lag_s": self.dispatch_lag_s, "queue_s": self.queue_s,
            "ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s, "error": self.error,
            "trace_id": self.trace_id, "arrival_s": [t - origin for t in self.arrival_s],
            "arrival_tokens": list(self.arrival_tokens), "token_ids": list(self.token_ids) or None,
            "logprobs": [x if x is not None and math.isfinite(x) else None for x in self.logprobs] or None,
            "counts": None if self.counts is None else dict(zip(COUNT_KEYS, self.counts.as_tuple())),
        }

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> RequestRecord:  # a database row's mapping (by name), or a dict
        return cls(
            index=row["index"], request_id=row["request_id"], warmup=bool(row["warmup"]),
            prompt_tokens=row["prompt_tokens"], max_new_tokens=row["max_new_tokens"],
            scheduled_s=row["scheduled_s"], submitted_s=row["submitted_s"], admitted_s=row["admitted_s"],
            arrival_s=list(row["arrival_s"] or []), arrival_tokens=list(row["arrival_tokens"] or []),
            token_ids=list(row.get("token_ids") or []), logprobs=list(row.get("logprobs") or []),
            counts=TokenCounts(*(row["counts"][k] for k in COUNT_KEYS)) if row.get("counts") else None,
            finished_s=row["finished_s"], error=row["error"],
            trace_id=row["trace_id"],
        )


class RecordBook:
    """A stage's records, changed only by the events engines report (the worker keeps one to dispatch, the daemon
    one rebuilt from the worker's events to derive every figure): one definition of what an event does to a
    record. Each method returns what changed, or None when the event changes nothing (a record already ended)."""

    __slots__ = ("records", "measured_tokens", "measured_from_s", "ended")

    def __init__(self) -> None:
        self.records: dict[str, RequestRecord] = {}
        # Running figures, so that what a live stage reports costs the same at its millionth request as at its first
        self.measured_tokens = 0  # output tokens of non-warm-up requests so far
        self.measured_from_s: float | None = None  # the earliest scheduled time of a measured request sent so far
        self.ended = 0  # requests finished so far

    def request(self, index: int, request_id: str, warmup: bool, prompt_tokens: int, max_new_tokens: int,
                scheduled_s: float, submitted_s: float | None = None, span_id: str | None = None) -> RequestRecord:
        record = RequestRecord(index=index, request_id=request_id, warmup=warmup, prompt_tokens=prompt_tokens,
                               max_new_tokens=max_new_tokens, scheduled_s=scheduled_s, submitted_s=submitted_s,
                               span_id=span_id)
        self.records[request_id] = record
        if submitted_s is not None:
            self._sent(record)
        return record

    def submitted(self, request_id: str, t: float) -> RequestRecord:
        record = self.records[request_id]
        record.submitted_s = t
        self._sent(record)
        return record

    def _sent(self, record: RequestRecord) -> None:
        if not record.warmup and (self.measured_from_s is None or record.scheduled_s < self.measured_from_s):
            self.measured_from_s = record.scheduled_s

    def admitted(self, request_id: str, t: float) -> RequestRecord | None:
        record = self.records[request_id]
        if record.admitted_s is not None:
            return None
        record.admitted_s = t
        return record

    def tokens(self, request_id: str, stamps: Sequence[float], counts: Sequence[int] | None,
               token_ids: Sequence[int] = (), logprobs: Sequence[float] = ()) -> tuple[RequestRecord, int] | None:
        """Arrivals at stamps, carrying counts tokens each (None: one each); the record and the index of its first
        new arrival."""
        record = self.records[request_id]
        if record.finished_s is not None or not stamps:
            return None
        start = len(record.arrival_s)
        record.arrival_s.extend(stamps)
        record.arrival_tokens.extend(counts if counts is not None else [1] * len(stamps))
        record.token_ids.extend(token_ids)
        record.logprobs.extend(logprobs)
        if not record.warmup:
            self.measured_tokens += sum(counts) if counts is not None else len(stamps)
        return record, start

    def prompt(self, request_id: str, n: int) -> tuple[RequestRecord, int]:
        """The prompt's length as a server counted it; the record and the change."""
        record = self.records[request_id]
        before, record.prompt_tokens = record.prompt_tokens, n
        return record, n - before

    def counted(self, request_id: str, counts: TokenCounts) -> RequestRecord:
        record = self.records[request_id]
        record.counts = counts
        return record

    def finished(self, request_id: str, t: float, error: str | None) -> RequestRecord | None:
        record = self.records[request_id]
        if record.finished_s is not None:  # the first end wins (a cancel can race the last token)
            return None
        record.error, record.finished_s = error, t
        self.ended += 1
        return record
