"""The fleet's view: for each workload and GPU model, the distribution across nodes of their newest runs, each node's
place in it with an interval, decided by the deciding rule (measure/sequential.py), outliers flagged and explained
by what sets them apart (docs/guides/fleet.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from benchd.measure.catalog import Figure, figure
from benchd.measure.cost import GoodTokens
from benchd.measure.history import StackShift, clock_state
from benchd.measure.sequential import Decision
from benchd.measure.stack import stack_of
from benchd.spec.decide import CONFIDENCE, EFFECT
from benchd.spec.fields import Documented

if TYPE_CHECKING:
    from benchd.hardware.sampler import HardwareSummary
    from benchd.measure.outcome import RunOutcome
    from benchd.measure.summary import StageSummary


# The fleet's figures, each node's the median of its newest runs': named, united and judged worse the catalog's way
# (measure/catalog.py), output tok/s per GPU (run_row divides a run's by its GPUs).
FIGURES: dict[str, Figure] = {key: figure(key) for key in (
    "output_tokens_per_s", "itl_s.p50", "ttft_s.p50", "ttft_s.p99", "itl_s.p99", "of_bound", "energy_per_token_j",
    "energy_per_good_token_j")}
FIGURES["output_tokens_per_s"] = replace(FIGURES["output_tokens_per_s"],
                                         name=f"{FIGURES['output_tokens_per_s'].name} per GPU")
JUDGED = ["output_tokens_per_s", "itl_s.p50"]  # decide whether a node is an outlier (its error rate split over these)
QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
RUNS = 20  # a node's newest runs of a workload the fleet keeps (store/fleet.py) and its verdict looks over


class FleetSettings(BaseModel):
    """The fleet's view (docs/guides/fleet.md): each node's newest runs against the other nodes of its GPU model."""

    model_config = ConfigDict(extra="forbid")

    effect: Annotated[float, Field(gt=0, lt=1)] = EFFECT  # a node this much slower than the fleet's median is flagged
    # 1 − the chance a node's verdict decides wrongly over its RUNS looks, spent over the judged figures too
    confidence: Annotated[float, Field(gt=0.5, lt=1)] = CONFIDENCE
    max_age_s: Annotated[float, Field(gt=0)] = 7 * 86400.0  # runs older than this are no node's place
    refresh_s: Annotated[float, Field(gt=0)] = 60.0  # this node's place in the fleet, read again (its gauges)
    # Change points of a figure on nodes of one GPU model this close in time are one change: the fleet's when on
    # most of its nodes (a DaemonSet rolls a new image out over hours), a node's when on few.
    change_window_s: Annotated[float, Field(gt=0)] = 6 * 3600.0


# ---- a run as the fleet keeps it --------------------------------------------------------------------------


def run_row(outcome: RunOutcome) -> dict[str, Any] | None:
    """What the fleet keeps of a run as it ends (store/fleet.py writes it); None for a run it does not compare."""
    if outcome.status != "succeeded" or outcome.spec.kind != "generate" or outcome.metadata is None:
        return None
    return row_of(outcome.spec.workload.stage_count(), outcome.spec.runner, outcome.stages, outcome.parts,
                  outcome.metadata.model_dump(mode="json"), outcome.hardware, outcome.good_tokens,
                  outcome.energy_per_token_j, outcome.valid)


def row_of(count: int, engine: str, stages: Sequence[StageSummary], parts: dict | None, metadata: dict,
           hardware: HardwareSummary | None, good: GoodTokens | None, energy_per_token_j: float | None,
           valid: bool | None) -> dict[str, Any] | None:
    """A succeeded generation run's fleet row: its figures over its first stage (over a run in rounds, the median
    of its rounds' first stages; tok/s per device), its good tokens, its clock state and host load, and its stack.
    count: its workload's stages."""
    if not stages or not metadata.get("device_name"):
        return None
    rounds = int((parts or {}).get("rounds", 1))
    firsts = [stages[r * count] for r in range(rounds) if r * count < len(stages)]
    devices = good.devices if good is not None else len((parts or {}).get("gpus") or {}) or 1

    def median(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return float(np.median(known)) if known else None

    throughput = median([s.output_tokens_per_s for s in firsts])
    energy = good.energy_j / good.output_tokens if good is not None and good.energy_j is not None \
        and good.output_tokens else energy_per_token_j
    figures = {
        "output_tokens_per_s": throughput / devices if throughput is not None else None,
        "itl_s.p50": median([s.itl_s.p50 for s in firsts]), "ttft_s.p50": median([s.ttft_s.p50 for s in firsts]),
        "ttft_s.p99": median([s.ttft_s.p99 for s in firsts]), "itl_s.p99": median([s.itl_s.p99 for s in firsts]),
        "of_bound": median([(s.roofline or {}).get("of_bound") for s in firsts]),
        "energy_per_token_j": energy,
        "energy_per_good_token_j": good.energy_per_good_token_j if good is not None else None,
    }
    clocks = [c.sm_clock_ratio for s in firsts for c in s.clocks if c.sm_clock_ratio is not None]
    state = {"throttled_fraction": hardware.throttled_fraction if hardware else None,
             "clock_state": clock_state(hardware.throttled_fraction if hardware else None),
             "sm_clock_ratio": float(np.mean(clocks)) if clocks else None,
             "cpu_utilization_mean": hardware.cpu_utilization_mean if hardware else None,
             "gpu_utilization_mean": hardware.gpu_utilization_mean if hardware else None}
    return {"device": metadata["device_name"], "valid": valid,
            "figures": {k: v for k, v in figures.items() if v is not None and math.isfinite(v)},
            "good_output_tokens": good.good_output_tokens if good else None,
            "device_seconds": good.device_seconds if good else None, "energy_j": good.energy_j if good else None,
            "state": state,
            "stack": stack_of({"engine": engine}, metadata, hardware.model_dump(mode="json") if hardware else None)}


@dataclass(slots=True)
class FleetRun:
    """One run as the store's fleet rows hold it."""

    run_id: str
    workload: str
    node: str
    device: str
    at: datetime
    valid: bool | None
    figures: dict[str, float]
    good_output_tokens: int | None = None
    device_seconds: float | None = None
    energy_j: float | None = None
    state: dict[str, Any] = field(default_factory=dict)
    stack: dict[str, str] = field(default_factory=dict)


# ---- the view ------------------------------------------------------------------------------------------


class Distribution(Documented):
    """A figure across the nodes: each node's value (the median of its runs') at these quantiles."""

    nodes: int
    """Nodes with the figure."""
    quantiles: dict[str, float]
    """q → the value at it (0: the lowest, 0.5: the median, 1: the highest)."""


class NodePlace(Documented):
    """One node in its GPU model's fleet for one workload."""

    node: str
    """The node."""
    runs: int
    """Its valid runs in the window (its newest, at most 20), each a round of its verdict."""
    excluded: int
    """Its invalid runs in the window, left out."""
    latest: datetime
    """Its newest run's time."""
    latest_run: str
    """Its newest run's id."""
    values: dict[str, float]
    """Each figure: the median of its runs'."""
    relative: dict[str, float]
    """Each figure over the median of the other nodes' values (1: as the fleet)."""
    decisions: dict[str, Decision]
    """Each figure's place, decided over its runs against the other nodes' median: slower (worse by more than the
    effect: higher for a latency or energy), equivalent, faster, or inconclusive."""
    z: dict[str, float]
    """Each figure's robust z-score among the nodes: (ln value − the median's) ÷ 1.4826 MAD."""
    outlier: bool
    """Worse than the fleet by more than the effect on a judged figure (output tok/s, ITL p50), decided."""
    reasons: list[str]
    """Why it is flagged, a sentence a figure."""
    stack: list[StackShift]
    """Where its stack differs from the other nodes' most common (before: theirs, after: its own)."""
    state: list[str]
    """Where its clocks or host load differ from the other nodes' (clock state, SM clock, CPU)."""
    good_output_tokens: int | None
    """Good tokens over its runs."""
    energy_per_good_token_j: float | None
    """Its runs' GPU energy over their good tokens."""
    cost_per_million_good_tokens: float | None
    """At the prices of the daemon that answers (device-hours and kWh over its runs, per million good tokens)."""


class FleetGroup(Documented):
    """One GPU model's nodes for one workload."""

    workload: str
    """The workload."""
    device: str
    """The GPU model (or CPU) its nodes ran it on."""
    nodes: int
    """Nodes with a valid run in the window."""
    runs: int
    """Their valid runs in the window."""
    distribution: dict[str, Distribution]
    """Each figure across the nodes."""
    places: list[NodePlace]
    """Each node, the outliers first, then by output tok/s."""
    outliers: list[str]
    """The nodes flagged."""
    energy_per_good_token_j: float | None
    """The fleet's: every node's runs' energy over their good tokens."""
    cost_per_million_good_tokens: float | None
    """The fleet's, at the answering daemon's prices."""


class FleetView(Documented):
    """The fleet's view of its workloads (GET /fleet)."""

    groups: list[FleetGroup]
    """One a workload and GPU model."""
    effect: float
    """The effect each node's verdict decides."""
    confidence: float
    """1 − the chance a node's verdict decides wrongly (spent over the judged figures and over its runs as
    looks)."""
    currency: str | None
    """What the costs are in (null: no price set)."""
    truncated: bool = False
    """More nodes ran a workload than one view reads: the newest were read."""
