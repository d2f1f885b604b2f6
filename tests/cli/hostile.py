"""A hostile HTTP server on a loopback port, written byte by byte: what it answers is a behaviour the test sets
(endless, dripping, silent, redirecting, compressed, lying), and it counts what it sent before the client went."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable

Behaviour = Callable[["Connection", str, str], None]  # (connection, method, path)


class Connection:
    def __init__(self, sock: socket.socket, server: HostileServer) -> None:
        self.sock, self.server = sock, server

    def send(self, data: bytes) -> bool:
        """False once the client has gone."""
        try:
            self.sock.sendall(data)
        except OSError:
            return False
        self.server.sent += len(data)
        return True

    def head(self, status: str = "200 OK", headers: dict[str, str] | None = None) -> bool:
        lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in (headers or {}).items())]
        return self.send(("\r\n".join(lines) + "\r\n\r\n").encode())

    def json(self, body: object, status: str = "200 OK") -> None:
        data = json.dumps(body).encode()
        self.head(status, {"Content-Type": "application/json", "Content-Length": str(len(data))})
        self.send(data)

    def closed(self) -> bool:
        return self.server.stopping.is_set()


class HostileServer:
    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.sent = 0
        self.requests: list[tuple[str, str]] = []
        self.stopping = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> HostileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() (a close alone does not)
        self.listener.close()
        self.thread.join(10)

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            sock.settimeout(30)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return
                    data += chunk
            except OSError:
                return
            method, path = data.split(b" ", 2)[:2]
            self.requests.append((method.decode(), path.decode()))
            self.behaviour(Connection(sock, self), method.decode(), path.decode())


# ---- behaviours ----------------------------------------------------------------------------------------------


def endless(conn: Connection, method: str, path: str) -> None:
    """A JSON answer that never ends: an array of ones, as fast as the client reads."""
    conn.head("200 OK", {"Content-Type": "application/json"})
    if conn.send(b"["):
        chunk = b"1," * 32768
        while not conn.closed() and conn.send(chunk):
            pass


def dripping(conn: Connection, method: str, path: str) -> None:
    """A byte every 0.2 s, for ever: every read gets something, so no read ever times out."""
    for byte in b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"items": [' + b" " * 10**6:
        if conn.closed() or not conn.send(bytes([byte])):
            return
        time.sleep(0.2)


def silent(conn: Connection, method: str, path: str) -> None:
    """Reads the request, answers nothing, holds the connection."""
    conn.server.stopping.wait(60)


def redirecting(conn: Connection, method: str, path: str) -> None:
    conn.head("307 Temporary Redirect", {"Location": f"{conn.server.url}{path}", "Content-Length": "0"})


def compressed(conn: Connection, method: str, path: str) -> None:
    import gzip

    data = gzip.compress(b"[" + b"1," * (8 << 20) + b"1]")  # 48 MiB of JSON in 50 kB
    conn.head("200 OK", {"Content-Type": "application/json", "Content-Encoding": "gzip",
                         "Content-Length": str(len(data))})
    conn.send(data)


def stream(events: bytes, then: Callable[[Connection], None] = lambda conn: conn.server.stopping.wait(60)):
    """A daemon that queues a run (POST /runs: 202) and streams `events` on its event stream, then does `then`."""

    def behaviour(conn: Connection, method: str, path: str) -> None:
        if method == "POST":
            conn.json({"id": "r1", "url": f"{conn.server.url}/runs/r1", "status": "queued"}, "202 Accepted")
        elif path.endswith("/events"):
            conn.head("200 OK", {"Content-Type": "text/event-stream"})
            conn.send(events)
            then(conn)
        else:
            conn.json({"detail": "no run r1"}, "404 Not Found")

    return behaviour
