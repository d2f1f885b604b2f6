"""The one thread that reads the hardware: every interval for /metrics, on demand at a run's two ends, and a run's
samples turned into its hardware summary."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from itertools import pairwise

from pydantic import BaseModel

from benchd.hardware.reader import HardwareReader
from benchd.hardware.readings import Snapshot

log = logging.getLogger("benchd.hardware.reader")


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
    """The energy counter at t, interpolated linearly between the samples around it (samples[0] <= t <= samples[-1])."""
    for (t0, e0), (t1, e1) in pairwise(samples):
        if t <= t1:
            return e0 + (e1 - e0) * (t - t0) / (t1 - t0) if t1 > t0 else e1
    return samples[-1][1]


def _energy(samples: list[tuple[float, float]], start: float, end: float) -> float | None:
    """The counter's increase over [start, end]; None unless samples bracket the window (a read at each end, as
    begin() and end() take), so that a missed read never passes for a smaller figure."""
    samples = sorted(samples)
    if not samples or samples[0][0] > start or samples[-1][0] < end:
        return None
    return _energy_at(samples, end) - _energy_at(samples, start)


def summarize(snapshots: list[Snapshot], start: float, end: float, output_tokens: int) -> HardwareSummary:
    """Figures over the samples inside [start, end] (whole GPUs; MIG instances are not summarized); energy from the
    counters at the window's two ends, each counter placed at the moment it was read."""
    inside = [s for s in snapshots if start <= s.t <= end] or snapshots[-1:]
    gpus: list[GPUSummary] = []
    keys = {(g.gpu, g.uuid, g.name) for s in snapshots for g in s.gpus if g.mig is None}
    for gpu, uuid, name in sorted(keys):
        readings = [g for s in inside for g in s.gpus if g.uuid == uuid and g.mig is None]
        util = [g.values["utilization_ratio"] for g in readings if "utilization_ratio" in g.values]
        memory = [g.values["memory_used_bytes"] for g in readings if "memory_used_bytes" in g.values]
        power = [g.values["power_watts"] for g in readings if "power_watts" in g.values]
        counters = [(g.t if g.t is not None else s.t, g.values["energy_joules"]) for s in snapshots for g in s.gpus
                    if g.uuid == uuid and g.mig is None and "energy_joules" in g.values]
        gpus.append(GPUSummary(
            gpu=gpu, uuid=uuid, name=name,
            utilization_mean=_mean(util), utilization_max=max(util, default=None),
            memory_peak_bytes=max(memory, default=None), power_mean_watts=_mean(power),
            energy_joules=_energy(counters, start, end),
            throttled_fraction=_mean([float(g.throttled) for g in readings if g.throttle]),
        ))
    energies = [g.energy_joules for g in gpus if g.energy_joules is not None]
    energy = sum(energies) if energies else None
    whole = [[g for g in s.gpus if g.mig is None] for s in inside]
    throttle_samples = [gs for gs in whole if any(g.throttle for g in gs)]
    return HardwareSummary(
        samples=len(inside),
        window_s=end - start,
        gpu_utilization_mean=_mean([g.values["utilization_ratio"] for gs in whole for g in gs
                                    if "utilization_ratio" in g.values]),
        gpu_utilization_max=max((g.utilization_max for g in gpus if g.utilization_max is not None), default=None),
        gpu_memory_peak_bytes=max((g.memory_peak_bytes for g in gpus if g.memory_peak_bytes is not None),
                                  default=None),
        power_mean_watts=sum(p) if (p := [g.power_mean_watts for g in gpus if g.power_mean_watts is not None])
        else None,
        energy_joules=energy,
        energy_per_output_token_joules=energy / output_tokens if energy is not None and output_tokens else None,
        throttled_fraction=_mean([float(any(g.throttled for g in gs)) for gs in throttle_samples]),
        cpu_utilization_mean=_mean([s.host.cpu_ratio for s in inside if s.host.cpu_ratio is not None]),
        gpus=gpus,
    )


class Recording:
    """One run's snapshots, from begin() to stop() (or end())."""

    def __init__(self, sampler: HardwareSampler) -> None:
        self.sampler = sampler
        self.snapshots: list[Snapshot] = []
        self.stopped = False

    def stop(self) -> None:
        """Read once more (waited for at most the sampler's wait_s) and stop recording; once."""
        if not self.stopped:
            self.stopped = True
            self.sampler._finish(self)

    def end(self, start: float, end: float, output_tokens: int) -> HardwareSummary:
        """Stop recording and summarize the window [start, end] (perf_counter seconds)."""
        self.stop()
        return summarize(self.snapshots, start, end, output_tokens)


