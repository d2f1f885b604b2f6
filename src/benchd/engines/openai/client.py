"""The openai engine's client process: one event loop (uvloop) that sends each request at its scheduled time (to
within tens of microseconds, openai_dispatch), stamps every read, and hands what it measured back in batches."""

from __future__ import annotations

import asyncio
import collections
import gc
import pickle
import socket
import ssl
import struct
import time
from dataclasses import dataclass
from typing import cast

import uvloop

from benchd import heap
from benchd.engines.openai.dispatch import Dispatcher
from benchd.engines.openai.http import Connection, Target
from benchd.engines.openai.stream import Stream, cut

ERROR_CHARS = 600  # a failed request's error as stored: its type, and the server's words cut (stream.DETAIL_CHARS)
LIVE_FLUSH_S = 0.02  # token stamps wait at most this long to be handed over
OPEN_LOOP_END_FLUSH_S = 0.005  # a request's end, in open loop: batched, fewer wake-ups of the engine's process
FRAME = struct.Struct("<I")


# ---- frames between the engine and its client processes: a length, then a pickled list of tuples ----------------


def send_frame(sock: socket.socket, items: list) -> None:
    data = pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(FRAME.pack(len(data)) + data)


class FrameReader:
    def __init__(self) -> None:
        self.buffer = b""

    def feed(self, data: bytes) -> list:
        """Every item of every complete frame in buffer + data."""
        buf, items, pos = self.buffer + data, [], 0
        while len(buf) - pos >= 4:
            (size,) = FRAME.unpack_from(buf, pos)
            if len(buf) - pos - 4 < size:
                break
            items.extend(pickle.loads(buf[pos + 4:pos + 4 + size]))
            pos += 4 + size
        self.buffer = buf[pos:]
        return items


# ---- the client ------------------------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class Request:
    request_id: str
    data: bytes
    stream: Stream
    connection: Connection | None = None
    sent_t: float = 0.0
    started_t: float = 0.0  # written on a connection
    head_t: float = 0.0  # the response's head was read
    last_t: float = 0.0  # the latest read
    finished: bool = False
    retried: bool = False


