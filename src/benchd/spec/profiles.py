"""Arrival profiles: when a stage's requests are scheduled (guidellm's strategies, and the shapes users replay)."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import PurePath
from typing import Annotated, Literal

from pydantic import Field, model_validator

from benchd.spec.fields import LIST_MAX, FilePath, NonNegativeFloat, PositiveFloat, PositiveInt, Strict

# Gamma's shape: 1 is Poisson, < 1 burstier. Its scale is 1 / (rate · burstiness), which must stay finite.
Burstiness = Annotated[float, Field(ge=0.001, le=1000)]
# A cap on requests in flight for an open loop: a request due while this many are out waits for one to end; it
# keeps its scheduled time, so the wait is its dispatch lag and part of every latency (and the stage's verdict says
# so when the cap held requests back).
Cap = PositiveInt | None


class Synchronous(Strict):
    """One request at a time: the next is scheduled when the previous finishes."""

    profile: Literal["synchronous"]
    """One request at a time: the next is scheduled when the previous finishes."""


class Concurrent(Strict):
    """Closed loop: N requests in flight; a new one is scheduled whenever one finishes."""

    profile: Literal["concurrent"]
    """Closed loop: N requests in flight; a new one is scheduled whenever one finishes."""
    concurrency: PositiveInt
    """Requests in flight."""


class Constant(Strict):
    """Open loop: one request every 1/rate seconds."""

    profile: Literal["constant"]
    """Open loop: one request every 1/rate seconds."""
    rate: PositiveFloat
    """Requests a second."""
    max_concurrency: Cap = None
    """At most this many requests in flight: a request due while that many are out waits for one to end, keeping its
    scheduled time (the wait is dispatch lag, part of every latency)."""


class Poisson(Strict):
    """Open loop: exponential inter-arrival times with mean 1/rate."""

    profile: Literal["poisson"]
    """Open loop: exponential inter-arrival times with mean 1/rate."""
    rate: PositiveFloat
    """Requests a second, on average."""
    max_concurrency: Cap = None
    """At most this many requests in flight: a request due while that many are out waits for one to end, keeping its
    scheduled time (the wait is dispatch lag, part of every latency)."""


class Gamma(Strict):
    """Open loop: gamma inter-arrival times with mean 1/rate (vLLM's burstiness: 1 is Poisson, <1 burstier)."""

    profile: Literal["gamma"]
    """Open loop: gamma inter-arrival times with mean 1/rate."""
    rate: PositiveFloat
    """Requests a second, on average."""
    burstiness: Burstiness = 1.0
    """The gamma's shape (vLLM's burstiness): 1 is Poisson, under 1 burstier."""
    max_concurrency: Cap = None
    """At most this many requests in flight: a request due while that many are out waits for one to end, keeping its
    scheduled time (the wait is dispatch lag, part of every latency)."""


class Ramp(Strict):
    """Open loop whose rate rises (or falls) linearly from start_rate to rate over ramp_s seconds, then holds: arrivals
    evenly spaced in the integrated rate (constant), or a Poisson process of that changing rate (poisson)."""

    profile: Literal["ramp"]
    """Open loop whose rate moves linearly from start_rate to rate over ramp_s seconds, then holds."""
    start_rate: NonNegativeFloat = 0.0
    """Requests a second at the stage's start."""
    rate: PositiveFloat
    """Requests a second once the ramp is done."""
    ramp_s: PositiveFloat
    """Seconds the rate takes to reach `rate`."""
    arrival: Literal["constant", "poisson"] = "constant"
    """Arrivals at the rate of each moment: evenly spaced, or Poisson."""
    max_concurrency: Cap = None
    """At most this many requests in flight: a request due while that many are out waits for one to end, keeping its
    scheduled time (the wait is dispatch lag, part of every latency)."""


class Trace(Strict):
    """Open loop replaying a file: one request per line, at its offset, with its prompt and output lengths.

    jsonl: {"offset_s": 0.25, "prompt_tokens": 512, "output_tokens": 128} (offsets in seconds from the first).
    mooncake: kvcache-ai/Mooncake's traces, {"timestamp": 27482, "input_length": 6955, "output_length": 52,
    "hash_ids": [46, 47, …]} with timestamps in milliseconds; equal hash ids are the same block_tokens tokens, so
    requests that share a prefix in the trace share it here."""

    profile: Literal["trace"]
    """Open loop replaying a file: one request per line, at its offset, with its prompt and output lengths."""
    path: FilePath
    """The trace file; over HTTP, under BENCHD_MODEL_ROOTS."""
    format: Literal["jsonl", "mooncake"] = "jsonl"
    """jsonl: {"offset_s", "prompt_tokens", "output_tokens"} a line; mooncake: kvcache-ai/Mooncake's traces (timestamps
    in ms, equal hash ids the same tokens)."""
    speedup: PositiveFloat = 1.0
    """Offsets are divided by it: 2 replays the trace twice as fast."""
    block_tokens: PositiveInt = 512
    """mooncake: tokens per hash id (the traces' KV-cache block size)."""
    max_concurrency: Cap = None
    """At most this many requests in flight: a request due while that many are out waits for one to end, keeping its
    scheduled time (the wait is dispatch lag, part of every latency)."""


class Sweep(Strict):
    """Several load levels run in turn, each with the workload's stop and warm-up rules."""

    profile: Literal["sweep"]
    """A stage per value, in order: the same workload at each load level."""
    over: Literal["concurrent", "constant", "poisson", "gamma"]
    """The profile each level runs."""
    values: Annotated[list[PositiveFloat], Field(min_length=1, max_length=LIST_MAX)]
    """Each level's concurrency, or its rate in requests a second."""
    burstiness: Burstiness = 1.0
    """gamma levels' shape: 1 is Poisson, under 1 burstier."""
    max_concurrency: Cap = None
    """Caps the open-loop levels' requests in flight (a concurrency sweep is capped by its values)."""

    @model_validator(mode="after")
    def _integral_concurrency(self) -> Sweep:
        if self.over == "concurrent" and any(v != int(v) for v in self.values):
            raise ValueError("values must be whole numbers when sweeping concurrency")
        if self.over == "concurrent" and self.max_concurrency is not None:
            raise ValueError("max_concurrency: caps open-loop levels; a concurrency sweep is capped by its values")
        return self

    def stages(self) -> list[ArrivalProfile]:
        cap = self.max_concurrency
        match self.over:
            case "concurrent":
                return [Concurrent(profile="concurrent", concurrency=int(v)) for v in self.values]
            case "gamma":
                return [Gamma(profile="gamma", rate=v, burstiness=self.burstiness, max_concurrency=cap)
                        for v in self.values]
            case "constant":
                return [Constant(profile="constant", rate=v, max_concurrency=cap) for v in self.values]
            case _:
                return [Poisson(profile="poisson", rate=v, max_concurrency=cap) for v in self.values]


class Capacity(Strict):
    """Searches the highest request rate whose stage meets the workload's SLO (its percentile objectives and error
    rate): rates double (or halve) from start_rate until one passes and one fails, then the interval is bisected
    until it is narrower than precision × its upper end. Each probe is a stage with the workload's stop and warm-up
    rules; a probe whose verdict is invalid for a reason of the client's (late dispatch, too short) is run again up to
    retries times and is never used to decide."""

    profile: Literal["capacity"]
    """A search for the highest request rate whose stage meets the workload's SLO, a stage a probe."""
    over: Literal["constant", "poisson"] = "poisson"
    """The open loop each probe runs."""
    start_rate: PositiveFloat = 1.0
    """The first probe's rate, in requests a second."""
    min_rate: PositiveFloat = 0.01
    """Halving stops below it: no rate meets the SLO."""
    max_rate: PositiveFloat | None = None
    """Doubling stops at it; default: the daemon's BENCHD_LIMITS__MAX_RATE."""
    precision: Annotated[float, Field(gt=0, lt=1)] = 0.1
    """The search ends once the interval is narrower than this share of its upper end."""
    max_probes: Annotated[int, Field(ge=2, le=64)] = 12
    """Probes at most (each a stage)."""
    retries: Annotated[int, Field(ge=0, le=5)] = 1
    """Runs again of a probe whose verdict is invalid for a reason of the client's (late dispatch, too short)."""
    max_concurrency: Cap = None
    """At most this many requests in flight: a request due while that many are out waits for one to end, keeping its
    scheduled time (the wait is dispatch lag, part of every latency)."""

    @model_validator(mode="after")
    def _ordered(self) -> Capacity:
        if self.start_rate < self.min_rate:
            raise ValueError(f"start_rate ({self.start_rate:g}) must be >= min_rate ({self.min_rate:g})")
        if self.max_rate is not None and self.max_rate < self.start_rate:
            raise ValueError(f"max_rate ({self.max_rate:g}) must be >= start_rate ({self.start_rate:g})")
        return self

    def probe(self, rate: float) -> ArrivalProfile:
        if self.over == "constant":
            return Constant(profile="constant", rate=rate, max_concurrency=self.max_concurrency)
        return Poisson(profile="poisson", rate=rate, max_concurrency=self.max_concurrency)


ArrivalProfile = Synchronous | Concurrent | Constant | Poisson | Gamma | Ramp | Trace
Arrivals = Annotated[ArrivalProfile | Sweep | Capacity, Field(discriminator="profile")]


def is_open_loop(profile: ArrivalProfile) -> bool:
    """Requests leave at scheduled offsets (open loop), not when a slot frees up (closed loop)."""
    return not isinstance(profile, Synchronous | Concurrent)


def file_name(path: str) -> str:
    """A file's name as people gave it: the worker reads a confined path through its opened descriptor
    (/proc/self/fd/N, models/confinement.py), whose own name is a number; the name is then the file's it leads to."""
    if re.fullmatch(r"/proc/self/fd/\d+", path):
        with contextlib.suppress(OSError):
            return PurePath(os.readlink(path)).name
    return PurePath(path).name


def describe_profile(profile: ArrivalProfile) -> str:
    match profile:
        case Synchronous():
            text = "synchronous"
        case Concurrent():
            text = f"concurrent={profile.concurrency}"
        case Gamma():
            text = f"gamma@{profile.rate:g}/s(b={profile.burstiness:g})"
        case Ramp():
            text = f"ramp@{profile.start_rate:g}→{profile.rate:g}/s({profile.ramp_s:g}s)"
        case Trace():
            text = f"trace:{file_name(profile.path)}" + (f"×{profile.speedup:g}" if profile.speedup != 1 else "")
        case _:
            text = f"{profile.profile}@{profile.rate:g}/s"
    cap = getattr(profile, "max_concurrency", None)
    return text + (f"≤{cap}" if cap is not None else "")
