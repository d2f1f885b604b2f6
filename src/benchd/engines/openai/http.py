"""HTTP/1.1 for the openai engine: request bytes made ahead of time, and responses read on an asyncio Protocol through
httptools (llhttp), stamping each read as it arrives; whatever a server sends, what a response may hold is bounded.

Why httptools: llhttp is Node.js's parser, strict where a server is not (a negative, overlong or non-hex chunk size, a
bad status line, a Content-Length beside chunked), written in C and kept by the same people as uvloop; benchd already
depends on it (the daemon's uvicorn parses with it). Per read it costs about 0.4 µs and one Python call a body piece,
less than the hand-written parser it replaced, whose `int(b"-6", 16)` once moved its read position backwards and
spun forever (issue 45). h11 is as strict but pure Python: an event object and a regular expression per chunk, several
microseconds each, at the hundreds of thousands of chunks a second an open loop reads. llhttp bounds neither the head
nor the body (Node does that itself), so the bounds below are ours: docs/guides/openai.md#what-a-server-can-do."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import httptools
import orjson

from benchd.engines.openai.stream import DETAIL_CHARS, RequestFailed, Stream, cut

if TYPE_CHECKING:
    from benchd.engines.openai.client import Request, Worker

HEAD_MAX_BYTES = 64 << 10  # a response's head, its interim (1xx) heads included: servers send well under 2 KiB
INTERIM_MAX = 8  # interim (1xx) answers before the response: 100 Continue, 103 Early Hints, once each in practice
BODY_MAX_BYTES = 64 << 20  # a response's body: 8,192 tokens with 20 logprobs each come to about 6 MB in vLLM's SSE


class Target:
    """Where requests go and what every request carries: the head is made once, each body when it is submitted."""

    def __init__(self, base_url: str, path: str, headers: dict[str, str]) -> None:
        url = urlsplit(base_url.rstrip("/") + "/" + path)
        self.tls = url.scheme == "https"
        self.host = url.hostname or "127.0.0.1"
        self.port = url.port or (443 if self.tls else 80)
        self.path = url.path
        fixed = {"Host": url.netloc, "Content-Type": "application/json", "Accept": "text/event-stream", **headers}
        self._head = (f"POST {self.path} HTTP/1.1\r\n"
                      + "".join(f"{k}: {v}\r\n" for k, v in fixed.items())).encode("latin-1")

    def request(self, body: dict[str, Any], traceparent: str | None = None) -> bytes:
        data = orjson.dumps(body)
        extra = f"traceparent: {traceparent}\r\n" if traceparent else ""
        return self._head + f"{extra}Content-Length: {len(data)}\r\n\r\n".encode() + data


class Connection(asyncio.Protocol):
    """One keep-alive connection; carries one request at a time. httptools calls the on_* methods from feed_data."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.request: Request | None = None
        self.reused = False  # it carried a request before: a close before any answer may be the server's idle timeout
        self.answered = False  # the response's own head (not an interim one) has been read
        self.keep_alive = True
        self.status = 0
        self.framed = False  # the head gave a Content-Length or chunked: the body does not end at the close
        self.head_bytes = 0  # read while the response's head was incomplete
        self.body_bytes = 0
        self.interim = 0
        self.error_body = b""
        self.t = 0.0  # the current read's arrival

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream connection's (create_connection)

    def start(self, request: Request) -> None:
        self.request, request.connection = request, self
        request.started_t = time.perf_counter()
        self.answered, self.error_body = False, b""
        self.head_bytes = self.body_bytes = self.interim = 0
        assert self.transport is not None  # started once connected (engines/openai/client.py, Client.release)
        self.transport.write(request.data)

    def close(self) -> None:
        self.keep_alive = False
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.keep_alive = False
        self.worker.lost(self, exc)

    def data_received(self, data: bytes) -> None:
        self.t = t = time.perf_counter()  # the read's arrival: every event in it arrived now
        request = self.request
        if request is None:
            self.close()  # bytes nobody asked for: what follows on this connection cannot be trusted
            return
        request.last_t = t
        if not self.answered:
            self.head_bytes += len(data)
        try:
            self.parser.feed_data(data)
            if not self.answered and self.head_bytes > HEAD_MAX_BYTES:
                raise RequestFailed(f"client_error: the response head is over {HEAD_MAX_BYTES >> 10} KiB")
        except httptools.HttpParserCallbackError as error:  # what a callback below raised
            if not isinstance(error.__context__, RequestFailed):
                raise
            self._fail(str(error.__context__))
        except RequestFailed as failure:
            self._fail(str(failure))
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as error:  # not HTTP: a chunk size, a
            # status line, framing; or a switch to another protocol (101), which no completion asks for
            self._fail(f"client_error: malformed HTTP response ({error or type(error).__name__}): {data[:100]!r}")
        else:
            if request.stream.live and not request.finished:  # once a read: its chunks are one arrival
                self.worker.live(request)

    def _fail(self, error: str) -> None:
        if self.request is not None:
            self.worker.fail(self.request, error, self.t)
        self.close()

    # ---- httptools' callbacks ---------------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.framed = False

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-length" or (name == b"transfer-encoding" and b"chunked" in value.lower()):
            self.framed = True

    def on_headers_complete(self) -> None:
        self.status = status = self.parser.get_status_code()
        if status < 200:  # an interim answer: the response's own head follows
            self.interim += 1
            if self.interim > INTERIM_MAX:
                raise RequestFailed(f"client_error: more than {INTERIM_MAX} interim (1xx) answers")
            return
        self.answered = True
        if self.request is not None:
            self.request.head_t = self.t
            if status < 400:
                self.worker.admitted(self.request, self.t)  # the server answered: it took the request

    def on_body(self, data: bytes) -> None:
        request = self.request
        if request is None or request.finished:
            return  # what follows [DONE], or the rest of a failed request's body
        self.body_bytes += len(data)
        if self.body_bytes > BODY_MAX_BYTES:
            raise RequestFailed(f"client_error: the response body is over {BODY_MAX_BYTES >> 20} MiB")
        if self.status >= 400:
            self.error_body = (self.error_body + data)[:DETAIL_CHARS + 1]  # one more: cut() marks the cut
            return
        stream: Stream = request.stream
        stream.feed(data, self.t)
        if stream.done:
            self.worker.complete(request, self.t)

    def on_message_complete(self) -> None:
        if self.status < 200:
            return  # an interim answer's end
        self.keep_alive = self.keep_alive and self.parser.should_keep_alive()
        self._end_of_body()

    def _end_of_body(self) -> None:
        request, t = self.request, self.t
        if request is not None and not request.finished:
            if self.status >= 400:
                detail = cut(self.error_body.decode(errors="replace").strip())
                self.worker.fail(request, f"http_{self.status}: {detail}", t)
            elif request.stream.complete:
                self.worker.complete(request, t)
            else:
                self.worker.fail(request, "incomplete: the stream ended without a finish_reason or [DONE]", t)
        self.request = None
        if request is not None:
            request.connection = None
        self.reused = True
        if self.keep_alive:
            self.worker.release(self)
        else:
            self.close()

    def eof_received(self) -> bool | None:
        # A body with neither a length nor chunks ends when the server closes (HTTP/1.0 style).
        if self.request is not None and self.answered and not self.framed and self.status not in (204, 304):
            self.t = time.perf_counter()
            self.keep_alive = False
            self._end_of_body()
        return None
