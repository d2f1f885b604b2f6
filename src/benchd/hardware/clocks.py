"""A GPU's clocks over a stretch of a run: the share of samples under each clock event (NVML's reasons, by DCGM
exporter's names) and the mean SM clock against its maximum; and whether two sides of a comparison ran under
different clock states."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from benchd.hardware.readings import CLOCK_EVENT_OF, Snapshot
from benchd.spec.fields import Documented

# Clock events, by DCGM exporter's names for NVML's reasons (its clock_event label; hardware/readings.py maps NVML's
# to them), in NVML's bit order. SLOWDOWN_EVENTS cut the clocks for the board's or the cooling's sake whatever the
# work: they invalidate (spec/validity.py's max_slowdown_share). The rest are shown: idle, the application clocks and
# display settings, sync boost, and the power cap, which a heavy workload reaches by itself (its figures are those of
# this GPU at its cap).
CLOCK_EVENTS = ("gpu_idle", "clocks_setting", "power_cap", "hw_slowdown", "sync_boost", "sw_thermal", "hw_thermal",
                "hw_power_brake", "display_clocks")
SLOWDOWN_EVENTS = ("hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")
CLOCK_EVENT_NAMES = {"gpu_idle": "idle", "clocks_setting": "application clocks setting", "power_cap": "power cap",
                     "hw_slowdown": "hardware slowdown", "sync_boost": "sync boost",
                     "sw_thermal": "thermal slowdown (SW)", "hw_thermal": "thermal slowdown (HW)",
                     "hw_power_brake": "power brake", "display_clocks": "display clocks setting"}
# Two sides ran under different clock states when an event's share of their samples differs by this much (a fifth
# of the time), or their mean SM clocks by CLOCK_RATIO_GAP of their maximum. Idle and the display clocks are left
# out: they say how busy the GPU was, which is the workload's.
CLOCK_SHARE_GAP = 0.2
CLOCK_RATIO_GAP = 0.05
COMPARED_EVENTS = tuple(e for e in CLOCK_EVENTS if e not in ("gpu_idle", "display_clocks"))


@dataclass(slots=True, frozen=True)
class ClockShares:
    """One GPU over a stage: the share of its samples under each clock event (CLOCK_EVENTS)."""

    gpu: str
    samples: int
    events: dict[str, float]


class GPUClocks(Documented):
    gpu: str
    """NVML's index, as the hardware series' gpu label."""
    samples: int
    """Samples whose clock events were read."""
    events: dict[str, float]
    """Each clock event's share of those samples."""
    sm_clock_mean_hertz: float | None = None
    """The mean SM clock over them."""
    sm_clock_max_hertz: float | None = None
    """The GPU's maximum SM clock."""

    @property
    def sm_clock_ratio(self) -> float | None:
        if self.sm_clock_mean_hertz is None or not self.sm_clock_max_hertz:
            return None
        return self.sm_clock_mean_hertz / self.sm_clock_max_hertz

    def shares(self) -> ClockShares:
        return ClockShares(self.gpu, self.samples, dict(self.events))


def stage_clocks(snapshots: Sequence[Snapshot], start: float, end: float, gpus: Iterable[str]) -> list[GPUClocks]:
    """Each of the GPUs (NVML indices) over the samples read in [start, end]; where none was (a stage shorter than
    the sampler's interval), the latest one read before end. MIG instances share their GPU's clocks: not counted."""
    wanted = set(gpus)
    inside = [s for s in snapshots if start <= s.t <= end] or [s for s in snapshots if s.t <= end][-1:]
    out = []
    for gpu in sorted(wanted, key=lambda g: (len(g), g)):
        readings = [g for s in inside for g in s.gpus if g.gpu == gpu and g.mig is None]
        if not readings:
            continue
        judged = [g.throttle for g in readings if g.throttle]
        counts = dict.fromkeys(CLOCK_EVENTS, 0)
        for reasons in judged:
            for reason, active in reasons.items():
                if active and (event := CLOCK_EVENT_OF.get(reason)) is not None:
                    counts[event] += 1
        clocks = [g.values["sm_clock_hertz"] for g in readings if "sm_clock_hertz" in g.values]
        peaks = [g.values["sm_clock_max_hertz"] for g in readings if "sm_clock_max_hertz" in g.values]
        out.append(GPUClocks(
            gpu=gpu, samples=len(judged),
            events={e: n / len(judged) for e, n in counts.items()} if judged else {},
            sm_clock_mean_hertz=sum(clocks) / len(clocks) if clocks else None,
            sm_clock_max_hertz=max(peaks) if peaks else None))
    return out


def _side(runs: Iterable[Iterable[GPUClocks | dict]]) -> tuple[dict[str, float], float | None] | None:
    """A side's mean share of each event over its runs' GPUs, and its mean SM clock ratio; None without samples."""
    gpus = [g if isinstance(g, GPUClocks) else GPUClocks.model_validate(g) for run in runs for g in run or ()]
    gpus = [g for g in gpus if g.samples]
    if not gpus:
        return None
    shares = {e: sum(g.events.get(e, 0.0) for g in gpus) / len(gpus) for e in COMPARED_EVENTS}
    ratios = [r for g in gpus if (r := g.sm_clock_ratio) is not None]
    return shares, sum(ratios) / len(ratios) if ratios else None


def clock_difference(a: Iterable[Iterable[GPUClocks | dict]], b: Iterable[Iterable[GPUClocks | dict]]) -> str | None:
    """A sentence when the two sides (each a list of runs' GPUs) ran under different clock states: an event's mean
    share of samples CLOCK_SHARE_GAP apart, or mean SM clocks CLOCK_RATIO_GAP of their maximum apart; None when
    they did not, or either side has no samples."""
    side_a, side_b = _side(a), _side(b)
    if side_a is None or side_b is None:
        return None
    (shares_a, ratio_a), (shares_b, ratio_b) = side_a, side_b
    found = [f"{CLOCK_EVENT_NAMES[e]} ({e}) in {shares_a[e]:.0%} of A's samples against {shares_b[e]:.0%} of B's"
             for e in COMPARED_EVENTS if abs(shares_a[e] - shares_b[e]) >= CLOCK_SHARE_GAP]
    if ratio_a is not None and ratio_b is not None and abs(ratio_a - ratio_b) >= CLOCK_RATIO_GAP:
        found.append(f"mean SM clock {ratio_a:.0%} of its maximum on A against {ratio_b:.0%} on B")
    if not found:
        return None
    return "the two sides ran under different clock states: " + "; ".join(found)
