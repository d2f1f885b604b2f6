"""The CLI's client of a running daemon, which trusts nothing a server sends: every call ends within a deadline,
every answer within a size, an event stream within an idle time; no redirect is followed; every string of an answer
is made visible text (cli/terminal.py) before anything prints it."""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

from benchd.cli.terminal import cleaned, visible

DEFAULT_SERVER = "http://127.0.0.1:8000"
# A call's whole time, from connecting to its answer's last byte: past the daemon's own bounds (a comparison's 30 s,
# BENCHD_READS__COMPARE_TIMEOUT_S) so that its reason, not ours, says why a slow read ended.
DEADLINE_S = 90.0
DEADLINE_ENV = "BENCHD_CLIENT_TIMEOUT_S"
# An event stream may run for hours, but the daemon sends a heartbeat on it every 15 s (daemon/streams.py): this long
# with no line means the daemon, or something between, is stuck, not that the run is slow.
IDLE_S = 60.0
IDLE_ENV = "BENCHD_CLIENT_IDLE_S"
MAX_ANSWER_BYTES = 32 << 20  # a JSON answer (a page of /runs is at most 8 MiB, a history of 10,000 runs ~10 MiB)
MAX_FILE_BYTES = 1 << 30  # a report or a CSV saved to a file, written as it comes
MAX_LINE_BYTES = 1 << 20  # a line of an event stream
ERROR_TEXT = 300  # characters of an error's body that was not JSON
LINE_END = re.compile(rb"\r\n|\r|\n")

T = TypeVar("T")


class CommandError(Exception):
    """A command of the command line that cannot go on: str() is one line naming what failed and what to do;
    detail (the full error) is for --debug."""

    def __init__(self, message: str, detail: str | None = None, exit_code: int = 1) -> None:
        super().__init__(message)
        self.detail = detail
        self.exit_code = exit_code  # benchd.cli's EXIT_*: 1 failed, 2 bad arguments or settings


