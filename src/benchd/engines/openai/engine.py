"""Any OpenAI-compatible server: streaming /v1/completions or /v1/chat/completions from client processes of its own.

Requests are handed over ahead of time and each is sent at its scheduled time by one of `client_processes` client
loops (openai_worker), round robin: the dispatch lag is the loop's own lateness, measured when the request leaves.
Each read of a response is stamped as it arrives. The client processes hand their stamps back in batches; this
process, on a thread of its own, turns them into sink events and counts the tokens the server did not: ITL is per
token, and a chunk's count comes, in order of preference, from a running usage count on the chunk (vLLM's
continuous_usage_stats), the server's token ids, its logprobs, or else from the text (the tokenizer's count, or the
characters) scaled so that the request's total equals the final usage count."""

from __future__ import annotations

import http.client
import json
import math
import os
import selectors
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from benchd.engines.base import EngineFailure, EngineLoad, GenerationRequest, TokenSink
from benchd.engines.openai.client import FrameReader, send_frame
from benchd.engines.openai.counts import apportion, chunk_counts
from benchd.engines.openai.http import Target
from benchd.engines.openai.spec import OpenAIOptions, OpenAISpec
from benchd.measure.records import TokenCounts
from benchd.models.texts import encode, has_chat_template
from benchd.spec import Concurrent, Synchronous, Workload

__all__ = ["OpenAIEngine", "apportion", "connections_for", "create"]

# Requests are handed to the client processes this early: a pause of the dispatching process (a full garbage
# collection over torch's and transformers' objects took ~250 ms at 800 requests/s) must not delay a send.
DISPATCH_LEAD_S = 1.0
OPEN_LOOP_CONNECTIONS = 1024
WORKER_START_TIMEOUT_S = 60.0
# Client processes with no request for this long are ended (each an interpreter: engines/openai/spec.py's
# CLIENT_PROCESS_BYTES); the next run starts them again at its start, before its first request.
CLIENT_IDLE_S = 60.0
CLIENT_STOP_S = 5.0  # a client process told to stop exits within this, or is killed


def connections_for(workload: Workload) -> int:
    """The highest concurrency of a closed-loop workload, or OPEN_LOOP_CONNECTIONS when any stage is open."""
    stages = workload.stages()
    if all(isinstance(s, Concurrent | Synchronous) for s in stages):
        return max(s.concurrency if isinstance(s, Concurrent) else 1 for s in stages)
    return OPEN_LOOP_CONNECTIONS


@dataclass(slots=True)
class _Client:
    """One client process and the engine's end of its socket pair."""

    process: subprocess.Popen
    sock: socket.socket
    lock: threading.Lock
    reader: FrameReader
    requests: set[str]  # handed to it and not finished


