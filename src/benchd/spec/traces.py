"""Request traces to replay: each line an arrival offset and its request's lengths, from benchd's JSONL or a
Mooncake trace (kvcache-ai/Mooncake, FAST'25: timestamp in ms, input_length, output_length, hash_ids)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchd.spec import SpecError, Workload, length_upper_bound
from benchd.spec.documents import DocumentError, parse_json
from benchd.spec.profiles import Trace

MAX_TOKENS = 2**31 - 1


class TraceError(SpecError):
    """A trace file that cannot be replayed; the message names the field, the file and the line."""


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


def read(profile: Trace) -> Iterator[TraceItem]:
    """The trace's requests in order; offsets never go back in time."""
    path = Path(profile.path)
    where = "workload.arrivals.path"
    try:
        handle = path.open()
    except OSError as error:
        raise TraceError(f"{where}: {path}: {error.strerror}") from None
    previous = None
    with handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                data = parse_json(line)
            except DocumentError as error:
                raise TraceError(f"{where}: {path} line {number} is not JSON ({error})") from None
            if not isinstance(data, dict):
                raise TraceError(f"{where}: {path} line {number} is not a JSON object")
            item = _mooncake(data) if profile.format == "mooncake" else _jsonl(data)
            if isinstance(item, str):
                raise TraceError(f"{where}: {path} line {number}: {item}")
            if previous is not None and item.offset_s < previous:
                raise TraceError(f"{where}: {path} line {number}: the offset goes back in time "
                                 f"({item.offset_s:g} s after {previous:g} s)")
            previous = item.offset_s
            yield item


def summarize(profile: Trace) -> TraceSummary:
    requests, first, last, prompt, output = 0, None, 0.0, 0, 0
    for item in read(profile):
        requests += 1
        first = item.offset_s if first is None else first
        last = item.offset_s
        prompt, output = max(prompt, item.prompt_tokens), max(output, item.output_tokens)
    if not requests:
        raise TraceError(f"workload.arrivals.path: {profile.path} holds no requests")
    return TraceSummary(requests, (last - first) / profile.speedup, prompt, output)


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
    for value in (offset, prompt, output):
        if isinstance(value, str):
            return value
    return TraceItem(offset, prompt, output)


def _mooncake(data: dict) -> TraceItem | str:
    offset = _offset(data.get("timestamp"), "timestamp", 1e-3)  # milliseconds
    prompt, output = _count(data, "input_length"), _count(data, "output_length")
    for value in (offset, prompt, output):
        if isinstance(value, str):
            return value
    hash_ids = data.get("hash_ids", [])
    if not isinstance(hash_ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hash_ids):
        return f"hash_ids must be a list of whole numbers, not {hash_ids!r}"
    return TraceItem(offset, prompt, output, tuple(hash_ids))
