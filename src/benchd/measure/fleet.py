"""The fleet's view: for each workload and GPU model, the distribution across nodes of their newest runs, each node's
place in it with an interval, decided by the deciding rule (measure/sequential.py), outliers flagged and explained
by what sets them apart (docs/guides/fleet.md)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from benchd.measure.cost import GoodTokens, Prices
from benchd.measure.history import StackShift, clock_state, stack_of
from benchd.measure.sequential import Decision, against_reference, look
from benchd.spec.decide import CONFIDENCE, EFFECT
from benchd.spec.fields import Documented

if TYPE_CHECKING:
    from benchd.hardware.sampler import HardwareSummary
    from benchd.measure.outcome import RunOutcome
    from benchd.measure.summary import StageSummary


@dataclass(slots=True, frozen=True)
class FleetFigure:
    label: str
    unit: str
    higher_is_worse: bool
    judged: bool  # decides whether a node is an outlier (its error rate split over these)


FIGURES: dict[str, FleetFigure] = {
    "output_tokens_per_s": FleetFigure("output tok/s per GPU", "tok/s", False, True),
    "itl_s.p50": FleetFigure("ITL p50", "s", True, True),
    "ttft_s.p50": FleetFigure("TTFT p50", "s", True, False),
    "ttft_s.p99": FleetFigure("TTFT p99", "s", True, False),
    "itl_s.p99": FleetFigure("ITL p99", "s", True, False),
    "of_bound": FleetFigure("fraction of the roofline bound", "", False, False),
    "energy_per_token_j": FleetFigure("energy per output token", "J", True, False),
    "energy_per_good_token_j": FleetFigure("energy per good token", "J", True, False),
}
JUDGED = [name for name, f in FIGURES.items() if f.judged]
QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
RUNS = 20  # a node's newest runs of a workload the fleet keeps (store/fleet.py) and its verdict looks over
MAX_NODES = 10_000  # nodes of one workload and GPU model a view reads at most


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
            "stack": stack_of(metadata, hardware.model_dump(mode="json") if hardware else None, engine)}


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


def view(runs: Sequence[FleetRun], settings: FleetSettings | None = None, prices: Prices | None = None,
         only: str | None = None) -> FleetView:
    """The view over the fleet's rows (any number of workloads and GPU models): a group each; only: that node's
    place alone in each (the distribution is still every node's), and only the groups it is in."""
    settings = settings or FleetSettings()
    prices = prices or Prices()
    groups: dict[tuple[str, str], list[FleetRun]] = {}
    for run in runs:
        groups.setdefault((run.workload, run.device), []).append(run)
    if only is not None:
        groups = {key: members for key, members in groups.items() if any(r.node == only for r in members)}
    return FleetView(groups=[group(workload, device, members, settings, prices, only)
                             for (workload, device), members in sorted(groups.items())],
                     effect=settings.effect, confidence=settings.confidence,
                     currency=prices.currency if prices.set else None)


def group(workload: str, device: str, runs: Sequence[FleetRun], settings: FleetSettings, prices: Prices,
          only: str | None = None) -> FleetGroup:
    by_node: dict[str, list[FleetRun]] = {}
    for run in sorted(runs, key=lambda r: (r.at, r.run_id)):
        by_node.setdefault(run.node, []).append(run)
    by_node = {node: members[-RUNS:] for node, members in by_node.items()}
    held = {node: [r for r in members if r.valid is not False] for node, members in by_node.items()}
    held = {node: members for node, members in held.items() if members}
    values = {node: _medians(members) for node, members in held.items()}
    distribution = {}
    for name in FIGURES:
        known = [v[name] for v in values.values() if name in v]
        if known:
            distribution[name] = Distribution(nodes=len(known), quantiles={
                f"{q:g}": float(np.quantile(known, q)) for q in QUANTILES})
    places = [_place(node, members, len(by_node[node]) - len(members), values, held, settings, prices)
              for node, members in held.items() if only is None or node == only]
    places.sort(key=lambda p: (not p.outlier, p.values.get("output_tokens_per_s", math.inf), p.node))
    everything = [r for members in held.values() for r in members]
    priced = _good(everything)
    return FleetGroup(workload=workload, device=device, nodes=len(held), runs=len(everything),
                      distribution=distribution, places=places,
                      outliers=[p.node for p in places if p.outlier],
                      energy_per_good_token_j=priced.energy_per_good_token_j if priced else None,
                      cost_per_million_good_tokens=priced.cost_per_million(prices) if priced else None)


def _medians(runs: Sequence[FleetRun]) -> dict[str, float]:
    out = {}
    for name in FIGURES:
        known = [r.figures[name] for r in runs if r.figures.get(name) is not None and r.figures[name] > 0]
        if known:
            out[name] = float(np.median(known))
    return out


def _good(runs: Sequence[FleetRun]) -> GoodTokens | None:
    """The runs' good tokens together (their energy only where every run has it)."""
    counted = [r for r in runs if r.good_output_tokens is not None and r.device_seconds is not None]
    if not counted:
        return None
    good = sum(r.good_output_tokens for r in counted)
    energy = sum(r.energy_j for r in counted) if all(r.energy_j is not None for r in counted) else None
    return GoodTokens(good_output_tokens=good, output_tokens=good, devices=0,
                      device_seconds=sum(r.device_seconds for r in counted), energy_j=energy,
                      energy_per_good_token_j=energy / good if energy is not None and good else None)


def _place(node: str, runs: list[FleetRun], invalid: int, values: dict[str, dict[str, float]],
           held: dict[str, list[FleetRun]], settings: FleetSettings, prices: Prices) -> NodePlace:
    """A node against the median of the other nodes' values, figure by figure: each run's ln(figure ÷ that
    median) a round of the deciding rule, the median's own uncertainty added (from the others' spread)."""
    others = [n for n in values if n != node]
    relative, decisions, z, reasons = {}, {}, {}, []
    confidence = 1 - (1 - settings.confidence) / len(JUDGED)  # the judged figures share the error rate
    for name, figure in FIGURES.items():
        own = values[node].get(name)
        peers = [values[n][name] for n in others if name in values[n]]
        logs = np.log([values[n][name] for n in values if name in values[n]])
        if own is not None and len(logs) >= 3:
            mad = float(np.median(np.abs(logs - np.median(logs))))
            if mad > 0:
                z[name] = (math.log(own) - float(np.median(logs))) / (1.4826 * mad)
        if own is None or not peers:
            continue
        reference = float(np.median(peers))
        relative[name] = own / reference
        own_runs = [r.figures[name] for r in runs if r.figures.get(name) is not None and r.figures[name] > 0]
        estimate = against_reference(own_runs, reference, _reference_variance(name, others, held, values),
                                     figure.higher_is_worse)
        decision = look(estimate, len(own_runs), settings.effect, confidence, RUNS)
        decisions[name] = decision
        if figure.judged and decision.verdict == "slower":
            reasons.append(f"{figure.label} {relative[name]:.3g}× the fleet's median; its speed: "
                           + decision.says("the fleet's ÷ its own") if figure.higher_is_worse
                           else decision.says(f"{figure.label} ÷ the fleet's median"))
    stack = apart([r.stack for n in others for r in held[n][-1:]], runs[-1].stack)
    good = _good(runs)
    return NodePlace(
        node=node, runs=len(runs), excluded=invalid, latest=runs[-1].at, latest_run=runs[-1].run_id,
        values=values[node], relative=relative, decisions=decisions, z=z, outlier=bool(reasons), reasons=reasons,
        stack=stack,
        state=state_difference(runs, [r for n in others for r in held[n]]),
        good_output_tokens=good.good_output_tokens if good else None,
        energy_per_good_token_j=good.energy_per_good_token_j if good else None,
        cost_per_million_good_tokens=good.cost_per_million(prices) if good else None)


# Fields of a run's stack that differ from node to node by nature: no explanation of a node apart.
NOT_STACK = {"host", "gpus", "label"}


def apart(peers: list[dict[str, str]], own: dict[str, str]) -> list[StackShift]:
    """Where a node's stack differs from what most of its peers have (more than half of them: a field they do not
    agree on explains nothing), before: theirs, after: its own."""
    out = []
    for key in dict.fromkeys([*(k for s in peers for k in s), *own]):
        if key in NOT_STACK:
            continue
        value, count = Counter(s.get(key) for s in peers).most_common(1)[0] if peers else (None, 0)
        if count * 2 > len(peers) and own.get(key) != value:
            out.append(StackShift(field=key, before=value, after=own.get(key)))
    return out


def _reference_variance(name: str, others: list[str], held: dict[str, list[FleetRun]],
                        values: dict[str, dict[str, float]]) -> float:
    """The variance of ln(the other nodes' median): with one other node, its mean's (its runs' spread over their
    count); with more, the median's (π/2 · σ² / n, σ the others' robust spread, at least their runs' own)."""
    own = [[math.log(r.figures[name]) for r in held[n] if r.figures.get(name) and r.figures[name] > 0]
           for n in others]
    own = [x for x in own if x]
    if not own:
        return 0.0
    within = float(np.mean([np.var(x, ddof=1) / len(x) if len(x) > 1 else 0.0 for x in own]))
    if len(own) == 1:
        return within
    logs = np.log([values[n][name] for n in others if name in values[n]])
    between = (1.4826 * float(np.median(np.abs(logs - np.median(logs))))) ** 2
    return math.pi / 2 * max(between, within) / len(own)


def state_difference(runs: list[FleetRun], peers: list[FleetRun]) -> list[str]:
    """Where the node's clocks or host load differ from the other nodes' runs: its clock state, the mean SM clock
    over its maximum (5 % apart), the host's CPU (20 points apart)."""
    out = []
    mine = Counter(r.state.get("clock_state") for r in runs).most_common(1)[0][0]
    theirs = Counter(r.state.get("clock_state") for r in peers).most_common(1)[0][0] if peers else None
    if peers and mine != theirs:
        out.append(f"clock state {mine} (the fleet's: {theirs})")
    for key, what, apart, scale in (("sm_clock_ratio", "SM clock", 0.05, "of its maximum"),
                                    ("cpu_utilization_mean", "host CPU", 0.2, "busy")):
        own = [r.state[key] for r in runs if r.state.get(key) is not None]
        others = [r.state[key] for r in peers if r.state.get(key) is not None]
        if own and others and abs(float(np.median(own)) - float(np.median(others))) > apart:
            out.append(f"{what} {np.median(own):.0%} {scale} (the fleet's: {np.median(others):.0%})")
    return out
