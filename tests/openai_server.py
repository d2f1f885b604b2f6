"""A small OpenAI-compatible streaming server whose behaviour the tests choose, on raw asyncio streams (HTTP/1.1,
keep-alive, chunked SSE) so that it costs little CPU: the open-loop benchmark drives it at hundreds of requests a
second on two cores.

The request's `model` picks the behaviour:
  ok              one token per chunk; a running usage count on each chunk when stream_options asks for
                  continuous_usage_stats, else usage on the final chunk only
  chunks-K        K tokens per chunk, counted only by the final usage
  ids-K           K tokens per chunk, each chunk carrying its token_ids
  role-first      (chat) a role-only chunk, then an empty-content chunk, then one token per chunk
  http500         a 500 with a JSON error body
  disconnect      two chunks, then the connection is dropped mid-body
  stall           one chunk, then nothing for 30 s
  malformed       one chunk, then a line that is not JSON
  error-event     one chunk, then an SSE error payload
  mixed           by arrival order: ok, http500, disconnect, malformed, ok, …
  split           as ok, each event written in two halves (an SSE line and an HTTP chunk cut across reads)
  pairs           as ok, two chunks at a time in one write (a client reads them together)
  length          as ok, with the whole body sent at once under a Content-Length (no chunked encoding)
  until-close     as ok, an HTTP/1.0-style body that ends when the server closes the connection
  slots-N         as ok, at most N requests streamed at once: the others wait for a slot (a server with a
                  capacity: N / (max_tokens × delay) requests a second)

GET /metrics serves a vLLM-style Prometheus page (vllm_page) for two engine cores whose values follow the number
of reads so far, k: KV-cache usage 0.05·k and 0.25, preemptions k and 1, prefix-cache queries 100·k and hits 25·k
(a hit rate of 0.25), waiting 2 and 0, running the requests streaming now and 1. GET /metrics-slow answers after
3 s, GET /metrics-html with a page that is not Prometheus text.

    python -m tests.openai_server [--port N] [--delay S]    (prints its base URL, serves until stdin closes)
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import threading
import time


class OpenAIServer:
    def __init__(self, delay_s: float = 0.002, port: int = 0) -> None:
        self.delay_s, self.port = delay_s, port
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.received: list[float] = []  # perf_counter() as each request's body was read
        self.metrics_reads = 0
        self.streaming = 0  # requests being streamed now
        self._mixed = itertools.cycle(["ok", "http500", "disconnect", "malformed"])
        self._slots: dict[int, asyncio.Semaphore] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # ---- in a thread (tests) -------------------------------------------------------------------

    def __enter__(self) -> OpenAIServer:
        ready = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        async def close() -> None:
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", self.port, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    # ---- HTTP ----------------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                if method == "POST":
                    self.headers.append(headers)
                if not await self._respond(method, path, body, writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _respond(self, method: str, path: str, raw: bytes, writer: asyncio.StreamWriter) -> bool:
        """False when the connection must close."""
        if method == "GET" and path.endswith("/models"):
            self._json(writer, 200, {"object": "list", "data": [{"id": "benchd-test", "object": "model"}]})
            return True
        if method == "GET" and path.startswith("/metrics"):
            if path == "/metrics-slow":
                await asyncio.sleep(3)
            page = "<html>metrics</html>" if path == "/metrics-html" else vllm_page(self.metrics_reads, self.streaming)
            self.metrics_reads += 1
            data = page.encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                         + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
            return True
        if method != "POST" or not path.endswith(("/completions", "/chat/completions")):
            self._json(writer, 404, {"error": {"message": f"no {method} {path}"}})
            return True
        body = json.loads(raw)
        self.received.append(time.perf_counter())
        self.bodies.append(body)
        chat = path.endswith("/chat/completions")
        behaviour = body.get("model", "ok")
        if behaviour == "mixed":
            behaviour = next(self._mixed)
        self.streaming += 1
        try:
            if behaviour.startswith("slots-"):
                n = int(behaviour.split("-")[1])
                async with self._slots.setdefault(n, asyncio.Semaphore(n)):
                    return await self._stream(writer, body, chat, "ok")
            return await self._stream(writer, body, chat, behaviour)
        finally:
            self.streaming -= 1

    async def _stream(self, writer: asyncio.StreamWriter, body: dict, chat: bool, behaviour: str) -> bool:
        if behaviour == "http500":
            self._json(writer, 500, {"error": {"message": "the model is on fire", "type": "server_error"}})
            return True
        tokens = body.get("max_tokens") or body.get("max_completion_tokens") or 16
        per_chunk = int(behaviour.split("-")[1]) if behaviour.startswith(("chunks-", "ids-")) else 1
        running = (bool((body.get("stream_options") or {}).get("continuous_usage_stats"))
                   and behaviour in ("ok", "pairs"))
        framing = behaviour if behaviour in ("length", "until-close") else "chunked"
        held: list[bytes] = []  # a Content-Length body is sent whole at the end
        if framing == "chunked":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        elif framing == "until-close":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")

        def event(payload: dict | str) -> None:
            data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
            frame = b"data: " + data + b"\n\n"
            if framing == "length":
                held.append(frame)
                return
            if framing == "until-close":
                writer.write(frame)
                return
            wire = f"{len(frame):x}\r\n".encode() + frame + b"\r\n"
            if behaviour == "split":
                while halves:  # the previous event's second half first
                    writer.write(halves.pop(0))
                halves.append(wire[len(wire) // 2:])
                writer.write(wire[:len(wire) // 2])
            elif behaviour == "pairs":
                together.append(wire)
            else:
                writer.write(wire)

        halves: list[bytes] = []
        together: list[bytes] = []  # pairs: what goes out in the next write

        def choice(text: str | None = None, role: bool = False, finish: str | None = None, ids=None) -> dict:
            if chat:
                delta = {"role": "assistant"} if role else {} if text is None else {"content": text}
                item = {"index": 0, "delta": delta, "finish_reason": finish}
            else:
                item = {"index": 0, "text": text or "", "finish_reason": finish}
            if ids is not None:
                item["token_ids"] = ids
            return {"id": "cmpl-1", "object": "chat.completion.chunk" if chat else "text_completion",
                    "model": body.get("model"), "choices": [item]}

        if behaviour == "role-first":
            event(choice(role=True))
            event(choice(""))
        sent, prompt = 0, len(str(body.get("prompt") or body.get("messages")).split())
        while sent < tokens:
            await asyncio.sleep(self.delay_s)
            for _ in range(2 if behaviour == "pairs" else 1):
                if sent == tokens:
                    break
                k = min(per_chunk, tokens - sent)
                chunk = choice("tok " * k, ids=list(range(sent, sent + k)) if behaviour.startswith("ids-") else None)
                sent += k
                if running:
                    chunk["usage"] = {"prompt_tokens": prompt, "completion_tokens": sent,
                                      "total_tokens": prompt + sent}
                event(chunk)
            if together:
                writer.write(b"".join(together))
                together.clear()
            await writer.drain()
            if halves:
                await asyncio.sleep(0.001)
                writer.write(halves.pop())
            if behaviour == "disconnect" and sent == 2:
                writer.transport.abort()
                return False
            if behaviour == "stall":
                await asyncio.sleep(30)
                return False
            if behaviour == "malformed":
                event("{oops")
                break
            if behaviour == "error-event":
                event({"error": {"message": "out of KV cache", "code": 503}})
                break
        else:
            final = choice(finish="length")
            final["choices"][0].pop("token_ids", None)
            final["usage"] = {"prompt_tokens": prompt, "completion_tokens": sent, "total_tokens": prompt + sent}
            event(final)
            event("[DONE]")
            if together:
                writer.write(b"".join(together))
            while halves:
                writer.write(halves.pop(0))
        if framing == "length":
            body = b"".join(held)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        elif framing == "until-close":
            await writer.drain()
            return False
        else:
            writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    @staticmethod
    def _json(writer: asyncio.StreamWriter, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        reason = {200: "OK", 404: "Not Found", 500: "Internal Server Error"}[status]
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\n\r\n".encode() + data)


def vllm_page(k: int, streaming: int) -> str:
    """vLLM V1's exposition (names, types and labels as vllm/v1/metrics/loggers.py declares them) for two engine
    cores, with a histogram as vLLM's pages have many."""
    engines = {"0": (streaming, 2, 0.05 * k, k, 100 * k, 25 * k), "1": (1, 0, 0.25, 1, 0, 0)}
    lines = []
    for name, kind, i in (("vllm:num_requests_running", "gauge", 0), ("vllm:num_requests_waiting", "gauge", 1),
                          ("vllm:kv_cache_usage_perc", "gauge", 2), ("vllm:num_preemptions", "counter", 3),
                          ("vllm:prefix_cache_queries", "counter", 4), ("vllm:prefix_cache_hits", "counter", 5)):
        lines += [f"# HELP {name} benchd's mock.", f"# TYPE {name} {kind}"]
        suffix = "_total" if kind == "counter" else ""
        for engine, values in engines.items():
            lines.append(f'{name}{suffix}{{engine="{engine}",model_name="ok"}} {float(values[i])}')
    lines += ["# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
              "# TYPE vllm:time_to_first_token_seconds histogram",
              'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="ok"} 0.0',
              'vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="ok"} 3.0',
              'vllm:time_to_first_token_seconds_count{engine="0",model_name="ok"} 3.0',
              'vllm:time_to_first_token_seconds_sum{engine="0",model_name="ok"} 0.06']
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.002, help="seconds between chunks")
    args = parser.parse_args()
    with OpenAIServer(args.delay, args.port) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