class HardwareSampler:
    """The only reader of the hardware. Its thread reads every interval_s (so /metrics' hardware gauges are at most
    about one interval old) and at once when a run begins or ends (so a run's energy is bracketed by counters read at
    its two ends). Nothing else waits on NVML: a scrape takes the latest snapshot, and begin()/end() wait for their
    read at most wait_s. When no read has completed for stale_after_s the sampler is stalled (a hung driver call):
    /metrics says so, and runs stop waiting for it until a read completes again."""

    def __init__(self, reader: HardwareReader, interval_s: float = 1.0, stale_after_s: float | None = None,
                 wait_s: float = 2.0, on_error: Callable[[str], None] = lambda component: None) -> None:
        self.reader, self.interval_s, self.wait_s, self.on_error = reader, interval_s, wait_s, on_error
        self.stale_after_s = stale_after_s if stale_after_s is not None else max(5.0, 3 * interval_s)
        self._cond = threading.Condition()
        self._latest: Snapshot | None = None
        self._completed = 0  # reads completed so far
        self._reading = False
        self._wake = False  # a run asked for a read now
        self._stopping = False
        self._progress = time.perf_counter()  # when the latest read completed, or the thread started
        self._recordings: list[Recording] = []  # the runs being recorded
        self._warned = False
        self._thread = threading.Thread(target=self._loop, name="benchd-hardware", daemon=True)

    def start(self) -> None:
        self._progress = time.perf_counter()
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(self.wait_s)  # a thread hung in the driver is a daemon thread: it is left behind

    @property
    def latest(self) -> Snapshot | None:
        """The latest complete snapshot; None before the first read completes."""
        return self._latest

    def stalled(self, now: float | None = None) -> bool:
        """No read has completed for stale_after_s (or the thread is gone)."""
        now = time.perf_counter() if now is None else now
        return now - self._progress > self.stale_after_s or (self._thread.ident is not None and
                                                             not self._thread.is_alive() and not self._stopping)

    def watch_process(self, name: str, pid: int) -> None:
        """Report the process's resident memory and CPU beside the daemon's, labelled process=name (e.g. "worker"
        when a worker starts; the same name again after a restart moves the series to the new pid)."""
        self.reader.host.watch(name, pid)

    def unwatch_process(self, name: str) -> None:
        """Stop reporting a process (a worker that stopped for good); one that exits is dropped by itself."""
        self.reader.host.unwatch(name)

    def gpu_free_bytes(self, index: str) -> int | None:
        """Free memory of the GPU with this NVML index in the latest snapshot; None when unknown."""
        latest = self._latest
        for reading in latest.gpus if latest is not None else ():
            if reading.gpu == index and "memory_free_bytes" in reading.values:
                return int(reading.values["memory_free_bytes"])
        return None

    def begin(self) -> Recording:
        """Start recording a run's snapshots: the latest one, and one read now (waited for at most wait_s). Runs may
        overlap: each has its own recording."""
        recording = Recording(self)
        with self._cond:
            if self._latest is not None:
                recording.snapshots.append(self._latest)
            self._recordings.append(recording)
        self._read_now("begins")
        return recording

    def _finish(self, recording: Recording) -> None:
        self._read_now("ends")
        with self._cond:
            if recording in self._recordings:
                self._recordings.remove(recording)

    def _read_now(self, moment: str) -> bool:
        with self._cond:
            if self.stalled() or self._stopping or self._thread.ident is None:
                if not self._warned:
                    log.warning("the hardware sampler is stalled or stopped: a run %s without a fresh reading",
                                moment)
                    self._warned = True
                return False
            # A read under way began before this call: the one after it is the one wanted.
            target = self._completed + (2 if self._reading else 1)
            self._wake = True
            self._cond.notify_all()
            done = self._cond.wait_for(lambda: self._completed >= target or self._stopping, self.wait_s)
        if not done:
            log.warning("a run %s without a fresh hardware reading: none completed within %.1f s", moment, self.wait_s)
        return done

    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    return
                self._reading, self._wake = True, False
            try:
                snapshot = self.reader.read()
            except Exception:  # the thread's one boundary: a reader bug costs a sample, never the sampler
                log.exception("a hardware read failed")
                self.on_error("sampler")
                with self._cond:
                    self._reading = False
                    self._cond.wait(self.interval_s)
                continue
            with self._cond:
                self._reading = False
                self._latest, self._progress = snapshot, time.perf_counter()
                self._completed += 1
                self._warned = False
                for recording in self._recordings:
                    recording.snapshots.append(snapshot)
                self._cond.notify_all()
                due = snapshot.t + self.interval_s
                while not (self._wake or self._stopping) and (left := due - time.perf_counter()) > 0:
                    self._cond.wait(left)
