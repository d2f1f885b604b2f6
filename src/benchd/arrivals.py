"""Arrival schedules: offsets in seconds from a stage's start, a pure function of profile and seed."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

from benchd.spec import ArrivalProfile, Concurrent, Constant, Gamma, Poisson, Synchronous


def concurrency(profile: ArrivalProfile) -> int | None:
    """Slots of a closed-loop profile; None for open loop (requests leave at scheduled offsets)."""
    match profile:
        case Synchronous():
            return 1
        case Concurrent():
            return profile.concurrency
        case _:
            return None


def offsets(profile: ArrivalProfile, seed: int) -> Iterator[float]:
    """Endless scheduled offsets (s) of an open-loop profile; the first request leaves at 0."""
    rng = random.Random(f"benchd-arrivals-{seed}")
    match profile:
        case Constant(rate=rate):
            return (i / rate for i in itertools.count())
        case Poisson(rate=rate):
            return _accumulate(lambda: rng.expovariate(rate))
        case Gamma(rate=rate, burstiness=burstiness):
            # shape k = burstiness, scale θ = 1 / (rate · k): mean k·θ = 1/rate, CV = 1/√k (as vLLM's bench).
            return _accumulate(lambda: rng.gammavariate(burstiness, 1.0 / (rate * burstiness)))
        case _:
            raise ValueError(f"{profile.profile} is a closed-loop profile: it has no arrival offsets")


def _accumulate(gap) -> Iterator[float]:
    t = 0.0
    while True:
        yield t
        t += gap()
