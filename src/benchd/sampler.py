"""A thread that samples the hardware every interval and turns a run's samples into its hardware summary."""

from __future__ import annotations

import threading

from pydantic import BaseModel

from benchd.hardware import HardwareReader, Snapshot


class GPUSummary(BaseModel):
    gpu: str
    uuid: str
    name: str
    utilization_mean: float | None = None
    utilization_max: float | None = None
    memory_peak_bytes: float | None = None
    power_mean_watts: float | None = None
    energy_joules: float | None = None
    throttled_fraction: float | None = None


class HardwareSummary(BaseModel):
    samples: int
    window_s: float
    gpu_utilization_mean: float | None = None  # over samples and GPUs
    gpu_utilization_max: float | None = None
    gpu_memory_peak_bytes: float | None = None  # the largest of any one GPU
    power_mean_watts: float | None = None  # all GPUs together
    energy_joules: float | None = None  # all GPUs together, counter difference over the window
    energy_per_output_token_joules: float | None = None
    throttled_fraction: float | None = None  # of samples where some GPU was slowed (power, thermal, hw)
    cpu_utilization_mean: float | None = None
    gpus: list[GPUSummary] = []


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _energy_at(samples: list[tuple[float, float]], t: float) -> float:
    """The energy counter at t, interpolated linearly between the samples around it (clamped at the ends)."""
    if t <= samples[0][0]:
        return samples[0][1]
    for (t0, e0), (t1, e1) in zip(samples, samples[1:]):
        if t <= t1:
            return e0 + (e1 - e0) * (t - t0) / (t1 - t0) if t1 > t0 else e1
    return samples[-1][1]


def summarize(snapshots: list[Snapshot], start: float, end: float, output_tokens: int) -> HardwareSummary:
    """Figures over the samples inside [start, end]; energy from the counters at the window's two ends."""
    inside = [s for s in snapshots if start <= s.t <= end] or snapshots[-1:]
    gpus: list[GPUSummary] = []
    keys = {(g.gpu, g.uuid, g.name) for s in snapshots for g in s.gpus}
    for gpu, uuid, name in sorted(keys):
        readings = [g for s in inside for g in s.gpus if g.uuid == uuid]
        util = [g.values["utilization_ratio"] for g in readings if "utilization_ratio" in g.values]
        memory = [g.values["memory_used_bytes"] for g in readings if "memory_used_bytes" in g.values]
        power = [g.values["power_watts"] for g in readings if "power_watts" in g.values]
        energy = [(s.t, g.values["energy_joules"]) for s in snapshots for g in s.gpus
                  if g.uuid == uuid and "energy_joules" in g.values]
        gpus.append(GPUSummary(
            gpu=gpu, uuid=uuid, name=name,
            utilization_mean=_mean(util), utilization_max=max(util, default=None),
            memory_peak_bytes=max(memory, default=None), power_mean_watts=_mean(power),
            energy_joules=_energy_at(energy, end) - _energy_at(energy, start) if energy else None,
            throttled_fraction=_mean([float(g.throttled) for g in readings if g.throttle]),
        ))
    energies = [g.energy_joules for g in gpus if g.energy_joules is not None]
    energy = sum(energies) if energies else None
    throttle_samples = [s for s in inside if any(g.throttle for g in s.gpus)]
    return HardwareSummary(
        samples=len(inside),
        window_s=end - start,
        gpu_utilization_mean=_mean([g.values["utilization_ratio"] for s in inside for g in s.gpus
                                    if "utilization_ratio" in g.values]),
        gpu_utilization_max=max((g.utilization_max for g in gpus if g.utilization_max is not None), default=None),
        gpu_memory_peak_bytes=max((g.memory_peak_bytes for g in gpus if g.memory_peak_bytes is not None),
                                  default=None),
        power_mean_watts=sum(p) if (p := [g.power_mean_watts for g in gpus if g.power_mean_watts is not None])
        else None,
        energy_joules=energy,
        energy_per_output_token_joules=energy / output_tokens if energy is not None and output_tokens else None,
        throttled_fraction=_mean([float(any(g.throttled for g in s.gpus)) for s in throttle_samples]),
        cpu_utilization_mean=_mean([s.host.cpu_ratio for s in inside if s.host.cpu_ratio is not None]),
        gpus=gpus,
    )


class HardwareSampler:
    """Samples every interval_s while a run records; reads synchronously at the run's two ends so that
    energy covers the window exactly."""

    def __init__(self, reader: HardwareReader, interval_s: float = 1.0) -> None:
        self.reader, self.interval_s = reader, interval_s
        self._samples: list[Snapshot] = []
        self._recording = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="benchd-hardware", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def gpu_count(self) -> int:
        return len(self.reader.nvml.devices)

    def gpu_free_bytes(self, index: str) -> int | None:
        """Free memory of the GPU with this NVML index, None when unknown."""
        for reading in self.reader.nvml.read():
            if reading.gpu == index and "memory_free_bytes" in reading.values:
                return int(reading.values["memory_free_bytes"])
        return None

    def begin(self) -> None:
        """Start recording a run's samples (a first one now)."""
        first = self.reader.read()
        with self._lock:
            self._samples = [first]
            self._recording = True

    def end(self, start: float, end: float, output_tokens: int) -> HardwareSummary:
        """Stop recording and summarize the window [start, end] (perf_counter seconds)."""
        last = self.reader.read()
        with self._lock:
            self._recording = False
            samples, self._samples = [*self._samples, last], []
        return summarize(samples, start, end, output_tokens)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self._recording:
                snapshot = self.reader.read()
                with self._lock:
                    if self._recording:
                        self._samples.append(snapshot)