class OpenAIEngine:
    name = "openai"
    dispatch_lead_s = DISPATCH_LEAD_S
    handoff = None
    steps = None  # the server's steps are its own
    attention = None  # and its attention

    def __init__(self, options: OpenAIOptions, workload: Workload, model: str) -> None:
        self.options = options
        self.model = options.model or model
        self.processes = options.client_processes
        self.closed_loop = connections_for(workload) != OPEN_LOOP_CONNECTIONS
        # Open loop: 1,024 connections a client process, so that more processes hold a higher rate.
        self.max_connections = options.max_connections or (
            connections_for(workload) if self.closed_loop else OPEN_LOOP_CONNECTIONS * self.processes)
        self.path = "completions" if options.api == "completions" else "chat/completions"
        self._tokenizer = None
        self._target: Target | None = None
        self._clients: list[_Client] = []
        self._sinks: dict[str, tuple[TokenSink, _Client]] = {}
        self._prompts: dict[str, str] = {}  # with a tokenizer: each request's prompt, until its end
        self._unsent: dict[str, float] = {}  # handed over, not sent yet: its scheduled time
        self._next = 0
        self._receiver: threading.Thread | None = None
        self._alive = False
        self._headers: dict[str, str] = {}
        self._lock = threading.Lock()  # the client processes: started, used, ended when idle
        self._last_used = time.monotonic()
        self.idle_s = CLIENT_IDLE_S
        self._stopped = threading.Event()  # the engine stopped: the idle watch ends
        self._watcher: threading.Thread | None = None

    # ---- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        if self.options.tokenizer is not None:
            from benchd.models.tokenizer import load_tokenizer

            self._tokenizer = load_tokenizer(self.options.tokenizer)
        headers = {}
        if self.options.api_key_env is not None and (key := os.environ.get(self.options.api_key_env)):
            headers["Authorization"] = f"Bearer {key}"
        self._headers = headers
        self._target = Target(self.options.base_url, self.path, headers)
        with self._lock:
            self._start_clients()
        self._watcher = threading.Thread(target=self._watch_idle, name="benchd-openai-idle", daemon=True)
        self._watcher.start()

    def _start_clients(self) -> None:
        """The server check, then the client processes and the thread that reads them (under the lock)."""
        check_server(self.options.base_url, self._headers, self.options.connect_timeout_s)
        try:
            for _ in range(self.processes):
                self._clients.append(self._spawn())
        except BaseException:
            self._end_clients()
            raise
        self._receiver = threading.Thread(target=self._receive, name="benchd-openai-records", daemon=True)
        self._receiver.start()
        self._alive = True
        self._last_used = time.monotonic()

    def _spawn(self) -> _Client:
        """A fresh interpreter (nothing forked from this process) running openai_worker on one end of a socket
        pair; it exits when told to, or when this end closes."""
        ours, theirs = socket.socketpair()
        config = {"base_url": self.options.base_url, "path": self.path, "chat": self.options.api == "chat",
                  "closed_loop": self.closed_loop, "keep_text": self._tokenizer is not None,
                  "max_connections": math.ceil(self.max_connections / self.processes),
                  "connect_timeout_s": self.options.connect_timeout_s,
                  "head_timeout_s": self.options.head_timeout_s,
                  "stall_timeout_s": self.options.stall_timeout_s,
                  "request_timeout_s": self.options.request_timeout_s}
        src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
        process = subprocess.Popen(
            [sys.executable, "-m", "benchd.engines.openai.client", str(theirs.fileno()), json.dumps(config)],
            pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL)
        theirs.close()
        ours.settimeout(WORKER_START_TIMEOUT_S)
        try:
            if ours.recv(1) != b"+":  # the worker's loop is up
                raise RuntimeError(f"openai client process exited at start (status {process.wait(10)})")
        except TimeoutError:
            process.kill()
            raise RuntimeError("openai client process did not start within "
                               f"{WORKER_START_TIMEOUT_S:g} s") from None
        ours.settimeout(None)
        return _Client(process, ours, threading.Lock(), FrameReader(), set())

    def forget(self) -> None:
        """What the server caches is its own (vLLM's prefix cache lasts across runs: reset it there, or vary the
        workload's seed, when that matters). A run starts here: client processes ended while idle start again."""
        with self._lock:
            self._last_used = time.monotonic()
            if not self._clients:
                self._start_clients()

    def _watch_idle(self) -> None:
        """Ends the client processes once no request has been out for idle_s (a warm engine may wait long for its
        next run)."""
        while not self._stopped.wait(min(self.idle_s / 4, 5.0)):
            with self._lock:
                if self._clients and not self._sinks and time.monotonic() - self._last_used > self.idle_s:
                    self._end_clients()

    def alive(self) -> bool:
        if not self._clients:  # ended while idle (or never started): forget() starts them again
            return self._target is not None and not self._stopped.is_set()
        return (self._alive and self._receiver is not None and self._receiver.is_alive()
                and all(c.process.poll() is None for c in self._clients))

    def failure(self) -> EngineFailure | None:
        """A client process that died: what its exit code says (the server's own failures are its requests')."""
        dead = [c.process.returncode for c in self._clients if c.process.poll() is not None]
        return EngineFailure(f"a client process exited with code {dead[0]}") if self._alive and dead else None

    def stop(self) -> None:
        """Every request still out ends as cancelled; the client processes exit and are waited for."""
        self._stopped.set()
        with self._lock:
            self._end_clients()

    def _end_clients(self) -> None:
        """Each client process cancels what it has out, reports it and exits; one that has not within
        CLIENT_STOP_S is killed (its requests end as the client's error)."""
        self._alive = False
        for client in self._clients:
            try:
                with client.lock:
                    send_frame(client.sock, [("x",)])
            except OSError:
                pass
        deadline = time.monotonic() + CLIENT_STOP_S
        for client in self._clients:
            try:
                client.process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                client.process.kill()
                client.process.wait(10)
        if self._receiver is not None:
            self._receiver.join(30)  # each client's socket is at its end now: what they said is read
        for client in self._clients:
            client.sock.close()
        self._clients = []
        self._receiver = None

    def settings(self) -> dict[str, Any]:
        o = self.options
        return {"base_url": o.base_url, "model": self.model, "api": o.api, "max_connections": self.max_connections,
                "client_processes": self.processes,
                "stream_options": o.stream_options, "extra_body": o.extra_body, "tokenizer": o.tokenizer,
                "max_tokens_field": o.max_tokens_field,
                "head_timeout_s": o.head_timeout_s, "stall_timeout_s": o.stall_timeout_s,
                "request_timeout_s": o.request_timeout_s,
                "dispatch_lead_s": self.dispatch_lead_s}

    def load(self) -> EngineLoad:
        now = time.perf_counter()
        waiting = sum(at <= now for at in list(self._unsent.values()))  # due and not sent: the client's queue
        return EngineLoad(running=max(len(self._sinks) - len(self._unsent), 0), waiting=waiting)

    # ---- requests ------------------------------------------------------------------------------

    def submit(self, request: GenerationRequest, sink: TokenSink, at: float | None = None) -> None:
        data = self._target.request(self._body(request), request.traceparent)
        request_id = request.request_id
        at = time.perf_counter() if at is None else at
        with self._lock:  # never handed to a client process the idle watch is ending
            if not self._clients:  # ended during a pause of this run longer than idle_s
                self._start_clients()
            client = self._clients[self._next % len(self._clients)]  # round robin: the clients share the schedule
            self._next += 1
            self._last_used = time.monotonic()
            self._sinks[request_id] = (sink, client)
            if self._tokenizer is not None:  # counted again at its end, as the server's usage is
                self._prompts[request_id] = request.prompt_text or ""
            self._unsent[request_id] = at
            client.requests.add(request_id)
        with client.lock:
            send_frame(client.sock, [("r", request_id, at, data)])

    def cancel(self, request_id: str, reason: str = "cancelled") -> None:
        entry = self._sinks.get(request_id)
        if entry is not None:
            with entry[1].lock:
                send_frame(entry[1].sock, [("c", request_id, reason)])

    def _body(self, request: GenerationRequest) -> dict[str, Any]:
        o = self.options
        body: dict[str, Any] = {"model": self.model, "stream": True, **o.extra_body}
        if o.stream_options is not None:
            body["stream_options"] = o.stream_options
        body[o.max_tokens_field] = request.max_new_tokens
        if o.api == "completions":
            body["prompt"] = request.prompt_text
        else:
            body["messages"] = [{"role": "user", "content": request.prompt_text}]
        return body

    # ---- records coming back -------------------------------------------------------------------

    def _receive(self) -> None:
        """Reads every client's event batches until all have closed; off the clients' loops, so counting tokens
        and the sinks' work never delay a stamp."""
        selector = selectors.DefaultSelector()
        for client in self._clients:
            selector.register(client.sock, selectors.EVENT_READ, client)
        open_clients = len(self._clients)
        while open_clients:
            for key, _ in selector.select():
                client = key.data  # a _Client, as registered
                data = client.sock.recv(1 << 20)
                if not data:
                    selector.unregister(client.sock)
                    open_clients -= 1
                    self._orphan(client)
                    continue
                for event in client.reader.feed(data):
                    self._event(event)
        selector.close()

    def _event(self, event: tuple) -> None:
        kind, request_id = event[0], event[1]
        entry = self._sinks.get(request_id)
        if entry is None:
            return
        sink = entry[0]
        if kind == "t":
            sink.tokens(request_id, event[2], event[3])
        elif kind == "s":
            self._unsent.pop(request_id, None)
            sink.submitted(request_id, event[2])
        elif kind == "a":
            sink.admitted(request_id, event[2])
        elif kind == "f":
            self._finish(sink, *event[1:])

    def _finish(self, sink: TokenSink, request_id: str, t: float, error: str | None, stamps: list[float],
                texts: list[str], exact: list[int | None], prompt_tokens: int | None,
                completion_tokens: int | None, delivered: int, whole: str | None = None) -> None:
        """The chunks whose counts waited for the end, counted now from the final usage and the whole text; with a
        tokenizer, the request's tokens counted by benchd beside the server's usage (a check of both)."""
        if prompt_tokens is not None:
            sink.prompt_tokens(request_id, prompt_tokens)
        prompt = self._prompts.pop(request_id, None)
        if whole is not None and prompt is not None and error is None:
            sink.counted(request_id, TokenCounts(prompt_tokens, completion_tokens, *self._count(prompt, whole)))
        if stamps:
            total = completion_tokens - delivered if completion_tokens is not None else None
            counts = chunk_counts(texts, exact, total, self._tokenizer)
            if all(n == 1 for n in counts):
                sink.stamped_tokens(request_id, stamps, ())
            else:
                for stamp, n in zip(stamps, counts):
                    sink.tokens(request_id, stamp, n)
        entry = self._sinks.pop(request_id)
        entry[1].requests.discard(request_id)
        self._unsent.pop(request_id, None)
        sink.finished(request_id, t, error)

    def _count(self, prompt: str, answer: str) -> tuple[int, int]:
        """(prompt, answer) in the tokenizer's tokens: a chat's prompt with the model's chat template around it (as
        a server renders it), where the tokenizer has one."""
        tokenizer = self._tokenizer
        if self.path != "completions" and has_chat_template(tokenizer):
            prompt_ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                       add_generation_prompt=True, tokenize=False)
            return len(encode(tokenizer, prompt_ids)), len(encode(tokenizer, answer))
        return len(encode(tokenizer, prompt)), len(encode(tokenizer, answer))

    def _orphan(self, client: _Client) -> None:
        """A client process that went away ends what it still had."""
        for request_id in list(client.requests):
            if (entry := self._sinks.pop(request_id, None)) is not None:
                self._unsent.pop(request_id, None)
                entry[0].finished(request_id, time.perf_counter(), "client_error: the client process exited")
        client.requests.clear()