class Worker:
    """Commands in: ("r", id, at, bytes) a request to send at perf_counter() time `at`; ("c", id, reason);
    ("x",) stop. Events out: ("s", id, t) sent; ("a", id, t) answered; ("t", id, t, n) n tokens at t;
    ("f", id, t, error, stamps, texts, exact, prompt_tokens, completion_tokens, delivered, whole) the end, with the
    chunks whose counts waited for it (and the answer's whole text when config's keep_text: benchd counts it)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, config: dict) -> None:
        self.loop = loop
        self.target = Target(config["base_url"], config["path"], {})
        self.chat = config["chat"]
        self.keep_text = config.get("keep_text", False)
        self.max_connections = config["max_connections"]
        self.connect_timeout_s = config["connect_timeout_s"]
        self.head_timeout_s = config["head_timeout_s"]
        self.stall_timeout_s = config["stall_timeout_s"]
        self.request_timeout_s = config["request_timeout_s"]
        self.ssl = ssl.create_default_context() if self.target.tls else None
        self.requests: dict[str, Request] = {}
        self.idle: list[Connection] = []
        self.waiting: collections.deque[Request] = collections.deque()
        self.connections = 0  # open or opening
        self.out: list[tuple] = []
        self.flush_handle: asyncio.Handle | None = None
        self.flush_at = 0.0  # when the scheduled flush runs (loop time)
        # A closed loop schedules the next request at this one's end: ends go at once there.
        self.end_flush_s = 0.0 if config["closed_loop"] else OPEN_LOOP_END_FLUSH_S
        self.control: asyncio.Transport | None = None
        self.stopped = asyncio.Event()
        self.dispatcher = Dispatcher(loop, self.send, lambda request: request.finished)

    # ---- commands --------------------------------------------------------------------------------------------

    def command(self, item: tuple) -> None:
        kind = item[0]
        if kind == "r":
            _, request_id, at, data = item
            request = Request(request_id, data, Stream(self.chat, whole=[] if self.keep_text else None))
            self.requests[request_id] = request
            if at > time.perf_counter():
                self.dispatcher.at(at, request)
            else:
                self.send(request)
        elif kind == "c":
            self.cancel(item[1], item[2])
        elif kind == "x":
            for request_id in list(self.requests):
                self.cancel(request_id, "cancelled")
            self.flush()
            self.stopped.set()

    def send(self, request: Request) -> None:
        t = time.perf_counter()
        request.sent_t = request.last_t = t
        self.emit(("s", request.request_id, t), LIVE_FLUSH_S)
        if self.idle:
            self.idle.pop().start(request)
        else:
            self.waiting.append(request)
            if self.connections < self.max_connections:
                self.open()

    def cancel(self, request_id: str, reason: str) -> None:
        request = self.requests.get(request_id)
        if request is None:
            return
        connection = request.connection  # one still due is dropped by the dispatcher when its time comes
        self.fail(request, reason, time.perf_counter())
        if connection is not None:
            connection.close()

    # ---- connections -----------------------------------------------------------------------------------------

    def open(self) -> None:
        self.connections += 1
        self.loop.create_task(self._connect())

    async def _connect(self) -> None:
        target = self.target
        try:
            _, connection = await asyncio.wait_for(self.loop.create_connection(
                lambda: Connection(self), target.host, target.port, ssl=self.ssl,
                server_hostname=target.host if self.ssl else None), self.connect_timeout_s)
        except (OSError, TimeoutError) as error:
            self.connections -= 1
            if self.waiting:  # one failed attempt fails one request; the next waiting one tries again
                request = self.waiting.popleft()
                self.fail(request, f"connect_error: {type(error).__name__}: {error}", time.perf_counter())
                if self.waiting and self.connections < self.max_connections:
                    self.open()
            return
        assert connection.transport is not None  # create_connection made it (Connection.connection_made)
        connection.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.release(connection)

    def release(self, connection: Connection) -> None:
        while self.waiting:
            request = self.waiting.popleft()
            if not request.finished:
                connection.start(request)
                return
        self.idle.append(connection)

    def lost(self, connection: Connection, exc: Exception | None) -> None:
        self.connections -= 1
        if connection in self.idle:
            self.idle.remove(connection)
        request = connection.request
        connection.request = None
        if request is not None and not request.finished:
            request.connection = None
            if connection.reused and not connection.answered and not request.retried:
                # A kept-alive connection the server had closed: the request never reached it; once more, fresh.
                request.retried = True
                self.waiting.appendleft(request)
            else:
                detail = f"{type(exc).__name__}: {exc}" if exc is not None else "the server closed the connection"
                self.fail(request, f"disconnected: {detail}", time.perf_counter())
        if self.waiting and self.connections < self.max_connections:
            self.open()

    # ---- what a request's connection reports -----------------------------------------------------------------

    def admitted(self, request: Request, t: float) -> None:
        self.emit(("a", request.request_id, t), LIVE_FLUSH_S)

    def live(self, request: Request) -> None:
        live = request.stream.live
        for t, n in live:
            self.emit(("t", request.request_id, t, n), LIVE_FLUSH_S)
        live.clear()

    def complete(self, request: Request, t: float) -> None:
        self._finish(request, t, None)

    def fail(self, request: Request, error: str, t: float) -> None:
        if not request.finished:
            self._finish(request, t, error)

    def _finish(self, request: Request, t: float, error: str | None) -> None:
        request.finished = True
        self.requests.pop(request.request_id, None)
        if error is not None:
            error = cut(error, ERROR_CHARS)
        s = request.stream
        if s.live:
            self.live(request)
        self.emit(("f", request.request_id, t, error, s.pending_t, s.pending_text, s.pending_exact,
                   s.prompt_tokens, s.completion_tokens, s.delivered, None if s.whole is None else "".join(s.whole)),
                  self.end_flush_s)

    def check_timeouts(self) -> None:
        """Stalls, heads that do not come and overlong requests, found by a scan every few ms rather than a timer
        reset on every read."""
        now = time.perf_counter()
        for request in list(self.requests.values()):
            if request.sent_t == 0.0 or request.finished:
                continue
            if self.request_timeout_s is not None and now - request.sent_t > self.request_timeout_s:
                error = f"timeout: the request took over {self.request_timeout_s:g} s"
            elif request.connection is None:
                continue  # waiting for a connection: each attempt has connect_timeout_s
            elif now - request.last_t > self.stall_timeout_s:
                error = f"timeout: no data for {self.stall_timeout_s:g} s"
            elif not request.head_t and now - request.started_t > self.head_timeout_s:
                # bytes may keep coming (a head that never ends, interim answers): no stall, and still no answer
                error = f"timeout: no response head within {self.head_timeout_s:g} s"
            else:
                continue
            self.cancel(request.request_id, error)
        limits = [x for x in (self.stall_timeout_s, self.request_timeout_s, self.head_timeout_s) if x is not None]
        self.loop.call_later(min(max(min(limits) / 8, 0.005), 0.5), self.check_timeouts)

    # ---- events out ------------------------------------------------------------------------------------------

    def emit(self, event: tuple, within_s: float) -> None:
        """Queue an event to be handed over within within_s seconds (0: at the loop's next turn)."""
        self.out.append(event)
        at = self.loop.time() + within_s
        if self.flush_handle is None or at < self.flush_at:
            if self.flush_handle is not None:
                self.flush_handle.cancel()
            self.flush_at = at
            self.flush_handle = (self.loop.call_later(within_s, self.flush) if within_s
                                 else self.loop.call_soon(self.flush))

    def flush(self) -> None:
        self.flush_handle = None
        if self.out and self.control is not None:
            data = pickle.dumps(self.out, protocol=pickle.HIGHEST_PROTOCOL)
            self.control.write(FRAME.pack(len(data)) + data)
        self.out = []


class Control(asyncio.Protocol):
    """The engine's end of the socket pair: commands in, events out."""

    def __init__(self, worker: Worker) -> None:
        self.worker, self.reader = worker, FrameReader()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.worker.control = cast(asyncio.Transport, transport)  # a stream connection's

    def data_received(self, data: bytes) -> None:
        for item in self.reader.feed(data):
            self.worker.command(item)

    def connection_lost(self, exc: Exception | None) -> None:
        self.worker.control = None
        self.worker.stopped.set()  # the engine is gone: nobody to report to


async def _serve(sock: socket.socket, config: dict) -> None:
    loop = asyncio.get_running_loop()
    worker = Worker(loop, config)
    transport, _ = await loop.create_connection(lambda: Control(worker), sock=sock)
    transport.write(b"+")  # ready: the engine waits for this byte before it hands anything over
    worker.check_timeouts()
    await worker.stopped.wait()
    worker.dispatcher.close()
    for connection in list(worker.idle):
        connection.close()
    if worker.control is not None:
        worker.control.close()
    await asyncio.sleep(0)


def main(sock: socket.socket, config: dict) -> None:
    """The client process's entry point (spawned): runs until the engine says stop or goes away."""
    heap.settle()  # what start-up made never needs scanning; the hot path allocates few cycles
    gc.set_threshold(50_000, 50, 100)
    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(_serve(sock, config))
    finally:
        loop.close()



if __name__ == "__main__":  # python -m benchd.engines.openai.client FD CONFIG_JSON (started by OpenAIEngine)
    import json
    import sys

    main(socket.socket(fileno=int(sys.argv[1])), json.loads(sys.argv[2]))