class DaemonError(CommandError):
    """What a daemon answered with an error, or why none answered: str() is one line, saying what to do."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status; None when no daemon answered

    @property
    def unreachable(self) -> bool:
        return self.status is None


def _seconds(name: str, default: float) -> float:
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e6:
        raise CommandError(f"{name}={text!r}: give seconds, a positive number", exit_code=2)
    return value


class Client:
    """One method a call, each its own deadline. The answers' strings are visible text (raw=True: as sent, for
    --json, which JSON's own escapes keep inert)."""

    def __init__(self, server: str | None = None, token: str | None = None) -> None:
        self.server = (server or os.environ.get("BENCHD_SERVER") or DEFAULT_SERVER).rstrip("/")
        if not self.server.startswith(("http://", "https://")):
            raise DaemonError(f"the daemon's URL {visible(self.server)!r} (--server or BENCHD_SERVER) must start "
                              f"with http:// or https://, e.g. {DEFAULT_SERVER}")
        token = token or os.environ.get("BENCHD_API_TOKEN")
        # identity: a compressed answer could grow past its cap in one read
        self.headers = {"Accept-Encoding": "identity", **({"Authorization": f"Bearer {token}"} if token else {})}
        self.deadline_s = _seconds(DEADLINE_ENV, DEADLINE_S)
        self.idle_s = _seconds(IDLE_ENV, IDLE_S)

    # ---- calls ----

    def get(self, path: str, params: dict[str, Any] | None = None, raw: bool = False) -> Any:
        return self._json("GET", path, params=params, raw=raw)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self._json("POST", path, body=body)

    def put(self, path: str, body: dict[str, Any]) -> Any:
        return self._json("PUT", path, body=body)

    def delete(self, path: str) -> Any:
        return self._json("DELETE", path)

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        return self.post("/runs", spec)

    def run(self, run_id: str, raw: bool = False) -> dict[str, Any]:
        return self.get(f"/runs/{run_id}", raw=raw)

    def runs(self, raw: bool = False, **filters: Any) -> dict[str, Any]:
        return self.get("/runs", params=filters, raw=raw)

    def cancel(self, run_id: str) -> dict[str, Any]:
        return self.delete(f"/runs/{run_id}")

    def text(self, path: str, params: dict[str, Any] | None = None) -> str:
        """An answer that is not JSON (a page), as sent: for a file, never for the terminal."""
        body = self._call(self._read("GET", path, params, None, MAX_ANSWER_BYTES))
        return body.decode("utf-8", errors="replace")

    def download(self, path: str, params: dict[str, Any] | None, to: Path) -> int:
        """The answer written to the file `to` as it comes (at most MAX_FILE_BYTES); its bytes."""
        return self._call(self._save(path, params, to))

    def events(self, run_id: str, on_event: Callable[[str, dict[str, Any]], None]) -> None:
        """on_event(event, data) for each of the run's server-sent events, until its summary."""
        self._call(self._follow(run_id, on_event))

    # ---- one call: a loop of its own, a deadline for all of it ----

    def _call(self, work: Awaitable[T]) -> T:
        return asyncio.run(self._within(work))

    async def _within(self, work: Awaitable[T]) -> T:
        try:
            return await work
        except httpx.TimeoutException:  # httpx's own, for a connection; the call's deadline is asyncio's (below)
            raise self._late() from None
        except httpx.TransportError as error:
            reason = visible(_reason(error))
            raise DaemonError(f"cannot reach the benchd daemon at {self.server} ({reason}): start one with "
                              "`benchd serve`, or give its URL with --server or BENCHD_SERVER") from None

    def _late(self) -> DaemonError:
        return DaemonError(f"the benchd daemon at {self.server} did not answer within {self.deadline_s:g} s "
                           f"({DEADLINE_ENV} gives it longer): check that it runs and is not overloaded "
                           f"(curl {self.server}/healthz)")

    def _http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.server, headers=self.headers, timeout=self.deadline_s,
                                 follow_redirects=False)

    def _json(self, method: str, path: str, params: dict[str, Any] | None = None, body: Any = None,
              raw: bool = False) -> Any:
        content = self._call(self._read(method, path, params, body, MAX_ANSWER_BYTES))
        if not content:
            return None
        try:
            data = json.loads(content)
            return data if raw else cleaned(data)
        except (ValueError, RecursionError):  # not JSON, or nested past reading: not a benchd daemon, a proxy's page
            raise DaemonError(f"{self.server} answered {visible(path)} with something other than JSON: is it a "
                              "benchd daemon? (--server or BENCHD_SERVER)", 200) from None

    async def _read(self, method: str, path: str, params: dict[str, Any] | None, body: Any, cap: int) -> bytes:
        try:
            async with asyncio.timeout(self.deadline_s), self._http() as http, \
                    http.stream(method, path, params=_given(params), json=body) as response:
                self._check_head(response, path)
                content = await _capped(response, cap, f"{self.server}{path}")
                if not response.is_success:
                    raise self._refusal(response, content)
                return content
        except TimeoutError:
            raise self._late() from None

    async def _save(self, path: str, params: dict[str, Any] | None, to: Path) -> int:
        written, part = 0, to.with_name(to.name + ".part")
        try:
            async with asyncio.timeout(self.deadline_s), self._http() as http, \
                    http.stream("GET", path, params=_given(params)) as response:
                self._check_head(response, path)
                if not response.is_success:
                    raise self._refusal(response, await _capped(response, MAX_ANSWER_BYTES, f"{self.server}{path}"))
                _length_within(response, MAX_FILE_BYTES, f"{self.server}{path}")
                with part.open("wb") as file:
                    async for chunk in response.aiter_raw():
                        written += len(chunk)
                        if written > MAX_FILE_BYTES:
                            raise _too_large(f"{self.server}{path}", MAX_FILE_BYTES)
                        file.write(chunk)
            part.replace(to)  # whole, or not at all
        except TimeoutError:
            raise self._late() from None
        finally:
            part.unlink(missing_ok=True)
        return written

    async def _follow(self, run_id: str, on_event: Callable[[str, dict[str, Any]], None]) -> None:
        """The stream's head within the call's deadline, then each line within the idle time of the one before
        (heartbeats are lines): a stream that stops without its summary is an error too."""
        path = f"/runs/{run_id}/events"
        loop = asyncio.get_running_loop()
        streaming = False
        try:
            async with asyncio.timeout(self.deadline_s) as limit, self._http() as http, \
                    http.stream("GET", path, timeout=httpx.Timeout(self.deadline_s, read=None)) as response:
                self._check_head(response, path)
                if not response.is_success:
                    raise self._refusal(response, await _capped(response, MAX_ANSWER_BYTES, f"{self.server}{path}"))
                streaming = True
                limit.reschedule(loop.time() + self.idle_s)
                kind, data = "message", []
                async for line in _lines(response.aiter_raw(), f"{self.server}{path}"):
                    limit.reschedule(loop.time() + self.idle_s)
                    if line.startswith("event:"):
                        kind = line[6:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].strip())
                    elif not line and data:
                        try:
                            event = cleaned(json.loads("\n".join(data)))
                        except (ValueError, RecursionError):
                            raise DaemonError(f"{self.server}{path} sent an event that is not JSON: is it a benchd "
                                              "daemon?", response.status_code) from None
                        on_event(visible(kind), event)
                        if kind == "summary":
                            return
                        kind, data = "message", []
        except TimeoutError:
            if not streaming:
                raise self._late() from None
            raise DaemonError(f"the benchd daemon at {self.server} sent nothing on run {run_id}'s event stream for "
                              f"{self.idle_s:g} s, not even its heartbeat ({IDLE_ENV} waits longer): it is stuck, or "
                              f"something between cuts the stream; the run may go on (benchd runs show {run_id})") \
                from None
        raise DaemonError(f"the benchd daemon at {self.server} ended run {run_id}'s event stream before its summary "
                          f"(benchd runs show {run_id} says where it is)")

    # ---- what an answer says ----

    def _check_head(self, response: httpx.Response, path: str) -> None:
        """No redirect followed (it could lead anywhere: another host, a loop), no encoding that was not asked."""
        if response.is_redirect:
            where = visible(response.headers.get("location", "")[:ERROR_TEXT])
            raise DaemonError(f"{self.server} redirected {visible(path)} to {where!r} ({response.status_code}): "
                              "benchd follows no redirect; give the daemon's own URL with --server or BENCHD_SERVER",
                              response.status_code)
        encoding = response.headers.get("content-encoding", "identity").lower()
        if encoding not in ("", "identity"):
            raise DaemonError(f"{self.server} answered {visible(path)} in an encoding it was not asked for "
                              f"({visible(encoding[:40])}): is it a benchd daemon?", response.status_code)

    def _refusal(self, response: httpx.Response, content: bytes) -> DaemonError:
        """The daemon's own reason: its detail (a validation problem a line a field), what to do after a 401, and
        when to try again after a 429 or 503."""
        try:
            body = cleaned(json.loads(content)) if content else None
        except (ValueError, RecursionError):
            body = None
        detail = body.get("detail") if isinstance(body, dict) else None
        if isinstance(detail, list):  # validation problems: one line per field
            detail = "\n".join(_problem(d) for d in detail)
        elif not isinstance(detail, str):
            detail = visible(content.decode("utf-8", errors="replace").strip()[:ERROR_TEXT]) or response.reason_phrase
        if response.status_code == 401:
            detail = f"{detail}: set BENCHD_API_TOKEN to the daemon's token"
        if (after := response.headers.get("retry-after", "")).isdigit():
            detail = f"{detail} (try again in {int(after)} s)"
        return DaemonError(f"{response.status_code}: {detail}", response.status_code)


