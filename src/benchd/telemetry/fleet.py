"""This node's place in its fleet as gauges (measure/fleet.py's NodePlace): each of its workloads' figures, its ratio
to the other nodes' median with the deciding rule's interval, whether it is an outlier, and what its good tokens
cost."""

from __future__ import annotations

from benchd.measure.fleet import FleetGroup, NodePlace
from benchd.telemetry.metrics import Metrics


def places(m: Metrics, workload: str, found: list[tuple[FleetGroup, NodePlace]]) -> None:
    """The node's places in one workload's fleet, one a GPU model it ran it on; the workload's earlier ones go. Only
    a workload with live series gets them (BENCHD_METRICS__MAX_WORKLOADS: one evicted since its last run has none):
    reading the fleet never makes a workload recent."""
    for family in m.fleet_families:
        family.forget("workload", workload)
    if not m.tracks(workload):
        return
    for group, place in found:
        _place(m, group, place)


def _place(m: Metrics, group: FleetGroup, found: NodePlace) -> None:
    labels = (group.workload, group.device)
    m.fleet_nodes.labels(*labels).set(group.nodes)
    m.fleet_outlier.labels(*labels).set(float(found.outlier))
    for figure, value in found.values.items():
        m.fleet_value.labels(*labels, figure).set(value)
    for figure, ratio in found.relative.items():
        m.fleet_relative.labels(*labels, figure).set(ratio)
    for figure, decision in found.decisions.items():
        if decision.ci_low is not None and decision.ci_high is not None:
            m.fleet_low.labels(*labels, figure).set(decision.ci_low)
            m.fleet_high.labels(*labels, figure).set(decision.ci_high)
    if found.energy_per_good_token_j is not None:
        m.fleet_energy_good.labels(*labels).set(found.energy_per_good_token_j)
    if found.cost_per_million_good_tokens is not None:
        m.fleet_cost.labels(*labels).set(found.cost_per_million_good_tokens)
