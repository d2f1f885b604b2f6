"""Per-run event streams: published from the engine thread, read by server-sent-event responses, with a heartbeat
through every silence."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

# A comment line on an event stream (ignored by every SSE client) at least this often: a client that hears nothing
# for a few of them knows the daemon, or something between, is stuck, and not that a run is long (the CLI waits 60 s,
# cli/client.py); it also keeps proxies from closing an idle stream.
HEARTBEAT_S = 15.0
HEARTBEAT = ": heartbeat\n\n"


@dataclass(slots=True, frozen=True)
class RunEvent:
    kind: str  # status | progress | summary
    data: dict[str, Any]
    final: bool = False

    def sse(self) -> str:
        return f"event: {self.kind}\ndata: {json.dumps(self.data)}\n\n"


class RunEvents:
    """Subscribers get the run's last event at once, then each new one; a final event ends the stream."""

    def __init__(self, heartbeat_s: float = HEARTBEAT_S) -> None:
        self.heartbeat_s = heartbeat_s
        self._lock = threading.Lock()
        self._subscribers: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Queue[RunEvent]]]] = {}
        self._last: dict[str, RunEvent] = {}

    def publish(self, run_id: str, event: RunEvent) -> None:
        """Thread-safe; never blocks the publisher."""
        with self._lock:
            if event.final:
                self._last.pop(run_id, None)
                subscribers = self._subscribers.pop(run_id, [])
            else:
                self._last[run_id] = event
                subscribers = list(self._subscribers.get(run_id, []))
        for loop, queue in subscribers:
            loop.call_soon_threadsafe(queue.put_nowait, event)

    def subscribe(self, run_id: str) -> asyncio.Queue[RunEvent]:
        """Call on the event loop; the caller must unsubscribe when its client goes away."""
        queue: asyncio.Queue[RunEvent] = asyncio.Queue()
        with self._lock:
            self._subscribers.setdefault(run_id, []).append((asyncio.get_running_loop(), queue))
            last = self._last.get(run_id)
        if last is not None:
            queue.put_nowait(last)
        return queue

    def unsubscribe(self, run_id: str, queue: asyncio.Queue[RunEvent]) -> None:
        with self._lock:
            subscribers = self._subscribers.get(run_id, [])
            self._subscribers[run_id] = [(loop, q) for loop, q in subscribers if q is not queue]
            if not self._subscribers[run_id]:
                del self._subscribers[run_id]

    async def stream(self, run_id: str, ended: Callable[[], Awaitable[RunEvent | None]]) -> AsyncIterator[str]:
        """The run's events as server-sent events, a heartbeat first and through every silence, until its final
        one. ended: the final event of a run that has ended already (None while it runs), asked once subscribed,
        so that a run that ends meanwhile still delivers its summary (the store is written before it is
        published)."""
        queue = self.subscribe(run_id)
        try:
            yield HEARTBEAT
            if (final := await ended()) is not None:
                yield final.sse()
                return
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), self.heartbeat_s)
                except TimeoutError:
                    yield HEARTBEAT
                    continue
                yield event.sse()
                if event.final:
                    return
        finally:
            self.unsubscribe(run_id, queue)
