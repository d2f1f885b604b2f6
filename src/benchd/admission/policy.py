"""admit(): a spec against the daemon's limits, devices and model rules, every problem at once."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from benchd.admission.limits import capacity_limits, limit_problems, rounds_limits
from benchd.admission.memory import Memory, host_problems, memory_problems
from benchd.admission.reach import engine_problems, source_problems
from benchd.admission.refusal import Problems, Refused, Unmeasured
from benchd.admission.traces import trace_problems
from benchd.daemon.settings import Settings
from benchd.hardware.devices import DeviceError, Slot, targets
from benchd.hardware.speed import DeviceSpeed
from benchd.models.duration import time_problems
from benchd.models.memory import fit_problems
from benchd.spec import Capacity, GenerateSpec, RunSpec, Trace
from benchd.spec.stack import unavailable


def admit(spec: RunSpec, settings: Settings, memory: Memory, slots: Sequence[Slot],
          speeds: Callable[[Slot], DeviceSpeed | None] = lambda slot: None, remote: bool = True) -> None:
    """Raises Refused naming each field of the spec that cannot run, and why; Later (Unmeasured, or a trace's
    readers busy) when it cannot be judged yet. slots: the workers' devices; memory: what a run may use on each;
    speeds: each one's measured speed (benchd.hardware.speed), what its time is judged by.

    remote: the spec came over HTTP, and is hostile: what it names may reach nothing the operator did not allow
    (admission/reach.py) and it stays within BENCHD_LIMITS__*. False: the operator's own spec at its terminal
    (`benchd run`), judged only on whether it can run here: its devices and stack, its requests against the model,
    its memory and its time."""
    problems = Problems()
    try:
        chosen = targets(slots, spec.device, spec.placement, spec.tensor_parallel)
    except DeviceError as error:
        chosen = []
        problems.add((error.field,), error.reason)
    if remote:
        source_problems(spec, settings, problems)
        limit_problems(spec, settings.limits, problems)
    _thread_problems(spec, chosen, problems)
    if isinstance(spec, GenerateSpec):
        _arrival_problems(spec, settings, problems, remote)
        if remote:
            engine_problems(spec, settings, problems)
        host_problems(spec, settings, memory, problems)
    # What this host lacks for the stack the spec names: the package, or a device it runs on (the worker checks again
    # as it loads, with torch: a GPU's generation for float8).
    for device_type in _device_types(chosen):
        for field, why in unavailable(spec.quantization, spec.attn_implementation, device_type, spec.dtype):
            problems.add((field,), why)
    if not problems:  # sizes are only worth estimating for a spec that is otherwise fine
        _size_problems(spec, settings, memory, chosen, slots, speeds, problems)
    if problems:
        raise Refused(list(problems))


def _device_types(chosen: Sequence[Slot]) -> list[str]:
    return sorted({"cuda" if slot.local.startswith("cuda") else "cpu" for slot in chosen})


def cores(slot: Slot) -> int:
    """The cores a slot's worker may run on: a CPU worker's share (devices.resolve), else the daemon's own."""
    pinned = slot.env.get("BENCHD_WORKER_CPUS")
    return len(pinned.split(",")) if pinned else len(os.sched_getaffinity(0))


def _thread_problems(spec: RunSpec, chosen: Sequence[Slot], problems: Problems) -> None:
    """torch's CPU threads at most the cores their worker may use (2³¹ of them once made libgomp ask for 463 GB)."""
    found = spec.cpu_threads() if isinstance(spec, GenerateSpec) else None
    if found is None:
        return
    field, threads = found
    for slot in chosen:
        if threads > (n := cores(slot)):
            problems.add(field, f"{threads} threads, more than the {n} cores the worker of {slot.key} may use")


def _arrival_problems(spec: GenerateSpec, settings: Settings, problems: Problems, remote: bool) -> None:
    """A run's rounds, a capacity search's device and reach, a trace's file: what the stage list cannot see."""
    arrivals = spec.workload.arrivals
    if remote:
        rounds_limits(spec, settings.limits, problems)
    if isinstance(arrivals, Capacity):
        if spec.placement == "every_gpu":
            problems.add(("placement",), "a capacity search runs on one device: each GPU's search would choose its "
                                         "own rates")
        if remote:
            capacity_limits(arrivals, settings.limits, problems)
    if remote and isinstance(arrivals, Trace):
        trace_problems(spec, arrivals, settings, problems)


def _size_problems(spec: RunSpec, settings: Settings, memory: Memory, chosen: Sequence[Slot],
                   slots: Sequence[Slot], speeds: Callable[[Slot], DeviceSpeed | None], problems: Problems) -> None:
    """What one request needs of the model and its cache, then the run's memory (the GPU plan) and its time at the
    speed each of its devices measured (benchd.models.duration). Raises Unmeasured for a timed run whose device has
    not been measured yet."""
    for device_type in _device_types(chosen):
        for field, why in fit_problems(spec, device_type):
            problems.add(field, why)
    for slot in chosen if not problems else ():  # a request that cannot fit the cache needs no plan
        memory_problems(spec, settings, memory, slot, slots, problems)
    unmeasured = []
    for slot in chosen:
        speed = speeds(slot)
        if speed is None and spec.kind != "generate":
            unmeasured.append(slot.key)
        for field, why in time_problems(spec, speed, settings.limits.max_duration_s):
            problems.add(field, why)
    if unmeasured and not problems:
        raise Unmeasured(f"the worker of {', '.join(unmeasured)} has not measured its device yet (it is starting): "
                         "a timed run's time cannot be judged before")
