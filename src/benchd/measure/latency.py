"""Each per-request latency, defined once from a request's stamps (docs/figures.md): the stored summary, the live
Prometheus histograms and the OpenTelemetry GenAI metrics all compute them here. Stamps are perf_counter() seconds;
`scheduled` is the request's t_s; `stamps[i]` is when arrival i came, carrying `counts[i]` tokens."""

from __future__ import annotations

from collections.abc import Iterator, Sequence


def ttft(scheduled: float, stamps: Sequence[float]) -> float | None:
    """Time to first token: the first arrival − t_s (the wait behind a busy engine included)."""
    return stamps[0] - scheduled if stamps else None


def e2e(scheduled: float, stamps: Sequence[float]) -> float | None:
    """End to end: the last arrival − t_s."""
    return stamps[-1] - scheduled if stamps else None


def tpot(stamps: Sequence[float], tokens: int) -> float | None:
    """Time per output token: (last arrival − first arrival) / (output tokens − 1); None under two tokens."""
    return (stamps[-1] - stamps[0]) / (tokens - 1) if tokens >= 2 else None


def token_gaps(stamps: Sequence[float], counts: Sequence[int], start: int = 1) -> Iterator[tuple[float, int]]:
    """Inter-token latency, arrival by arrival from index `start` on (at least the second): an arrival of k tokens
    is k observations of its gap / k (ITL is per token, never per chunk). Tokens that came with the first arrival
    have no gap, and an arrival of no tokens is none."""
    for i in range(max(start, 1), len(stamps)):
        if k := counts[i]:
            yield (stamps[i] - stamps[i - 1]) / k, k


def itl(stamps: Sequence[float], counts: Sequence[int]) -> list[float]:
    """Every inter-token latency observation of a request (token_gaps, each repeated for its tokens)."""
    return [gap for gap, k in token_gaps(stamps, counts) for _ in range(k)]


def itl_array(stamps: Sequence[float], counts: Sequence[int]):
    """itl() as a numpy array, computed at once (a comparison reads a run's every request: 300 of 128 tokens in a
    few milliseconds)."""
    import numpy as np

    gaps, k = np.diff(np.asarray(stamps, dtype=np.float64)), np.asarray(counts[1:], dtype=np.int64)
    some = k > 0
    return np.repeat(gaps[some] / k[some], k[some])


def chunk_gaps(stamps: Sequence[float], counts: Sequence[int], start: int = 1) -> Iterator[float]:
    """Time per output chunk (a server's stream): the gap before each arrival after the first that carried tokens."""
    for i in range(max(start, 1), len(stamps)):
        if counts[i]:
            yield stamps[i] - stamps[i - 1]
