"""The openai client against servers that attack it (issue 45), each a small loopback server of raw sockets: a
negative chunk size, a head or a line that never ends, endless interim answers (to a request, and to the server
check before a run), a body past its bound, a 5 MB error. Each request fails at once with what the server did, the
run ends in seconds, the client processes go idle after it, and the next run on the same warm engine works."""

import socket
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from benchd.daemon.inprocess import LocalPool
from benchd.daemon.inprocess import run_local as run
from benchd.engines.openai.http import BODY_MAX_BYTES, HEAD_MAX_BYTES, INTERIM_MAX
from benchd.spec import parse_spec
from benchd.stopping import StopSignal
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.timeout(120)

SAFETY_S = 12.0  # a run still going after this is stopped (on the parser before issue 45, these runs never ended)
# Each answer closes its connection: a kept one would carry the next request to a server that no longer reads.
CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
           b"Connection: close\r\n\r\n")
MODELS = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"data":[]}'


class Hostile:
    """A loopback server: GET /models answered by `models` (bytes once, or a callable writing until the client
    leaves), every POST by `post`; then the connection is held until the client closes it."""

    def __init__(self, post, models=MODELS) -> None:
        self.post, self.models = post, models
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.posts = 0
        self.closed = threading.Event()  # the client closed a connection the server held
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "Hostile":
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536) or self._gone()
                head, _, body = data.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(body) < length:
                    body += conn.recv(65536) or self._gone()
                answer = self.models if head.startswith(b"GET") else self.post
                if head.startswith(b"POST"):
                    self.posts += 1
                if callable(answer):
                    answer(conn)
                else:
                    conn.sendall(answer)
                while conn.recv(65536):  # held: the client must give up on its own
                    pass
                self.closed.set()
            except OSError:
                self.closed.set()

    def _gone(self):
        raise OSError("the client left")


def endless(first: bytes, repeated: bytes):
    """A writer: first, then repeated until the client goes."""

    def write(conn: socket.socket) -> None:
        conn.sendall(first)
        while True:
            conn.sendall(repeated)

    return write


PROMPTS = Path(tempfile.mkdtemp(prefix="benchd-hostile-")) / "prompts.jsonl"
PROMPTS.write_text('{"prompt": "a prompt"}\n')


def spec(base_url, requests=2, **openai):
    return parse_spec({"name": "hostile", "engine": "openai", "model": "ok",
                       "workload": {"arrivals": {"profile": "concurrent", "concurrency": 2},
                                    "stop": {"requests": requests}, "output_tokens": {"dist": "fixed", "value": 4},
                                    "dataset": {"format": "jsonl", "path": str(PROMPTS)}},
                       "openai": {"base_url": base_url, **openai}})


def attacked(server, pool=None, **openai):
    """The run against the server, stopped after SAFETY_S if it is still going; (outcome, seconds)."""
    stop = StopSignal()
    timer = threading.Timer(SAFETY_S, stop.set, ["cancelled"])
    timer.start()
    started = time.monotonic()
    try:
        outcome = run(spec(server.base_url, **openai), stop=stop, pool=pool)
    finally:
        timer.cancel()
    return outcome, time.monotonic() - started


def errors(outcome) -> list[str]:
    return [r.error for r in sorted(outcome.stages[0].records, key=lambda r: r.index)]


def clients() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True)
            if "benchd.engines.openai.client" in " ".join(p.cmdline())]


def busy_s(processes, over_s: float = 1.0) -> float:
    """CPU seconds the processes use over over_s."""
    before = sum(sum(p.cpu_times()[:2]) for p in processes)
    time.sleep(over_s)
    return sum(sum(p.cpu_times()[:2]) for p in processes) - before


@pytest.fixture
def pool():
    pool = LocalPool()
    yield pool
    pool.stop()


def test_a_negative_chunk_size_fails_the_request_and_the_warm_client_goes_on(pool):
    # The report's server: a chunk of size -6, then the connection held. The parser before issue 45 read the size
    # line again forever at 100 % CPU; the stall never fired, nor did a cancel.
    with OpenAIServer(delay_s=0.001) as good:
        negative = CHUNKED + b"-6\r\nabcdefgh\r\n"
        with Hostile(negative) as server:
            outcome, took = attacked(server, pool)
            # ended by its own error, not by the safety stop (a loaded machine's engine start took it past 8 s once)
            assert took < SAFETY_S - 2, took
            assert all(e.startswith("client_error: malformed HTTP response") for e in errors(outcome)), errors(outcome)
            assert server.closed.wait(5)  # the client let the held connection go
            spinning = clients()
            assert spinning and busy_s(spinning) < 0.3  # warm and idle: nothing left reading
        # The same warm engine (its client processes kept) measures the next run.
        ok = run(spec(good.base_url), pool=pool)
        assert ok.status == "succeeded" and errors(ok) == [None, None]


