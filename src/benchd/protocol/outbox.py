"""A run's events on their way to the daemon: appended by whichever worker thread made them, sent in batches."""

from __future__ import annotations

from collections import deque

from benchd.protocol.events import DISPATCH, AnyEvent


class Outbox:
    """deque.append and popleft are atomic: engine threads append without a lock while the sender drains."""

    def __init__(self) -> None:
        self._events: deque[AnyEvent] = deque()
        self.progress = 0  # events that show the run advancing (tokens, ends, stages): watched by the daemon

    def put(self, event: AnyEvent) -> None:
        self._events.append(event)
        if type(event) not in DISPATCH:
            self.progress += 1

    def drain(self) -> list[AnyEvent]:
        out = []
        pop = self._events.popleft
        while True:
            try:
                out.append(pop())
            except IndexError:
                return out
