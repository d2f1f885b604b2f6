"""What a listener's connections may hold: a request head that does not arrive whole within the head timeout ends its
connection, and past the connection cap the oldest connection waiting for a head (a new one, or one kept alive
between requests) is closed for the newcomer, as nginx reuses kept-alive connections when it runs out: uvicorn's own
HTTP protocol with these two rules, passed as its `http` class (docs/guides/daemon.md, "Connections and probes")."""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from benchd.daemon.settings import Http

log = logging.getLogger("benchd.api.connections")

# Descriptors the daemon keeps for its own files, database connections, workers' pipes and sampler beside those of
# its listeners (measured: about 60 with a worker, a PostgreSQL pool and the OTLP exporter; kept with room to spare).
RESERVED_FDS = 256
DEFAULT_MAX = 4_096  # connections of the main port, at most, however high the descriptor limit


def descriptor_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def main_cap(limit: int, backlog: int, probe_room: int) -> int:
    """The main port's connections at most: below the descriptor limit by the daemon's own, its listen queue (a
    burst of accepts lands before the cap is applied) and the probe listener's whole room."""
    return max(16, min(DEFAULT_MAX, limit - RESERVED_FDS - backlog - probe_room))


def bounded(head_timeout_s: float, max_connections: int, name: str, access_log: bool = True) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol for one listener: its own waiting list, so that a flood of one listener never
    evicts another's connections. access_log=False: no access line for its requests (uvicorn's own switch clears
    the access logger's handlers, every listener's)."""
    waiting: dict[BoundedProtocol, None] = {}  # connections waiting for a head, oldest first

    class BoundedProtocol(HttpToolsProtocol):
        _head_timer: asyncio.TimerHandle | None = None

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.access_log = self.access_log and access_log

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._wait_for_head()
            if len(self.connections) > max_connections:
                oldest = next((c for c in waiting if c is not self), None)
                if oldest is not None:
                    oldest.transport.close()  # its connection_lost takes it off the lists
                else:  # every other connection is inside a request: this one waits for none
                    log.warning("%s: %d connections, every one inside a request: a new one is refused", name,
                                len(self.connections) - 1)
                    self.transport.write(_REFUSED)
                    self.transport.close()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._wait_for_head()

        def on_headers_complete(self) -> None:
            self._stop_waiting()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                waiting[self] = None  # kept alive between requests: the first to go for a newcomer

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_waiting()
            super().connection_lost(exc)

        def _wait_for_head(self) -> None:
            if self.cycle is None or self.cycle.response_complete:  # (not a pipelined request behind one running)
                waiting[self] = None
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(head_timeout_s, self._head_late)

        def _stop_waiting(self) -> None:
            waiting.pop(self, None)
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_late(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                self.transport.write(_LATE)
                self.transport.close()

    BoundedProtocol.__name__ = BoundedProtocol.__qualname__ = f"Bounded{name.title().replace(' ', '')}Protocol"
    return BoundedProtocol


def _answer(status: str, text: str) -> bytes:
    body = text.encode()
    return (f"HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode() + body


_LATE = _answer("408 Request Timeout", "the request head did not arrive in time (BENCHD_HTTP__HEAD_TIMEOUT_S)")
_REFUSED = _answer("503 Service Unavailable", "too many connections (BENCHD_HTTP__MAX_CONNECTIONS)")


def main_listener(http: Http) -> dict[str, Any]:
    """uvicorn.Config's arguments for the main port."""
    probe_room = http.probe_max_connections + http.backlog if http.probe_port is not None else 0
    cap = http.max_connections or main_cap(descriptor_limit(), http.backlog, probe_room)
    return {"http": bounded(http.head_timeout_s, cap, "main port"), "backlog": http.backlog}


def probe_listener(http: Http) -> dict[str, Any]:
    """uvicorn.Config's arguments for the probe port: no access line for each scrape and probe."""
    return {"http": bounded(http.head_timeout_s, http.probe_max_connections, "probe port", access_log=False),
            "backlog": http.backlog}