@pytest.mark.parametrize("attack, error", [
    (endless(b"HTTP/1.1 200 OK\r\nX-Endless: ", b"a" * 65536),
     f"client_error: the response head is over {HEAD_MAX_BYTES >> 10} KiB"),
    (endless(b"", b"HTTP/1.1 100 Continue\r\n\r\n" * 64),
     f"client_error: more than {INTERIM_MAX} interim (1xx) answers"),
    (endless(CHUNKED, b"10000\r\n" + b"data: " + b"a" * (65536 - 6) + b"\r\n"),
     "malformed_chunk: a line over 1 MiB with no end"),
    (endless(CHUNKED, b"10000\r\n" + b":" + b"a" * 65534 + b"\n" + b"\r\n"),
     f"client_error: the response body is over {BODY_MAX_BYTES >> 20} MiB"),
], ids=["endless-head", "endless-100-continue", "endless-line", "endless-body"])
def test_what_never_ends_is_cut_at_its_bound(attack, error):
    # Bytes keep coming, so no stall fires: before issue 45 each grew a buffer (256 MB of head in 45 s) until the
    # run's deadline.
    with Hostile(attack) as server:
        outcome, took = attacked(server)
    assert took < SAFETY_S - 2, took
    assert all(e is not None and e.startswith(error) for e in errors(outcome)), errors(outcome)


def test_a_head_dripped_slower_than_a_stall_times_out_by_default():
    def drip(conn):
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        while True:
            conn.sendall(b"X: y\r\n")
            time.sleep(0.2)

    with Hostile(drip) as server:
        outcome, took = attacked(server, head_timeout_s=1.5)
    assert took < SAFETY_S - 2 and errors(outcome) == ["timeout: no response head within 1.5 s"] * 2


def test_the_server_check_has_a_deadline_whatever_the_server_answers():
    # Endless 100 Continue to GET /models: urllib skipped them forever, holding the run (and a DELETE of it) until
    # the worker was killed.
    checked = {}

    def go():
        checked["outcome"] = run(spec(server.base_url, connect_timeout_s=2))

    with Hostile(CHUNKED, models=endless(b"", b"HTTP/1.1 100 Continue\r\n\r\n")) as server:
        thread = threading.Thread(target=go, daemon=True)
        started = time.monotonic()
        thread.start()
        thread.join(SAFETY_S)
        assert not thread.is_alive(), "the server check never ended"
    outcome = checked["outcome"]
    assert time.monotonic() - started < 8
    assert outcome.status == "failed" and "no answer within 2 s (openai.connect_timeout_s)" in outcome.error


def test_a_large_error_is_cut_as_an_error_body_is():
    message = b"x" * (900 << 10)  # under the line's bound (a 5 MB event is a line over it: malformed_chunk, cut too)
    event = b'data: {"error": {"message": "' + message + b'"}}\n\n'
    with Hostile(CHUNKED + f"{len(event):x}\r\n".encode() + event + b"\r\n0\r\n\r\n") as server:
        outcome, _ = attacked(server)
    for error in errors(outcome):
        assert error.startswith("server_error: xxx") and error.endswith("…") and len(error) < 400, error[:100]
    body = b"y" * (5 << 20)
    with Hostile(b"HTTP/1.1 500 Oops\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body) as server:
        outcome, _ = attacked(server)
    assert all(e.startswith("http_500: yyy") and len(e) < 400 for e in errors(outcome)), errors(outcome)


def test_idle_client_processes_end_and_start_again_for_the_next_run(pool):
    with OpenAIServer(delay_s=0.001) as good:
        assert run(spec(good.base_url), pool=pool).status == "succeeded"
        engine = pool.core._engine
        assert len(clients()) == 1
        engine.idle_s = 0.4
        deadline = time.monotonic() + 10
        while clients() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert clients() == []  # ended while the warm engine waits
        assert run(spec(good.base_url), pool=pool).status == "succeeded"
        assert pool.core._engine is engine  # the same engine, its clients started again
