"""Request traces to replay: each line an arrival offset and its request's lengths, from benchd's JSONL or a
Mooncake trace (kvcache-ai/Mooncake, FAST'25: timestamp in ms, input_length, output_length, hash_ids)."""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import orjson

from benchd.spec import SpecError, Workload, length_upper_bound
from benchd.spec.documents import open_file
from benchd.spec.profiles import Trace

MAX_TOKENS = 2**31 - 1
LINE_MAX_BYTES = 64 << 10  # a line: Mooncake's longest (a 128k-token prompt's hash ids) is about 2 KiB
WHERE = "workload.arrivals.path"
CHECK_EVERY = 4096  # lines between looks at the deadline
CACHED = 16  # summaries kept, by file identity: admission, the memory plan and the time estimate read a trace once


class TraceError(SpecError):
    """A trace file that cannot be replayed; the message names the field, the file and the line."""


class TraceTooLarge(TraceError):
    """A trace over the bytes it may hold."""


class TraceTooSlow(TraceError):
    """A trace not read within its deadline."""


@dataclass(slots=True, frozen=True)
class TraceItem:
    offset_s: float  # from the trace's start, before any speedup
    prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()  # Mooncake: one id per block_tokens of the prompt; equal ids, equal tokens


@dataclass(slots=True, frozen=True)
class TraceSummary:
    requests: int
    duration_s: float  # last offset − first, after the speedup
    max_prompt_tokens: int
    max_output_tokens: int


def _open(profile: Trace) -> tuple[BinaryIO, os.stat_result]:
    try:
        handle = open_file(profile.path)  # a regular file, opened without blocking (a FIFO is refused, never read)
    except OSError as error:
        raise TraceError(f"{WHERE}: {profile.path}: {error.strerror}") from None
    return handle, os.fstat(handle.fileno())


def read(profile: Trace) -> Iterator[TraceItem]:
    """The trace's requests in order; offsets never go back in time."""
    handle, _ = _open(profile)
    with handle:
        yield from _items(profile, handle, None, None)


def _items(profile: Trace, handle: BinaryIO, max_bytes: int | None, deadline: float | None) -> Iterator[TraceItem]:
    """max_bytes: what the file may hold; deadline: time.monotonic() by which it must be read (TraceTooLarge,
    TraceTooSlow past them). Every line at most LINE_MAX_BYTES, UTF-8 and a JSON object."""
    path, previous, read_bytes, number = profile.path, None, 0, 0
    while line := handle.readline(LINE_MAX_BYTES + 1):
        number += 1
        read_bytes += len(line)
        if max_bytes is not None and read_bytes > max_bytes:
            raise TraceTooLarge(f"{WHERE}: {path} holds more than {max_bytes:,} bytes")
        if deadline is not None and number % CHECK_EVERY == 0 and time.monotonic() > deadline:
            raise TraceTooSlow(f"{WHERE}: {path} was not read in time ({number:,} lines read)")
        if len(line) > LINE_MAX_BYTES:
            raise TraceError(f"{WHERE}: {path} line {number} is longer than {LINE_MAX_BYTES >> 10} KiB")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise TraceError(f"{WHERE}: {path} line {number} is not UTF-8 ({error.reason} at byte {error.start + 1} "
                             "of the line)") from None
        if not text.strip():
            continue
        try:  # orjson: strict (no NaN), at most 1,024 levels deep, and the line bounds how many values it holds
            data = orjson.loads(text)
        except orjson.JSONDecodeError as error:
            raise TraceError(f"{WHERE}: {path} line {number} is not JSON ({error})") from None
        if not isinstance(data, dict):
            raise TraceError(f"{WHERE}: {path} line {number} is not a JSON object")
        item = _mooncake(data) if profile.format == "mooncake" else _jsonl(data)
        if isinstance(item, str):
            raise TraceError(f"{WHERE}: {path} line {number}: {item}")
        if previous is not None and item.offset_s < previous:
            raise TraceError(f"{WHERE}: {path} line {number}: the offset goes back in time "
                             f"({item.offset_s:g} s after {previous:g} s)")
        previous = item.offset_s
        yield item


_cache: OrderedDict[tuple, tuple[int, float, int, int]] = OrderedDict()  # requests, span, longest prompt, output
_cache_lock = threading.Lock()


def summarize(profile: Trace, max_bytes: int | None = None, deadline_s: float | None = None) -> TraceSummary:
    """What admission and the estimates need of a trace, read once: kept by the file's identity (device, inode, size,
    modification time), so a file changed since is read again; its size is checked before anything is read.
    max_bytes: what it may hold; deadline_s: how long its reading may take."""
    handle, info = _open(profile)
    key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, profile.format)
    with handle:
        with _cache_lock:
            found = _cache.get(key)
            if found is not None:
                _cache.move_to_end(key)
        if found is None:
            if max_bytes is not None and info.st_size > max_bytes:
                raise TraceTooLarge(f"{WHERE}: {profile.path} holds {info.st_size:,} bytes, more than {max_bytes:,}")
            deadline = None if deadline_s is None else time.monotonic() + deadline_s
            requests, first, last, prompt, output = 0, None, 0.0, 0, 0
            for item in _items(profile, handle, max_bytes, deadline):
                requests += 1
                first = item.offset_s if first is None else first
                last = item.offset_s
                prompt, output = max(prompt, item.prompt_tokens), max(output, item.output_tokens)
            if not requests:
                raise TraceError(f"{WHERE}: {profile.path} holds no requests")
            assert first is not None  # the first request set it
            found = (requests, last - first, prompt, output)
            with _cache_lock:
                _cache[key] = found
                while len(_cache) > CACHED:
                    _cache.popitem(last=False)
    requests, span, prompt, output = found
    return TraceSummary(requests, span / profile.speedup, prompt, output)


def longest(workload: Workload) -> tuple[int, int]:
    """The longest prompt and output a workload makes, in tokens: a trace's from its file, else from the spec (a
    conversation's later turns included). Engines and memory estimates size themselves to these."""
    if isinstance(workload.arrivals, Trace):
        trace = summarize(workload.arrivals)
        return trace.max_prompt_tokens, trace.max_output_tokens
    return workload.max_prompt_tokens(), length_upper_bound(workload.output_tokens)


def _count(data: dict, key: str) -> int | str:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS:
        return f"{key} must be a whole number of tokens ≥ 1, not {value!r}"
    return value


def _offset(value: object, key: str, scale: float) -> float | str:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e12:
        return f"{key} must be a number ≥ 0, not {value!r}"
    return value * scale


def _jsonl(data: dict) -> TraceItem | str:
    offset = _offset(data.get("offset_s"), "offset_s", 1.0)
    prompt, output = _count(data, "prompt_tokens"), _count(data, "output_tokens")
    if isinstance(offset, str):
        return offset
    if isinstance(prompt, str):
        return prompt
    if isinstance(output, str):
        return output
    return TraceItem(offset, prompt, output)


def _mooncake(data: dict) -> TraceItem | str:
    offset = _offset(data.get("timestamp"), "timestamp", 1e-3)  # milliseconds
    prompt, output = _count(data, "input_length"), _count(data, "output_length")
    if isinstance(offset, str):
        return offset
    if isinstance(prompt, str):
        return prompt
    if isinstance(output, str):
        return output
    hash_ids = data.get("hash_ids", [])
    if not isinstance(hash_ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hash_ids):
        return f"hash_ids must be a list of whole numbers, not {hash_ids!r}"
    return TraceItem(offset, prompt, output, tuple(hash_ids))
