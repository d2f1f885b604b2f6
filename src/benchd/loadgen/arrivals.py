"""Arrival schedules: offsets in seconds from a stage's start, a pure function of profile and seed (and, for a trace,
of its file)."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterator

from benchd.spec import traces
from benchd.spec.profiles import (
    ArrivalProfile,
    Concurrent,
    Constant,
    Gamma,
    Poisson,
    Ramp,
    Synchronous,
    Trace,
)


def concurrency(profile: ArrivalProfile) -> int | None:
    """Slots of a closed-loop profile; None for open loop (requests leave at scheduled offsets)."""
    match profile:
        case Synchronous():
            return 1
        case Concurrent():
            return profile.concurrency
        case _:
            return None


def cap(profile: ArrivalProfile) -> int | None:
    """An open loop's limit on requests in flight, if it has one."""
    return getattr(profile, "max_concurrency", None)


def offsets(profile: ArrivalProfile, seed: int) -> Iterator[float]:
    """Scheduled offsets (s) of an open-loop profile, endless but for a trace's; the first request leaves at 0."""
    rng = random.Random(f"benchd-arrivals-{seed}")
    match profile:
        case Constant(rate=rate):
            return (i / rate for i in itertools.count())
        case Poisson(rate=rate):
            return _accumulate(lambda: rng.expovariate(rate))
        case Gamma(rate=rate, burstiness=burstiness):
            # shape k = burstiness, scale θ = 1 / (rate · k): mean k·θ = 1/rate, CV = 1/√k (as vLLM's bench).
            return _accumulate(lambda: rng.gammavariate(burstiness, 1.0 / (rate * burstiness)))
        case Ramp():
            # Time-rescaling: arrivals of rate 1 (evenly spaced, or Poisson) in the integrated rate Λ(t), mapped back
            # through Λ⁻¹, are arrivals of the changing rate.
            unit = (float(i) for i in itertools.count()) if profile.arrival == "constant" else \
                _accumulate(lambda: rng.expovariate(1.0))
            inverse = _ramp_inverse(profile)
            return (inverse(u) for u in unit)
        case Trace():
            return _trace(profile)
        case _:
            raise ValueError(f"{profile.profile} is a closed-loop profile: it has no arrival offsets")


def _ramp_inverse(profile: Ramp) -> Callable[[float], float]:
    """Λ⁻¹ for a rate rising linearly from r0 to r1 over T seconds, then constant: Λ(t) = r0·t + (r1 − r0)·t²/(2T)
    up to T, then Λ(T) + r1·(t − T)."""
    r0, r1, span = profile.start_rate, profile.rate, profile.ramp_s
    a = (r1 - r0) / (2 * span)
    ramped = (r0 + r1) * span / 2  # Λ(T)

    def inverse(u: float) -> float:
        if u <= 0:
            return 0.0
        if u >= ramped:
            return span + (u - ramped) / r1
        if a == 0:
            return u / r0
        # a·t² + r0·t − u = 0, the root in [0, T] (the stable form: no cancellation when r0 ≫ a·t)
        return 2 * u / (r0 + math.sqrt(r0 * r0 + 4 * a * u))

    return inverse


def _trace(profile: Trace) -> Iterator[float]:
    first: float | None = None
    for item in traces.read(profile):
        first = item.offset_s if first is None else first
        yield (item.offset_s - first) / profile.speedup


def _accumulate(gap: Callable[[], float]) -> Iterator[float]:
    t = 0.0
    while True:
        yield t
        t += gap()
