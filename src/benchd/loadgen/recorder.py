"""A stage's TokenSink: each engine event changes the stage's records and is passed on to the daemon as it came."""

from __future__ import annotations

import queue
from collections.abc import Sequence

from benchd.measure.records import RecordBook, RequestRecord, TokenCounts
from benchd.protocol import events
from benchd.protocol.outbox import Outbox


class Recorder:
    """The TokenSink of one stage (engine threads: keep it cheap): each engine event changes the stage's records and
    is passed on as it came."""

    def __init__(self, outbox: Outbox) -> None:
        self.book = RecordBook()
        self.outbox = outbox
        self.completions: queue.SimpleQueue[RequestRecord] = queue.SimpleQueue()
        self.finished_count = 0  # requests ended so far (written by the engine's one sink thread)

    @property
    def records(self) -> dict[str, RequestRecord]:
        return self.book.records

    def admitted(self, request_id: str, t: float) -> None:
        if self.book.admitted(request_id, t) is not None:
            self.outbox.put(events.Admitted(request_id, t))

    def tokens(self, request_id: str, t: float, n: int, token_ids: Sequence[int] = (),
               logprobs: Sequence[float] = ()) -> None:
        if self.book.tokens(request_id, (t,), (n,), token_ids, logprobs) is not None:
            self.outbox.put(events.Tokens(request_id, arrival_s=(t,), arrival_tokens=(n,),
                                          token_ids=tuple(token_ids), logprobs=tuple(logprobs)))

    def stamped_tokens(self, request_id: str, stamps: Sequence[float], token_ids: Sequence[int],
                       logprobs: Sequence[float] = ()) -> None:
        """One token per stamp, passed on in a batch: the per-call costs once, not once per token."""
        if self.book.tokens(request_id, stamps, None, token_ids, logprobs) is not None:
            self.outbox.put(events.Tokens(request_id, arrival_s=tuple(stamps), arrival_tokens=None,
                                          token_ids=tuple(token_ids), logprobs=tuple(logprobs)))

    def submitted(self, request_id: str, t: float) -> None:
        """From engines that send at the scheduled time themselves (the stage handed the request over early)."""
        self.book.submitted(request_id, t)
        self.outbox.put(events.Submitted(request_id, t))

    def prompt_tokens(self, request_id: str, n: int) -> None:
        """The prompt's length as the server counted it (a chat template included)."""
        self.book.prompt(request_id, n)
        self.outbox.put(events.Prompt(request_id, n))

    def counted(self, request_id: str, counts: TokenCounts) -> None:
        """A server's request's tokens, by its usage and by benchd's count of the text."""
        self.book.counted(request_id, counts)
        self.outbox.put(events.Counted(request_id, *counts.as_tuple()))

    def finished(self, request_id: str, t: float, error: str | None = None) -> None:
        record = self.book.finished(request_id, t, error)
        if record is not None:
            self.outbox.put(events.Finished(request_id, t, error))
            self.finished_count += 1
            self.completions.put(record)