def check_server(base_url: str, headers: dict[str, str], deadline_s: float) -> None:
    """ConnectionError unless something at base_url answers GET /models within deadline_s, the whole exchange (any
    status will do; a redirect is an answer, never followed: the key goes to base_url's host only). Each read of
    http.client has the socket's timeout, but a server may keep answering 100 Continue: a timer shuts the socket at
    the deadline, which ends any read in progress."""
    url = urlsplit(base_url.rstrip("/") + "/models")
    kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    connection = kind(url.hostname, url.port, timeout=deadline_s)
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        if connection.sock is not None:
            try:
                connection.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(deadline_s, expire)
    timer.start()
    try:
        connection.request("GET", url.path + (f"?{url.query}" if url.query else ""), headers=headers)
        connection.getresponse()  # its status line and head: http.client bounds both (64 KiB a line, 100 fields)
    except (OSError, http.client.HTTPException) as error:
        why = (f"no answer within {deadline_s:g} s (openai.connect_timeout_s)" if expired.is_set()
               else f"{type(error).__name__}: {error}")
        raise ConnectionError(f"openai.base_url: nothing answers at {base_url}: {why}") from None
    finally:
        timer.cancel()
        connection.close()


def create(loaded: None, spec: OpenAISpec) -> OpenAIEngine:
    """The engine's record's `create` (engines/openai/spec.py): the model is the server's."""
    return OpenAIEngine(spec.openai, spec.workload, spec.model)