def _reason(error: BaseException) -> str:
    """Why a connection failed, as the system says it ("Connection refused"), from the errors under httpx's."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno:
            return os.strerror(cause.errno)
        cause = cause.__cause__ or cause.__context__
    return str(error) or type(error).__name__


def _given(params: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (params or {}).items() if v is not None}


def _problem(item: Any) -> str:
    if not isinstance(item, dict):
        return str(item)
    found = item.get("loc")
    loc = found if isinstance(found, list) else []
    return f"{'.'.join(str(p) for p in loc[1:])}: {item.get('msg', '')}"


def _too_large(what: str, cap: int) -> DaemonError:
    return DaemonError(f"{visible(what)} sent more than {cap >> 20} MiB: stopped reading (is it a benchd daemon?)")


def _length_within(response: httpx.Response, cap: int, what: str) -> None:
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > cap:
        raise _too_large(what, cap)


async def _capped(response: httpx.Response, cap: int, what: str) -> bytes:
    """The body, refused as soon as it passes cap bytes (its stated length first)."""
    _length_within(response, cap, what)
    parts, size = [], 0
    async for chunk in response.aiter_raw():
        size += len(chunk)
        if size > cap:
            raise _too_large(what, cap)
        parts.append(chunk)
    return b"".join(parts)


async def _lines(chunks, what: str):
    """An event stream's lines (CR, LF or CRLF ends one), each at most MAX_LINE_BYTES; each byte looked at once."""
    buffer, after_cr = bytearray(), False
    async for chunk in chunks:
        if after_cr and chunk[:1] == b"\n":  # the LF of a CRLF split between two reads
            chunk = chunk[1:]
        if not chunk:
            continue
        scanned, start = len(buffer), 0  # what is in the buffer holds no line end: look at the new bytes only
        buffer += chunk
        for end in LINE_END.finditer(buffer, scanned):
            yield buffer[start:end.start()].decode("utf-8", errors="replace")
            start = end.end()
        after_cr = buffer.endswith(b"\r")
        del buffer[:start]
        if len(buffer) > MAX_LINE_BYTES:
            raise DaemonError(f"{visible(what)} sent a line longer than {MAX_LINE_BYTES >> 20} MiB: stopped reading")
