"""Node or stack: the change points of one workload's figure on the nodes of one GPU model, put together when they
fall at the same time; a change on most of the nodes at once is the stack's (or the workload's), one on a node alone
is the node's, each explained by the nodes it names, the stack between its segments, and where the node's driver,
firmware or clocks differ from its peers' (docs/guides/fleet.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

import numpy as np

from benchd.measure.fleet import FleetRun, FleetView
from benchd.measure.fleet_place import NOT_STACK, peer_state, state_difference
from benchd.measure.history import FIGURES, ChangePoint, StackShift, stack_difference
from benchd.spec.fields import Documented

# The stack fields a node's own change is explained by, where they differ from its peers': the node's, not the
# software's.
NODE_FIELDS = ("driver_version", "vbios_version", "cuda_version", "fault", "torch_threads")
FLEET_SHARE = 0.5  # a change seen on more than this share of a GPU model's nodes at once is the fleet's


class FleetChange(Documented):
    """Change points of one figure on the nodes of one GPU model at about the same time."""

    workload: str
    """The workload."""
    device: str
    """The GPU model."""
    figure: str
    """The figure that moved."""
    scope: Literal["fleet", "node"]
    """fleet: on most of the GPU model's nodes at once (the stack or the workload changed); node: on a few, the
    rest unchanged (the node changed)."""
    at: datetime
    """The earliest of its change points (the first run of a new segment)."""
    nodes: list[str]
    """The nodes whose series changed."""
    nodes_seen: int
    """The GPU model's nodes with runs of the workload in the fleet's window."""
    direction: Literal["worse", "better"]
    """Most of its change points' direction."""
    relative_change: float
    """The median of their relative changes."""
    stack: list[StackShift]
    """The stack between the segments, where most of its change points agree."""
    differs: list[str]
    """A node's change: where its driver, firmware, GPUs or clocks differ from its peers' now."""
    explanation: str
    """What it says, in a sentence."""
    change_points: list[str]
    """Its change points' ids."""


def classify(changes: Sequence[ChangePoint], runs: Sequence[FleetRun], window_s: float,
             share: float = FLEET_SHARE) -> list[FleetChange]:
    """The active change points of the fleet's workloads, grouped by workload, GPU model and figure, then by time
    (each within window_s of its group's first), each group told the fleet's or a node's."""
    by_key: dict[tuple[str, str, str], list[ChangePoint]] = {}
    for change in changes:
        if change.active:
            by_key.setdefault((change.workload, change.device, change.figure), []).append(change)
    out = []
    for (workload, device, figure), found in sorted(by_key.items()):
        peers = [r for r in runs if r.workload == workload and r.device == device]
        seen = len({r.node for r in peers} | {c.node for c in found})
        for cluster in _clusters(sorted(found, key=lambda c: c.at), window_s):
            out.append(_told(workload, device, figure, cluster, peers, seen, share))
    return sorted(out, key=lambda c: c.at, reverse=True)


def _clusters(found: list[ChangePoint], window_s: float) -> list[list[ChangePoint]]:
    clusters: list[list[ChangePoint]] = []
    for change in found:
        if clusters and (change.at - clusters[-1][0].at).total_seconds() <= window_s and \
                change.node not in {c.node for c in clusters[-1]}:
            clusters[-1].append(change)
        else:
            clusters.append([change])
    return clusters


def _told(workload: str, device: str, figure: str, cluster: list[ChangePoint], peers: Sequence[FleetRun],
          seen: int, share: float) -> FleetChange:
    nodes = sorted({c.node for c in cluster})
    fleet = len(nodes) >= 2 and len(nodes) > share * seen
    direction = Counter(c.direction for c in cluster).most_common(1)[0][0]
    change = float(np.median([c.relative_change for c in cluster]))
    stack = _agreed([c.stack for c in cluster], drop=NOT_STACK if fleet else set())
    label = FIGURES[figure].name if figure in FIGURES else figure
    moved = f"{label} {change * 100:+.1f} %"
    shifts = ", ".join(s.says() for s in stack)
    differs: list[str] = []
    if fleet:
        explanation = (f"{moved} on {len(nodes)} of the {seen} {device} nodes at once ({', '.join(nodes)}): "
                       + (f"the stack changed on them: {shifts}" if stack else
                          "with no change of the stack between the segments: the workload, or something the nodes "
                          "share (a driver or a rollout the runs do not record)"))
    else:
        differs = _node_differs(nodes, peers)
        explanation = (f"{moved} on {', '.join(nodes)} alone, of the {seen} {device} nodes: the node changed"
                       + (f" (between its segments: {shifts})" if stack else "")
                       + (f"; it differs from its peers: {'; '.join(differs)}" if differs else
                          "; its driver, firmware and clocks are its peers'"))
    return FleetChange(workload=workload, device=device, figure=figure, scope="fleet" if fleet else "node",
                       at=cluster[0].at, nodes=nodes, nodes_seen=seen, direction=direction, relative_change=change,
                       stack=stack, differs=differs, explanation=explanation,
                       change_points=[c.id for c in cluster])


def _agreed(stacks: list[list[StackShift]], drop: set[str]) -> list[StackShift]:
    """The shifts (field, before, after) that more than half of the change points share, but for the fields
    dropped (a fleet's nodes each have their own host and GPUs)."""
    counts = Counter((s.field, s.before, s.after) for stack in stacks for s in stack)
    first = {(s.field, s.before, s.after): s for stack in stacks for s in stack}
    return [first[key] for key, n in counts.items() if n * 2 > len(stacks) and key[0] not in drop]


def _node_differs(nodes: list[str], peers: Sequence[FleetRun]) -> list[str]:
    """Where the nodes' newest runs differ from the other nodes' in their driver, firmware, GPUs and clocks."""
    mine = [r for r in peers if r.node in nodes]
    theirs = [r for r in peers if r.node not in nodes]
    if not mine or not theirs:
        return []
    latest = {}
    for run in sorted(theirs, key=lambda r: r.at):
        latest[run.node] = run
    own = sorted(mine, key=lambda r: r.at)[-1:]
    shifts = stack_difference([r.stack for r in latest.values()], [r.stack for r in own])
    out = [f"{s.says()} (theirs → its own)" for s in shifts if s.field in NODE_FIELDS]
    return out + state_difference(own, peer_state(list(latest.values())))


class FleetReport(FleetView):
    """The fleet's view (GET /fleet): its groups, and its change points told the node's or the fleet's."""

    changes: list[FleetChange] = []
    """The workloads' active change points, grouped across nodes by time: the fleet's or a node's, newest first."""
