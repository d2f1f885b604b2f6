"""HTTP/1.1 for the openai engine: request bytes made ahead of time, and a response parser on an asyncio Protocol
(chunked, Content-Length or close-delimited bodies, keep-alive), stamping each read as it arrives."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from benchd.engines.openai.stream import RequestFailed, Stream

if TYPE_CHECKING:
    from benchd.engines.openai.client import Request, Worker

ERROR_DETAIL_BYTES = 300

# Parser states
HEAD, CHUNK_SIZE, CHUNK_DATA, CHUNK_END, TRAILER, LENGTH, UNTIL_CLOSE, IDLE = range(8)


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
    """One keep-alive connection; carries one request at a time."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.transport: asyncio.Transport | None = None
        self.request: Request | None = None
        self.reused = False  # it carried a request before: a close before any answer may be the server's idle timeout
        self.answered = False
        self.keep_alive = True
        self.state = IDLE
        self.status = 0
        self.remaining = 0
        self.buffer = b""
        self.error_body = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def start(self, request: Request) -> None:
        self.request, request.connection = request, self
        self.state, self.answered, self.buffer, self.error_body = HEAD, False, b"", b""
        self.transport.write(request.data)

    def close(self) -> None:
        self.keep_alive = False
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.keep_alive = False
        self.worker.lost(self, exc)

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter()  # the read's arrival: every event in it arrived now
        request = self.request
        if request is None:
            return  # bytes with no request (a stray keep-alive byte): nothing to attribute them to
        request.last_t = t
        try:
            self._parse(self.buffer + data if self.buffer else data, t)
            if request.stream.live and not request.finished:  # once a read: its chunks are one arrival
                self.worker.live(request)
        except RequestFailed as failure:
            self.worker.fail(request, str(failure), t)
            self.close()
        except ValueError:  # a chunk size or header that is not HTTP
            self.worker.fail(request, f"client_error: malformed HTTP response: {data[:100]!r}", t)
            self.close()

    def _parse(self, buf: bytes, t: float) -> None:
        pos, end = 0, len(buf)
        self.buffer = b""
        while pos < end or self.state == TRAILER:
            state = self.state
            if state == CHUNK_SIZE:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                size = int(buf[pos:eol].split(b";", 1)[0], 16)
                pos = eol + 2
                if size:
                    self.state, self.remaining = CHUNK_DATA, size
                else:
                    self.state = TRAILER
            elif state == CHUNK_DATA:
                take = min(self.remaining, end - pos)
                self._body(buf[pos:pos + take], t)
                pos += take
                self.remaining -= take
                if not self.remaining:
                    self.state = CHUNK_END
            elif state == CHUNK_END:
                if end - pos < 2:
                    break
                pos += 2
                self.state = CHUNK_SIZE
            elif state == TRAILER:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                if eol == pos:
                    pos += 2
                    self._end_of_body(t)
                else:
                    pos = eol + 2  # a trailer field
            elif state == LENGTH:
                take = min(self.remaining, end - pos)
                self._body(buf[pos:pos + take], t)
                pos += take
                self.remaining -= take
                if not self.remaining:
                    self._end_of_body(t)
            elif state == UNTIL_CLOSE:
                self._body(buf[pos:], t)
                pos = end
            elif state == HEAD:
                eol = buf.find(b"\r\n\r\n", pos)
                if eol < 0:
                    break
                self._head(buf[pos:eol], t)
                pos = eol + 4
            else:  # IDLE: nothing is expected
                return
            if self.request is None:
                return
        self.buffer = buf[pos:] if pos < end else b""

    def _head(self, head: bytes, t: float) -> None:
        lines = head.decode("latin-1").split("\r\n")
        version, status = lines[0].split(" ", 2)[:2]
        self.status = int(status)
        if 100 <= self.status < 200:
            return  # an interim answer: the real head follows
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip().lower()
        self.answered = True
        if version == "HTTP/1.0" or "close" in headers.get("connection", ""):
            self.keep_alive = False
        if "chunked" in headers.get("transfer-encoding", ""):
            self.state = CHUNK_SIZE
        elif "content-length" in headers:
            self.remaining = int(headers["content-length"])
            self.state = LENGTH
            if not self.remaining:
                self._end_of_body(t)
        else:
            self.state, self.keep_alive = UNTIL_CLOSE, False
        if self.status < 400 and self.request is not None:
            self.worker.admitted(self.request, t)  # the server answered: it took the request

    def _body(self, data: bytes, t: float) -> None:
        request = self.request
        if request is None or request.finished:
            return  # what follows [DONE], or the rest of a failed request's body
        if self.status >= 400:
            self.error_body = (self.error_body + data)[:ERROR_DETAIL_BYTES]
            return
        stream: Stream = request.stream
        stream.feed(data, t)
        if stream.done:
            self.worker.complete(request, t)

    def _end_of_body(self, t: float) -> None:
        request, self.state = self.request, IDLE
        if request is not None and not request.finished:
            if self.status >= 400:
                detail = self.error_body.decode(errors="replace").strip()
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
        if self.state == UNTIL_CLOSE and self.request is not None:
            self._end_of_body(time.perf_counter())
        return None
