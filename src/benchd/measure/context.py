"""What each side of a comparison is (its runs, workloads, labels, dates and stack), how the two sides' stacks
differ, and a run's figures as a comparison names them: what a comparison's verdicts are read against."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchd.measure.stack import order, stack_of
from benchd.spec.fields import Documented


class SideContext(Documented):
    """One side: its runs, their workloads and labels (each once, in order), when the first started and the last
    ended (ISO 8601), each field of its stack's values, and where each run's report is."""

    runs: int
    """Its runs."""
    workloads: list[str]
    """Their workloads, each once, in order."""
    labels: list[str]
    """Their labels, each once (empty for a run with none)."""
    first: str | None = None
    """When its first run started (ISO 8601)."""
    last: str | None = None
    """When its last run ended (ISO 8601)."""
    stack: dict[str, list[str]] = {}
    """Each field of its runs' stack (measure/stack.py: transformers_version, engine_settings.…, workload.…) and its
    values over them."""
    reports: list[str] = []
    """Each run's report: a URL relative to /compare (a daemon's runs), or a file's path."""


class StackChange(Documented):
    """A field of the stack whose values differ between the sides."""

    what: str
    """The field (measure/stack.py): dtype, transformers_version, engine_settings.continuous_batching.…"""
    a: list[str]
    """Its values on side a."""
    b: list[str]
    """Its values on side b."""


@dataclass(slots=True)
class RunFacts:
    """What a side's context reads of one run (a stored row, or a result directory's summary.json)."""

    workload: str
    label: str | None
    started: str | None
    finished: str | None
    spec: Mapping[str, Any]
    metadata: Mapping[str, Any]
    report: str
    hardware: Mapping[str, Any] | None = None  # its hardware summary: its GPUs' UUIDs
    node: str | None = None  # the node that ran it, as the store has it

    def stack(self) -> dict[str, str]:
        return stack_of(self.spec, self.metadata, self.hardware, self.node)


def _once(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def stack_values(stacks: Sequence[Mapping[str, str]]) -> dict[str, list[str]]:
    """Runs' stacks as one side's: each field and its values, each once."""
    return {key: _once(s[key] for s in stacks if key in s) for key in order({k for s in stacks for k in s})}


def side_context(runs: Sequence[RunFacts]) -> SideContext:
    stack = stack_values([run.stack() for run in runs])
    started = sorted(run.started for run in runs if run.started)
    finished = sorted(run.finished or run.started for run in runs if run.finished or run.started)
    return SideContext(runs=len(runs), workloads=_once(run.workload for run in runs),
                       labels=_once(run.label or "" for run in runs), first=started[0] if started else None,
                       last=finished[-1] if finished else None, stack=stack, reports=[run.report for run in runs])


def differences(a: SideContext | None, b: SideContext | None) -> list[StackChange]:
    """The fields of the stack whose values differ (a field one side lacks counts as a difference)."""
    if a is None or b is None:
        return []
    return [StackChange(what=key, a=a.stack.get(key, []), b=b.stack.get(key, []))
            for key in order(set(a.stack) | set(b.stack)) if set(a.stack.get(key, [])) != set(b.stack.get(key, []))]


def stage_figures(stage: Mapping[str, Any], energy_per_token_j: float | None, latencies: Sequence[str],
                  percentiles: Sequence[int]) -> dict[str, float]:
    """A run's figures by the comparison's metric names, from its first stage's stored summary."""
    out = {f"{name}.p{p}": value for name in latencies for p in percentiles
           if (value := (stage.get(name) or {}).get(f"p{p}")) is not None}
    if stage.get("output_tokens_per_s") is not None:
        out["output_tokens_per_s"] = stage["output_tokens_per_s"]
    if energy_per_token_j is not None:
        out["energy_per_token_j"] = energy_per_token_j
    return out
