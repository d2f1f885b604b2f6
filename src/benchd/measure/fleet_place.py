"""Each node's place among the other nodes of its GPU model (measure/fleet.py's view): the group's figures taken once
(each node's median, the sorted logs, each node's spread, the stacks' and clocks' counts), so that a node's place
against the others' median costs O(1) a figure and a fleet's view O(nodes × runs), not their square."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from benchd.measure.cost import GoodTokens, Prices
from benchd.measure.fleet import (
    FIGURES,
    JUDGED,
    QUANTILES,
    RUNS,
    Distribution,
    FleetGroup,
    FleetRun,
    FleetSettings,
    FleetView,
    NodePlace,
)
from benchd.measure.history import StackShift
from benchd.measure.sequential import against_reference, look

EXACT = 50  # up to this many nodes, what the others hold is taken without the node itself exactly; beyond, all's
# Fields of a run's stack that differ from node to node by nature: no explanation of a node apart.
NOT_STACK = {"node", "gpu_uuids", "label"}
STATE = (("sm_clock_ratio", "SM clock", 0.05, "of its maximum"), ("cpu_utilization_mean", "host CPU", 0.2, "busy"))


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


@dataclass(slots=True)
class Figure:
    """One figure over a group's nodes: ln of each node's value, sorted (a leave-one-out median in O(1)), each
    node's within-node variance of its mean ln, and the robust spread across the nodes."""

    rank: dict[str, int]  # node → its place in the sorted logs
    sorted: np.ndarray
    within: dict[str, float]
    within_sum: float
    center: float  # the median of the logs
    sigma: float  # 1.4826 × their median absolute deviation

    @classmethod
    def of(cls, name: str, held: dict[str, list[FleetRun]], values: dict[str, dict[str, float]]) -> Figure | None:
        nodes = [n for n in values if name in values[n]]
        if not nodes:
            return None
        logs = np.log([values[n][name] for n in nodes])
        order = np.argsort(logs, kind="stable")
        within = {}
        for n in nodes:
            x = np.log([r.figures[name] for r in held[n] if r.figures.get(name) and r.figures[name] > 0])
            within[n] = float(x.var(ddof=1)) / len(x) if len(x) > 1 else 0.0
        center = float(np.median(logs))
        return cls({nodes[i]: rank for rank, i in enumerate(order)}, logs[order], within, sum(within.values()),
                   center, 1.4826 * float(np.median(np.abs(logs - center))))

    def others(self, node: str) -> int:
        return len(self.sorted) - (node in self.rank)

    def median_without(self, node: str) -> float:
        """ln of the median of the other nodes' values."""
        k = self.rank.get(node)
        if k is None:
            return float(np.median(self.sorted))
        m = len(self.sorted) - 1

        def at(j: int) -> float:  # the j-th of the others, in order
            return float(self.sorted[j if j < k else j + 1])

        return at(m // 2) if m % 2 else (at(m // 2 - 1) + at(m // 2)) / 2

    def reference_variance(self, node: str) -> float:
        """The variance of ln(the others' median): with one other node, its mean's; with more, the median's (π/2 ·
        σ² / n, σ the others' robust spread, at least their runs' own)."""
        count = self.others(node)
        own = self.within.get(node, 0.0)
        within = (self.within_sum - own) / count if count else 0.0
        if count <= 1:
            return within
        if len(self.sorted) <= EXACT:
            others = np.delete(self.sorted, self.rank[node]) if node in self.rank else self.sorted
            between = (1.4826 * float(np.median(np.abs(others - np.median(others))))) ** 2
        else:
            between = self.sigma ** 2
        return math.pi / 2 * max(between, within) / count


@dataclass(slots=True)
class Peers:
    """What the nodes of a group hold together, each node's taken out in O(its own): clock states counted over
    their runs, each stack field's values over their newest runs, and the state figures of every run."""

    held: dict[str, list[FleetRun]]
    clocks: Counter = field(default_factory=Counter)
    stacks: dict[str, Counter] = field(default_factory=dict)
    state: dict[str, float | None] = field(default_factory=dict)  # each state figure's median over every run

    @classmethod
    def of(cls, held: dict[str, list[FleetRun]]) -> Peers:
        peers = cls(held)
        for members in held.values():
            peers.clocks.update(r.state.get("clock_state") for r in members)
            for key, value in members[-1].stack.items():
                if key not in NOT_STACK:
                    peers.stacks.setdefault(key, Counter())[value] += 1
        for key, *_ in STATE:
            values = [r.state[key] for members in held.values() for r in members if r.state.get(key) is not None]
            peers.state[key] = float(np.median(values)) if values else None
        return peers

    def apart(self, node: str) -> list[StackShift]:
        """Where the node's newest stack differs from what most of the other nodes' newest have (more than half of
        them: a field they do not agree on explains nothing), before: theirs, after: its own."""
        own, count = self.held[node][-1].stack, len(self.held) - 1
        out = []
        for key in dict.fromkeys([*self.stacks, *own]):
            if key in NOT_STACK or not count:
                continue
            values = Counter(self.stacks.get(key, {}))
            if own.get(key) is not None:
                values[own[key]] -= 1
            values[None] += count - sum(values.values())  # the others that have no such field
            value, seen = values.most_common(1)[0]
            if seen * 2 > count and own.get(key) != value:
                out.append(StackShift(field=key, before=value, after=own.get(key)))
        return out

    def state_apart(self, node: str) -> list[str]:
        runs = self.held[node]
        if len(self.held) < 2:
            return []
        clocks = self.clocks - Counter(r.state.get("clock_state") for r in runs)
        theirs = {"clock_state": clocks.most_common(1)[0][0] if clocks else None}
        for key, *_ in STATE:
            if len(self.held) <= EXACT:
                values = [r.state[key] for n, members in self.held.items() if n != node for r in members
                          if r.state.get(key) is not None]
                theirs[key] = float(np.median(values)) if values else None
            else:  # one node's runs among thousands barely move the median
                theirs[key] = self.state.get(key)
        return state_difference(runs, theirs)


def state_difference(runs: Sequence[FleetRun], theirs: dict[str, object]) -> list[str]:
    """Where the node's runs' clocks or host load differ from its peers' (their most common clock state, their
    median SM clock over its maximum and host CPU): its clock state, the SM clock 5 % apart, the CPU 20 points."""
    out = []
    mine = Counter(r.state.get("clock_state") for r in runs).most_common(1)[0][0] if runs else None
    if theirs.get("clock_state") is not None and mine != theirs["clock_state"]:
        out.append(f"clock state {mine} (the fleet's: {theirs['clock_state']})")
    for key, what, apart, scale in STATE:
        own = [r.state[key] for r in runs if r.state.get(key) is not None]
        other = theirs.get(key)
        if own and other is not None and abs(float(np.median(own)) - other) > apart:
            out.append(f"{what} {np.median(own):.0%} {scale} (the fleet's: {other:.0%})")
    return out


def peer_state(peers: Sequence[FleetRun]) -> dict[str, object]:
    """Peers' clock state and state figures, as state_difference reads them."""
    clocks = Counter(r.state.get("clock_state") for r in peers)
    out: dict[str, object] = {"clock_state": clocks.most_common(1)[0][0] if clocks else None}
    for key, *_ in STATE:
        values = [r.state[key] for r in peers if r.state.get(key) is not None]
        out[key] = float(np.median(values)) if values else None
    return out


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
    figures = {name: found for name in FIGURES if (found := Figure.of(name, held, values)) is not None}
    peers = Peers.of(held)
    places = [_place(node, members, len(by_node[node]) - len(members), values[node], figures, peers, settings,
                     prices) for node, members in held.items() if only is None or node == only]
    places.sort(key=lambda p: (not p.outlier, p.values.get("output_tokens_per_s", math.inf), p.node))
    everything = [r for members in held.values() for r in members]
    priced = _good(everything)
    return FleetGroup(workload=workload, device=device, nodes=len(held), runs=len(everything),
                      distribution=distribution, places=places, outliers=[p.node for p in places if p.outlier],
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


def _place(node: str, runs: list[FleetRun], invalid: int, values: dict[str, float], figures: dict[str, Figure],
           peers: Peers, settings: FleetSettings, prices: Prices) -> NodePlace:
    """A node against the median of the other nodes' values, figure by figure: each run's ln(figure ÷ that
    median) a round of the deciding rule, the median's own uncertainty added (from the others' spread)."""
    relative, decisions, z, reasons = {}, {}, {}, []
    confidence = 1 - (1 - settings.confidence) / len(JUDGED)  # the judged figures share the error rate
    for name, figure in FIGURES.items():
        own, found = values.get(name), figures.get(name)
        if own is None or found is None:
            continue
        if len(found.sorted) >= 3 and found.sigma > 0:
            z[name] = (math.log(own) - found.center) / found.sigma
        if not found.others(node):
            continue
        reference = math.exp(found.median_without(node))
        relative[name] = own / reference
        own_runs = [r.figures[name] for r in runs if r.figures.get(name) is not None and r.figures[name] > 0]
        estimate = against_reference(own_runs, reference, found.reference_variance(node), figure.higher_is_worse)
        decision = look(estimate, len(own_runs), settings.effect, confidence, RUNS)
        decisions[name] = decision
        if name in JUDGED and decision.verdict == "slower":
            reasons.append(f"{figure.name} {relative[name]:.3g}× the fleet's median; its speed: "
                           + decision.says("the fleet's ÷ its own") if figure.higher_is_worse
                           else decision.says(f"{figure.name} ÷ the fleet's median"))
    good = _good(runs)
    return NodePlace(
        node=node, runs=len(runs), excluded=invalid, latest=runs[-1].at, latest_run=runs[-1].run_id,
        values=values, relative=relative, decisions=decisions, z=z, outlier=bool(reasons), reasons=reasons,
        stack=peers.apart(node), state=peers.state_apart(node),
        good_output_tokens=good.good_output_tokens if good else None,
        energy_per_good_token_j=good.energy_per_good_token_j if good else None,
        cost_per_million_good_tokens=good.cost_per_million(prices) if good else None)
