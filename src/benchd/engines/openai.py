"""Any OpenAI-compatible server: streaming /v1/completions or /v1/chat/completions over one asyncio loop.

Requests are handed over ahead of time and sent by the loop at their scheduled time (loop.call_later), so the
dispatch lag is the loop's own lateness, measured when each request leaves. Each SSE chunk is stamped as it is
read. ITL is per token: a chunk's token count comes, in order of preference, from a running usage count on the
chunk (vLLM's continuous_usage_stats), the server's token ids, its logprobs, or else from the text (the
tokenizer's count, or the characters) scaled so that the request's total equals the final usage count."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from benchd.engines import EngineLoad, GenerationRequest, TokenSink
from benchd.spec import Concurrent, OpenAIOptions, Sweep, Synchronous, Workload

DISPATCH_LEAD_S = 0.05
OPEN_LOOP_CONNECTIONS = 1024


class RequestFailed(Exception):
    """A request that ended badly: str() is "<error type>: <detail>"."""


@dataclass(slots=True)
class _Chunk:
    t: float
    text: str
    exact: int | None  # tokens, when the server said


@dataclass(slots=True)
class _Stream:
    """One request's parse state: what has been delivered to the sink and what waits for its count."""

    request: GenerationRequest
    sink: TokenSink
    pending: list[_Chunk] = field(default_factory=list)
    delivered: int = 0
    usage_seen: int = 0  # the latest running completion_tokens on a chunk
    final_usage: dict | None = None
    finish_reason: str | None = None
    done: bool = False


def connections_for(workload: Workload) -> int:
    stages = workload.arrivals.stages() if isinstance(workload.arrivals, Sweep) else [workload.arrivals]
    if all(isinstance(s, Concurrent | Synchronous) for s in stages):
        return max(s.concurrency if isinstance(s, Concurrent) else 1 for s in stages)
    return OPEN_LOOP_CONNECTIONS


