"""A comparison's side read from the store: its runs' records and figures, and the stored runs of the same stack in
the same segment of its workload's history, whose run-to-run spread it pools with its own (docs/figures.md,
"Verdicts: comparisons")."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from benchd.measure.compare import COMPARED
from benchd.measure.context import RunFacts, stage_figures
from benchd.measure.deadline import in_time
from benchd.measure.history import series_of
from benchd.measure.sides import LATENCIES, RunData, Side, side_of
from benchd.measure.stack import stack_of
from benchd.protocol.probe import Probe
from benchd.store import history

SPREAD_RUNS = 20  # stored runs of a stack and segment a side borrows the spread of, at most: the nearest to its runs
SERIES_RUNS = 2_000  # the newest runs of a series read for the segment (their light columns)
READ_MAX = 400  # runs of the segment whose stack is read at most, the nearest first


def _iso(value) -> str | None:
    return value.isoformat() if hasattr(value, "isoformat") else value


def side_from_store(store, run_ids: Sequence[str], deadline: float | None = None) -> Side:
    """Runs a daemon stored (KeyError: one it does not hold), with the stored runs of their stack in their segments
    of the history (same_stack: once for the runs of one workload, node, GPU model and stack). OverBudget once
    deadline, a time.monotonic(), has passed."""
    rows = []

    def runs():
        for run_id in run_ids:
            in_time(deadline)
            row = store.get_run(run_id)
            if row is None:
                raise KeyError(run_id)
            rows.append(row)
            first = row["summary"][0] if row["summary"] else {}
            facts = RunFacts(row["workload"], row.get("label"), _iso(row.get("started_at") or row.get("created_at")),
                             _iso(row.get("finished_at")), row.get("spec") or {}, row.get("run_metadata") or {},
                             f"runs/{run_id}/report", row.get("hardware"), row.get("node"))
            yield RunData(store.records(run_id, stage_index=0), first.get("output_tokens_per_s"),
                          row.get("energy_per_token_j"), row.get("valid"), first.get("roofline"), facts,
                          first.get("clocks") or [], Probe.model_validate(row["probe"]) if row.get("probe") else None)

    side = side_of(run_ids, runs())
    alike: dict[tuple, list[dict]] = {}
    for row in rows:
        meta = row.get("run_metadata") or {}
        stack = stack_of(row.get("spec"), meta, row.get("hardware"), row.get("node"))
        alike.setdefault((row["workload"], row.get("node"), meta.get("device_name"), *sorted(stack.items())),
                         []).append(row)
    groups = [group for members in alike.values() for group in same_stack(store, members, deadline)]
    return side.model_copy(update={"history": groups})


def same_stack(store, members: list[dict[str, Any]], deadline: float | None = None) -> list[dict[str, dict]]:
    """For runs of one workload, node, GPU model and stack (measure/stack.py): in each segment of their workload's
    history that holds one of them, the stored runs of that stack nearest them (SPREAD_RUNS at most, themselves
    among them); a group a segment, run id → its figures by the comparison's metrics. The series holds what the
    history holds (valid runs of the series' clock state and warmth; no matrix's runs); a segment lies between the
    change points found in it, of any figure."""
    first = members[0]
    meta = first.get("run_metadata") or {}
    in_time(deadline)
    series = series_of(first["workload"], history.series_runs(store, first["workload"], SERIES_RUNS,
                                                              node=first.get("node"), device=meta.get("device_name")))
    mine = next((s for s in series if s.node == (first.get("node") or "")), None)
    if mine is None:
        return []
    held = mine.runs
    ids = [r.run_id for r in held]
    in_time(deadline)
    found = history.list_change_points(store, first["workload"], node=first.get("node"), active=True,
                                       limit=history.MAX_STACKS).items
    cuts = sorted({ids.index(c.run_id) for c in found if c.device == mine.device and c.run_id in ids})
    at = sorted(ids.index(m["id"]) if m["id"] in ids else bisect.bisect([r.at for r in held], m["created_at"])
                for m in members)
    segments = sorted({(max((c for c in cuts if c <= p), default=0), min((c for c in cuts if c > p), default=len(ids)))
                       for p in at})
    candidates = sorted((min(abs(i - p) for p in at), i) for start, end in segments for i in range(start, end))
    nearest = [i for _, i in candidates[:READ_MAX]]
    own = stack_of(first.get("spec"), meta, first.get("hardware"), first.get("node"))
    out: list[dict[str, dict]] = [{} for _ in segments]
    for start in range(0, len(nearest), history.MAX_STACKS):
        in_time(deadline)
        batch = [ids[i] for i in nearest[start:start + history.MAX_STACKS]]
        read = history.stacks_and_figures(store, batch)
        for index, run_id in zip(nearest[start:start + history.MAX_STACKS], batch):
            other = read.get(run_id)
            group = out[next(k for k, (a, b) in enumerate(segments) if a <= index < b)]
            if other is None or not other["summary"] or len(group) == SPREAD_RUNS or stack_of(
                    other["spec"], other["run_metadata"], other["hardware"], other["node"]) != own:
                continue
            group[run_id] = stage_figures(other["summary"][0], other["energy_per_token_j"], LATENCIES, COMPARED)
        if all(len(group) == SPREAD_RUNS for group in out):
            break
    return [group for group in out if group]
