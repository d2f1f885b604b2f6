"""One streamed response's parse state: SSE lines in, token arrivals out (what is a token, what its count is)."""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

LINE_MAX_BYTES = 1 << 20  # an SSE line: a chunk with 20 logprobs is under 2 KiB; one without an end fails the request
DETAIL_CHARS = 300  # of a server's words kept with a failed request: an error event's message, an error body


def cut(text: str, limit: int = DETAIL_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


class RequestFailed(Exception):
    """A request that ended badly: str() is "<error type>: <detail>"."""


@dataclass(slots=True)
class Stream:
    """Chunks whose token count is known go out at once (`live`); the others wait in `pending` for the request's
    end, when the final usage count and the text fix them. Stamps are perf_counter() seconds."""

    chat: bool
    live: list[tuple[float, int]] = field(default_factory=list)  # (stamp, tokens) not yet handed over
    pending_t: list[float] = field(default_factory=list)
    pending_text: list[str] = field(default_factory=list)
    pending_exact: list[int | None] = field(default_factory=list)
    delivered: int = 0  # tokens handed over live
    usage_seen: int = 0  # the latest running completion_tokens on a chunk
    prompt_tokens: int | None = None
    completion_tokens: int | None = None  # the final (or latest running) usage count
    finish_reason: str | None = None
    done: bool = False  # [DONE] arrived
    partial: bytes = b""  # an SSE line cut by a read
    whole: list[str] | None = None  # every content chunk's text, when kept (benchd counts the answer itself)

    def feed(self, data: bytes, t: float) -> None:
        """The response body's bytes as they arrived at t: every complete `data:` line is one event."""
        if self.partial:
            data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        if len(self.partial) > LINE_MAX_BYTES:
            raise RequestFailed(f"malformed_chunk: a line over {LINE_MAX_BYTES >> 20} MiB with no end: "
                                f"{self.partial[:100].decode(errors='replace')!r}")
        for line in lines:
            if line[:5] != b"data:":
                continue  # blank separators, comments, event: lines
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
                return
            self.event(payload, t)

    def event(self, payload: bytes, t: float) -> None:
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:  # not JSON, or not UTF-8
            raise RequestFailed(f"malformed_chunk: {payload[:100].decode(errors='replace')!r}") from None
        if type(chunk) is not dict:
            raise RequestFailed(f"malformed_chunk: {payload[:100].decode(errors='replace')!r}")
        if "error" in chunk:
            detail = chunk["error"]
            message = str(detail.get("message", detail) if isinstance(detail, dict) else detail)
            raise RequestFailed(f"server_error: {cut(message)}")
        text, exact = "", None
        choices = chunk.get("choices")
        if choices and type(choices[0]) is dict:
            choice = choices[0]
            if self.chat:
                delta = choice.get("delta") or {}
                text = delta.get("content") or ""
                if "reasoning_content" in delta or "reasoning" in delta:
                    text = (delta.get("reasoning_content") or "") + (delta.get("reasoning") or "") + text
                logprobs = (choice.get("logprobs") or {}).get("content")
            else:
                text = choice.get("text") or ""
                logprobs = (choice.get("logprobs") or {}).get("tokens")
            ids = choice.get("token_ids")
            if type(ids) is list:
                exact = len(ids)
            elif type(logprobs) is list:
                exact = len(logprobs)
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
        usage = chunk.get("usage")
        if type(usage) is dict and type(usage.get("completion_tokens")) is int:
            if (text or exact) and exact is None:
                exact = usage["completion_tokens"] - self.usage_seen  # a running count on a content chunk
            self.usage_seen = self.completion_tokens = usage["completion_tokens"]
            if type(usage.get("prompt_tokens")) is int:
                self.prompt_tokens = usage["prompt_tokens"]
        if not text and not exact:
            return  # role-only, empty or usage-only: not a token
        if self.whole is not None:
            self.whole.append(text)
        # Chunks that came in one read are one arrival (its gap split over all their tokens): stamped apart, the
        # first would carry the whole gap and the others gaps of zero.
        if exact is not None and not self.pending_t:
            self.delivered += exact
            if self.live and self.live[-1][0] == t:
                self.live[-1] = (t, self.live[-1][1] + exact)
            else:
                self.live.append((t, exact))
        elif self.pending_t and self.pending_t[-1] == t:
            self.pending_text[-1] += text
            before = self.pending_exact[-1]
            self.pending_exact[-1] = None if before is None or exact is None else before + exact
        else:
            self.pending_t.append(t)
            self.pending_text.append(text)
            self.pending_exact.append(exact)

    @property
    def complete(self) -> bool:
        return self.done or self.finish_reason is not None