class OpenAIEngine:
    name = "openai"
    dispatch_lead_s = DISPATCH_LEAD_S

    def __init__(self, options: OpenAIOptions, workload: Workload, model: str) -> None:
        self.options = options
        self.model = options.model or model
        self.max_connections = options.max_connections or connections_for(workload)
        self.path = "completions" if options.api == "completions" else "chat/completions"
        self._tokenizer = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: aiohttp.ClientSession | None = None
        self._tasks: dict[str, asyncio.Task] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._reasons: dict[str, str] = {}
        self._alive = False

    # ---- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        if self.options.tokenizer is not None:
            from benchd.workload import load_tokenizer

            self._tokenizer = load_tokenizer(self.options.tokenizer)
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run_loop, args=(ready,), name="benchd-openai", daemon=True)
        self._thread.start()
        ready.wait()
        try:
            asyncio.run_coroutine_threadsafe(self._check_server(), self._loop).result()
        except Exception:
            self.stop()
            raise
        self._alive = True

    def _run_loop(self, ready: threading.Event) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._open_session())
        ready.set()
        self._loop.run_forever()

    async def _open_session(self) -> None:
        headers = {"Accept": "text/event-stream"}
        if self.options.api_key_env is not None:
            key = os.environ.get(self.options.api_key_env)
            if key:
                headers["Authorization"] = f"Bearer {key}"
        o = self.options
        # Waiting for a free connection is the client's own queue: unbounded, it shows as queue time.
        self._client = aiohttp.ClientSession(
            base_url=o.base_url.rstrip("/") + "/", headers=headers,
            connector=aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0, ttl_dns_cache=None),
            timeout=aiohttp.ClientTimeout(total=None, connect=o.connect_timeout_s, sock_read=o.stall_timeout_s),
        )

    async def _check_server(self) -> None:
        """Fail the run before any request if nothing answers at base_url."""
        # Its own connection, closed after: a server that fails /models may also close the connection it used.
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
                async with session.get(self.options.base_url.rstrip("/") + "/models",
                                       headers=self._client.headers,
                                       timeout=aiohttp.ClientTimeout(total=self.options.connect_timeout_s)):
                    pass
        except (aiohttp.ClientError, TimeoutError) as error:
            raise ConnectionError(f"openai.base_url: nothing answers at {self.options.base_url}: "
                                  f"{type(error).__name__}: {error}") from None

    def alive(self) -> bool:
        return self._alive and self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        loop = self._loop
        if loop is None or not loop.is_running():
            return
        self._alive = False

        async def close() -> None:
            for handle in self._timers.values():
                handle.cancel()
            for task in list(self._tasks.values()):
                task.cancel()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
            await self._client.close()

        asyncio.run_coroutine_threadsafe(close(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10)

    def settings(self) -> dict[str, Any]:
        o = self.options
        return {"base_url": o.base_url, "model": self.model, "api": o.api, "max_connections": self.max_connections,
                "stream_options": o.stream_options, "extra_body": o.extra_body, "tokenizer": o.tokenizer,
                "max_tokens_field": o.max_tokens_field,
                "stall_timeout_s": o.stall_timeout_s, "request_timeout_s": o.request_timeout_s,
                "dispatch_lead_s": self.dispatch_lead_s}

    def load(self) -> EngineLoad:
        return EngineLoad(running=len(self._tasks), waiting=len(self._timers))

    # ---- requests ------------------------------------------------------------------------------

    def submit(self, request: GenerationRequest, sink: TokenSink, at: float | None = None) -> None:
        self._loop.call_soon_threadsafe(self._schedule, request, sink, time.perf_counter() if at is None else at)

    def cancel(self, request_id: str, reason: str = "cancelled") -> None:
        self._loop.call_soon_threadsafe(self._cancel, request_id, reason)

    def _schedule(self, request: GenerationRequest, sink: TokenSink, at: float) -> None:
        delay = at - time.perf_counter()
        self._timers[request.request_id] = self._loop.call_later(max(delay, 0.0), self._send, request, sink)

    def _send(self, request: GenerationRequest, sink: TokenSink) -> None:
        self._timers.pop(request.request_id, None)
        sink.submitted(request.request_id, time.perf_counter())
        self._tasks[request.request_id] = self._loop.create_task(self._request(request, sink))

    def _cancel(self, request_id: str, reason: str) -> None:
        self._reasons[request_id] = reason
        timer = self._timers.pop(request_id, None)
        if timer is not None:
            timer.cancel()
        task = self._tasks.get(request_id)
        if task is not None:
            task.cancel()

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

    async def _request(self, request: GenerationRequest, sink: TokenSink) -> None:
        stream = _Stream(request, sink)
        error: str | None = None
        deadline = asyncio.timeout(self.options.request_timeout_s)  # None: no limit
        try:
            async with deadline:
                await self._exchange(stream)
        except RequestFailed as failure:
            error = str(failure)
        except TimeoutError:
            error = (f"timeout: the request took over {self.options.request_timeout_s:g} s" if deadline.expired()
                     else f"timeout: no data for {self.options.stall_timeout_s:g} s")
        except aiohttp.ClientConnectorError as failure:
            error = f"connect_error: {failure}"
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as failure:
            error = f"disconnected: {type(failure).__name__}: {failure}"
        except aiohttp.ClientError as failure:
            error = f"client_error: {type(failure).__name__}: {failure}"
        except asyncio.CancelledError:
            error = self._reasons.pop(request.request_id, "cancelled")
        finally:
            self._tasks.pop(request.request_id, None)
        end = time.perf_counter()
        self._settle(stream)
        sink.finished(request.request_id, end, error)

    async def _exchange(self, stream: _Stream) -> None:
        request = stream.request
        async with self._client.post(self.path, json=self._body(request)) as response:
            if response.status >= 400:
                detail = (await response.content.read(300)).decode(errors="replace").strip()
                raise RequestFailed(f"http_{response.status}: {detail}")
            stream.sink.admitted(request.request_id, time.perf_counter())  # the server answered: it took it
            async for raw in response.content:  # one SSE line at a time, as the bytes arrive
                if not raw.startswith(b"data:"):
                    continue  # blank separators, comments, event: lines
                data = raw[5:].strip()
                if data == b"[DONE]":
                    stream.done = True
                    break
                self._chunk(stream, data, time.perf_counter())
        if not stream.done and stream.finish_reason is None:
            raise RequestFailed("incomplete: the stream ended without a finish_reason or [DONE]")

    def _chunk(self, stream: _Stream, data: bytes, t: float) -> None:
        try:
            chunk = json.loads(data)
        except ValueError:  # not JSON, or not UTF-8
            raise RequestFailed(f"malformed_chunk: {data[:100].decode(errors='replace')!r}") from None
        if not isinstance(chunk, dict):
            raise RequestFailed(f"malformed_chunk: {data[:100].decode(errors='replace')!r}")
        if "error" in chunk:
            detail = chunk["error"]
            message = detail.get("message", detail) if isinstance(detail, dict) else detail
            raise RequestFailed(f"server_error: {message}")
        text, exact = "", None
        choices = chunk.get("choices") or []
        if choices and isinstance(choices[0], dict):
            choice = choices[0]
            if self.options.api == "completions":
                text = choice.get("text") or ""
                logprobs = (choice.get("logprobs") or {}).get("tokens")
            else:
                delta = choice.get("delta") or {}
                text = "".join(delta.get(k) or "" for k in ("reasoning_content", "reasoning", "content"))
                logprobs = (choice.get("logprobs") or {}).get("content")
            ids = choice.get("token_ids")
            if isinstance(ids, list):
                exact = len(ids)
            elif isinstance(logprobs, list):
                exact = len(logprobs)
            stream.finish_reason = choice.get("finish_reason") or stream.finish_reason
        usage = chunk.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            if (text or exact) and exact is None:
                exact = usage["completion_tokens"] - stream.usage_seen  # a running count on a content chunk
            stream.usage_seen = usage["completion_tokens"]
            stream.final_usage = usage
        if not text and not exact:
            return  # role-only, empty or usage-only: not a token
        if exact is not None and not stream.pending:
            stream.delivered += exact
            stream.sink.tokens(stream.request.request_id, t, exact)
        else:
            stream.pending.append(_Chunk(t, text, exact))

    def _settle(self, stream: _Stream) -> None:
        """Deliver the chunks whose counts had to wait for the end: the final usage fixes their total."""
        request_id = stream.request.request_id
        usage = stream.final_usage
        if usage is not None and isinstance(usage.get("prompt_tokens"), int):
            stream.sink.prompt_tokens(request_id, usage["prompt_tokens"])
        if not stream.pending:
            return
        total = usage["completion_tokens"] - stream.delivered if usage is not None else None
        for chunk, n in zip(stream.pending, self._counts(stream.pending, total)):
            stream.sink.tokens(request_id, chunk.t, n)

    def _counts(self, chunks: list[_Chunk], total: int | None) -> list[int]:
        estimates = [c.exact for c in chunks]
        if any(e is None for e in estimates):
            if self._tokenizer is not None:
                texts, seen, counted = "", 0, []
                for chunk in chunks:
                    texts += chunk.text
                    n = len(self._tokenizer.encode(texts, add_special_tokens=False))
                    counted.append(max(n - seen, 0))
                    seen = max(seen, n)
                estimates = [c.exact if c.exact is not None else e for c, e in zip(chunks, counted)]
            elif total is None:
                return [c.exact or 1 for c in chunks]  # no count anywhere: a token per content chunk
            else:
                estimates = [c.exact if c.exact is not None else len(c.text) for c in chunks]  # weights only
        if total is None or total < len(chunks):
            return [max(1, e) for e in estimates]  # no total to honour: every content chunk holds a token
        return apportion(estimates, total)


def apportion(weights: list[int], total: int) -> list[int]:
    """total split over the chunks, each at least 1, the rest in proportion to weight − 1 (largest remainder)."""
    counts = [1] * len(weights)
    rest = total - len(weights)
    extra = [max(w - 1, 0) for w in weights]
    if rest <= 0:
        return counts
    if not sum(extra):
        extra = [1] * len(weights)
    shares = [rest * e / sum(extra) for e in extra]
    floors = [int(s) for s in shares]
    left = rest - sum(floors)
    for i in sorted(range(len(shares)), key=lambda i: shares[i] - floors[i], reverse=True)[:left]:
        floors[i] += 1
    return [c + f for c, f in zip(counts, floors)]
