"""What a good token costs: the energy a run's devices spent per output token that met its SLO, and the money per
million of them from the operator's prices per device-hour and per kWh (docs/figures.md, "What a good token
costs")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field

from benchd.spec.fields import Documented

if TYPE_CHECKING:
    from benchd.hardware.sampler import HardwareSummary
    from benchd.measure.summary import StageSummary

J_PER_KWH = 3.6e6


class Prices(BaseModel):
    """What the node costs (BENCHD_PRICES__*): a GPU's hour (a CPU worker's, on a node without GPUs) and a kWh of the
    GPUs' energy; unset, no cost is given (the energy per good token still is)."""

    model_config = ConfigDict(extra="forbid")

    gpu_hour: Annotated[float, Field(ge=0)] | None = None  # per device-hour the run held (its GPUs, or CPU worker)
    kwh: Annotated[float, Field(ge=0)] | None = None  # per kWh of its GPUs' energy counters
    currency: Annotated[str, Field(min_length=1, max_length=8)] = "USD"  # what the prices are in, as said back

    @property
    def set(self) -> bool:
        return self.gpu_hour is not None or self.kwh is not None


class GoodTokens(Documented):
    """A run's good tokens and what they took: the figures a good token's energy and cost are made of."""

    good_output_tokens: int
    """Output tokens of its stages' good requests (summed over its stages: StageSummary.good_output_tokens)."""
    output_tokens: int
    """Every measured output token."""
    devices: int
    """Devices the run held: its GPUs (every GPU's of a run on every GPU, a group's), or one CPU worker."""
    device_seconds: float
    """Devices × its measured window (the first stage's measured start to the last stage's end)."""
    energy_j: float | None
    """Its GPUs' energy over that window (null: no GPU, or a counter missing)."""
    energy_per_good_token_j: float | None
    """energy_j ÷ good_output_tokens."""
    cost_per_million_good_tokens: float | None = None
    """(device-hours × gpu_hour + kWh × kwh) ÷ good tokens × 10⁶, at the prices of the daemon that ran it (null: no
    price set, no good token, or a priced quantity unknown)."""
    currency: str | None = None
    """What that cost is in."""

    def cost_per_million(self, prices: Prices) -> float | None:
        """At these prices: null where none is set, no token was good, or a priced quantity is unknown (energy on a
        node whose counters were not read): a cost is never understated."""
        if not prices.set or not self.good_output_tokens:
            return None
        cost = 0.0
        if prices.gpu_hour is not None:
            cost += self.device_seconds / 3600 * prices.gpu_hour
        if prices.kwh is not None:
            if self.energy_j is None:
                return None
            cost += self.energy_j / J_PER_KWH * prices.kwh
        return cost / self.good_output_tokens * 1e6

    def priced(self, prices: Prices) -> GoodTokens:
        return self.model_copy(update={"cost_per_million_good_tokens": self.cost_per_million(prices),
                                       "currency": prices.currency if prices.set else None})


def good_tokens(stages: Sequence[StageSummary], hardware: HardwareSummary | None, devices: Sequence[str],
                prices: Prices | None = None) -> GoodTokens | None:
    """A generation run's good tokens over every stage, its devices (GPU labels: "0", "1+2" for a group; "" or
    "cpu…" for a CPU worker) and its window; None with no stage, or a stage stored before good tokens were
    counted."""
    if not stages or any(s.good_output_tokens is None for s in stages):
        return None
    gpus = [gpu for device in devices for gpu in device.split("+") if gpu and not gpu.startswith("cpu")]
    window = hardware.window_s if hardware is not None else sum(s.duration_s for s in stages)
    energy = None
    if gpus and hardware is not None:
        found = {g.gpu: g.energy_joules for g in hardware.gpus}
        known = [joules for gpu in gpus if (joules := found.get(gpu)) is not None]
        if len(known) == len(gpus):
            energy = sum(known)
    good = sum(s.good_output_tokens or 0 for s in stages)
    count = len(gpus) or max(1, len(devices))
    out = GoodTokens(good_output_tokens=good, output_tokens=sum(s.output_tokens for s in stages), devices=count,
                     device_seconds=count * window, energy_j=energy,
                     energy_per_good_token_j=energy / good if energy is not None and good else None)
    return out.priced(prices) if prices is not None else out
