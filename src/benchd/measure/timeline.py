"""A run's timeline for report pages: engine load and hardware samples over the run, in seconds from its start."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from benchd.hardware.readings import Snapshot

GPU_SERIES = {"utilization_ratio": "utilization", "power_watts": "power_watts",
              "memory_used_bytes": "memory_used_bytes"}


@dataclass(slots=True, frozen=True)
class LoadSample:
    t: float  # perf_counter()
    running: int
    waiting: int
    kv_usage: float | None  # used / total blocks of the paged cache
    output_tokens_per_s: float  # over the stage's measured window so far


@dataclass(slots=True, frozen=True)
class StageSpan:
    index: int
    label: str
    start_s: float  # perf_counter()
    end_s: float | None


def build(origin: float, stages: Sequence[StageSpan], load: Sequence[LoadSample],
          snapshots: Sequence[Snapshot], server: dict | None = None) -> dict:
    """Plain data (stored as JSON): every time is seconds from origin, the run's start; server: an openai run's
    server timeline (server_scrape.ServerScrape.timeline), when its metrics were read."""
    gpus: dict[str, dict[str, list[float | None]]] = {}
    inside = [s for s in snapshots if s.t >= origin - 1.0]  # the sample taken as the run began is kept
    for i, snapshot in enumerate(inside):
        for reading in snapshot.gpus:
            if reading.mig is not None:
                continue
            series = gpus.setdefault(reading.gpu, {name: [None] * len(inside) for name in GPU_SERIES.values()})
            for key, name in GPU_SERIES.items():
                series[name][i] = reading.values.get(key)
    built = {
        "stages": [{"index": s.index, "label": s.label, "start_s": s.start_s - origin,
                    "end_s": None if s.end_s is None else s.end_s - origin} for s in stages],
        "load": {"t": [x.t - origin for x in load], "running": [x.running for x in load],
                 "waiting": [x.waiting for x in load], "kv_usage": [x.kv_usage for x in load],
                 "output_tokens_per_s": [x.output_tokens_per_s for x in load]},
        "hardware": {"t": [s.t - origin for s in inside], "cpu_utilization": [s.host.cpu_ratio for s in inside],
                     "gpus": gpus},
    }
    if server is not None:
        built["server"] = server
    return built
