"""What each side of a comparison is (its runs, workloads, labels, dates and stack), how the two sides' stacks
differ, and a workload's run-to-run spread from its stored runs: what a comparison's verdicts are read against."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchd.spec.fields import Documented

# The stack a run's metadata records (protocol/metadata.py), in the order a reader scans it: what it ran on first.
STACK = (("model", "model"), ("device", "device"), ("dtype", "dtype"), ("engine", "engine"),
         ("attention", "attn_implementation"), ("quantization", "quantization"), ("compile", "compile"),
         ("environment", "environment"), ("benchd", "benchd_version"), ("Python", "python_version"),
         ("torch", "torch_version"), ("transformers", "transformers_version"), ("CUDA", "cuda_version"),
         ("NVIDIA driver", "driver_version"), ("host", "host"))
SPREAD_RUNS = 20  # a workload's newest runs its run-to-run spread is measured over, at most
MIN_SPREAD_RUNS = 3  # … and at least (besides the runs compared)


class SideContext(Documented):
    """One side: its runs, their workloads and labels (each once, in order), when the first started and the last
    ended (ISO 8601), each stack entry's values, and where each run's report is."""

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
    """Each stack entry's values over its runs."""
    reports: list[str] = []
    """Each run's report: a URL relative to /compare (a daemon's runs), or a file's path."""


class StackChange(Documented):
    """A stack entry whose values differ between the sides."""

    what: str
    """The stack entry."""
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


def _once(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def device(metadata: Mapping[str, Any]) -> str | None:
    """The device a run ran on, by the name that says most: a GPU's model (cuda:0), or cpu (x86_64)."""
    where, name = metadata.get("device"), metadata.get("device_name")
    if where is None or not name or name == where:
        return where or name
    return f"{name} ({where})" if where.startswith("cuda") else f"{where} ({name})"


def _value(run: RunFacts, key: str) -> Any:
    if key == "device":
        return device(run.metadata)
    return run.metadata.get(key) if run.metadata.get(key) is not None else run.spec.get(key)


def side_context(runs: Sequence[RunFacts]) -> SideContext:
    stack: dict[str, list[str]] = {}
    for what, key in STACK:
        values = _once(str(v) for run in runs if (v := _value(run, key)) is not None)
        if values:
            stack[what] = values
    started = sorted(run.started for run in runs if run.started)
    finished = sorted(run.finished or run.started for run in runs if run.finished or run.started)
    return SideContext(runs=len(runs), workloads=_once(run.workload for run in runs),
                       labels=_once(run.label or "" for run in runs), first=started[0] if started else None,
                       last=finished[-1] if finished else None, stack=stack, reports=[run.report for run in runs])


def differences(a: SideContext | None, b: SideContext | None) -> list[StackChange]:
    """The stack entries whose values differ (an entry one side lacks counts as a difference)."""
    if a is None or b is None:
        return []
    order = [what for what, _ in STACK]
    return [StackChange(what=what, a=a.stack.get(what, []), b=b.stack.get(what, []))
            for what in sorted(set(a.stack) | set(b.stack), key=order.index)
            if set(a.stack.get(what, [])) != set(b.stack.get(what, []))]


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


def spread(figures: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each figure's run-to-run spread: the standard deviation of its per-run values over their mean (n − 1),
    over at least MIN_SPREAD_RUNS runs that have it."""
    out = {}
    for name in sorted({name for f in figures for name in f}):
        values = np.asarray([f[name] for f in figures if name in f], dtype=np.float64)
        if len(values) >= MIN_SPREAD_RUNS and (mean := float(values.mean())) > 0:
            out[name] = float(values.std(ddof=1)) / mean
    return out
