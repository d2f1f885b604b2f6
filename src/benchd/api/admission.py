"""Admission of specs from HTTP: what cannot finish within the limits or fit the device's memory is refused with a
422 naming the field and the reason, before it is queued."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from fastapi.exceptions import RequestValidationError

from benchd.daemon.settings import Limits, Settings
from benchd.hardware.devices import DeviceError, Slot, targets
from benchd.hardware.speed import DeviceSpeed
from benchd.models.duration import time_problems
from benchd.models.memory import PlanError, estimate, fit_problems, gib, plan_for, planned
from benchd.models.packaged import weights_problem
from benchd.models.presets import PRESETS
from benchd.models.roots import model_problem, path_problem
from benchd.models.sources import loads_model
from benchd.spec import (
    Capacity,
    Concurrent,
    Constant,
    Gamma,
    GenerateSpec,
    KernelSpec,
    Poisson,
    Ramp,
    RunSpec,
    Sweep,
    Trace,
    TrainStepSpec,
    length_upper_bound,
    traces,
)
from benchd.spec.requirements import remote_problem
from benchd.spec.stack import unavailable
from benchd.supervisor.environments import Environments


def problem(loc: tuple, message: str) -> dict:
    return {"type": "value_error", "loc": ("body", *loc), "msg": message}


HOST = Slot("cpu", "cpu", "")  # what host RAM is judged by: a CPU worker's slot
TRACE_PATH = "workload.arrivals.path"  # read at admission (_arrival_problems), as well as held under the roots


class Memory:
    """What a run on a worker may use: the configured limit, or its device's available memory (host RAM for a CPU,
    free GPU memory for CUDA) with what benchd itself holds there and would release counted back in."""

    def __init__(self, available: Callable[[Slot], int | None], held: Callable[[str], int] = lambda key: 0) -> None:
        self.available, self.held = available, held

    def limit(self, settings: Settings, slot: Slot) -> int | None:
        if settings.limits.memory_bytes is not None:
            return settings.limits.memory_bytes
        free = self.available(slot)
        return None if free is None else int((free + self.held(slot.key)) * settings.limits.memory_fraction)


class Later(Exception):
    """A spec that cannot be judged now (503 with Retry-After): str() says why."""


class Unmeasured(Later):
    """A timed run's time cannot be judged yet: its device's worker has not measured the device (it is starting)."""


# Trace files are read at admission off the HTTP threads, by TRACE_READERS threads of their own, each within
# TRACE_READ_S; a submission that finds them all busy for READER_WAIT_S gets a 503 rather than a place in a queue.
TRACE_READERS = 2
TRACE_READ_S = 10.0
READER_WAIT_S = 1.0
_readers = ThreadPoolExecutor(TRACE_READERS, thread_name_prefix="benchd-trace")
_reading = threading.BoundedSemaphore(TRACE_READERS)


def read_trace(arrivals: Trace, max_bytes: int) -> traces.TraceSummary:
    """The trace's summary, read once by a reader thread within TRACE_READ_S (TraceError past it, or for the file);
    Later while every reader is busy."""
    if not _reading.acquire(timeout=READER_WAIT_S):
        raise Later(f"{TRACE_READERS} traces are being read: try again shortly")
    try:
        future = _readers.submit(traces.summarize, arrivals, max_bytes, TRACE_READ_S)
    except BaseException:
        _reading.release()
        raise
    future.add_done_callback(lambda _: _reading.release())
    try:
        return future.result(TRACE_READ_S + 1)  # the reader stops itself at TRACE_READ_S
    except FutureTimeout:
        raise traces.TraceTooSlow(f"{traces.WHERE}: {arrivals.path} was not read in time") from None


class Problems(list):
    """The 422's details, each at most once: a field (under loc) and why."""

    def __init__(self, loc: tuple) -> None:
        super().__init__()
        self.loc = loc

    def add(self, field: tuple, why: str) -> None:
        if (found := problem((*self.loc, *field), why)) not in self:
            self.append(found)

    def over(self, value: float, limit: float, *field: str, setting: str) -> None:
        if value > limit:
            self.add(field, f"{value:g} exceeds the limit of {limit:g} (BENCHD_LIMITS__{setting.upper()})")


def admit(spec: RunSpec, settings: Settings, memory: Memory, slots: Sequence[Slot], loc: tuple = (),
          speeds: Callable[[Slot], DeviceSpeed | None] = lambda slot: None) -> None:
    """Checks a spec from HTTP against the daemon's limits, devices and model rules; 422 naming each field. slots:
    the daemon's workers; speeds: each one's measured speed (benchd.hardware.speed), what its time is judged by."""
    problems = Problems(loc)
    try:
        chosen = targets(slots, spec.device, spec.placement, spec.tensor_parallel)
    except DeviceError as error:
        chosen = []
        problems.add((error.field,), error.reason)
    _source_problems(spec, settings, problems)
    _limit_problems(spec, settings.limits, problems)
    _thread_problems(spec, chosen, problems)
    if isinstance(spec, GenerateSpec):
        problems.extend(_arrival_problems(spec, settings, loc))
        _engine_problems(spec, settings, problems)
        _host_problems(spec, settings, memory, problems)
    # What this host lacks for the stack the spec names: the package, or a device it runs on (the worker checks again
    # as it loads, with torch: a GPU's generation for float8).
    for device_type in _device_types(chosen):
        for field, why in unavailable(spec.quantization, spec.attn_implementation, device_type, spec.dtype):
            problems.add((field,), why)
    if not problems:  # sizes are only worth estimating for a spec that is otherwise fine
        _size_problems(spec, settings, memory, chosen, slots, speeds, problems)
    if problems:
        raise RequestValidationError(list(problems))


def _device_types(chosen: Sequence[Slot]) -> list[str]:
    return sorted({"cuda" if slot.local.startswith("cuda") else "cpu" for slot in chosen})


def _source_problems(spec: RunSpec, settings: Settings, problems: Problems) -> None:
    """What the run would load: never remote code, and a model from a preset or under the roots (a served model's
    name is not a path; the daemon's own model is the operator's choice)."""
    if spec.trust_remote_code:
        problems.add(("trust_remote_code",), "cannot be enabled over HTTP")
    if reason := Environments(settings.environments).problem(spec.environment):
        problems.add(("environment",), reason)
    if spec.requirements is not None and not settings.environments_from_specs:
        problems.add(("requirements",), "building an environment from requirements given over HTTP is off (the "
                                        "daemon's BENCHD_ENVIRONMENTS_FROM_SPECS allows it); name a declared "
                                        "environment instead")
    elif spec.requirements is not None:
        for index, requirement in enumerate(spec.requirements):
            if reason := remote_problem(requirement):
                problems.add(("requirements", index), reason)
    if (loads_model(spec) and spec.model not in PRESETS and spec.model != settings.model
            and (reason := model_problem(spec.model, settings.model_roots))):
        problems.add(("model",), reason)
    if loads_model(spec) and (reason := weights_problem(spec.model)):  # a real preset's package, before the 202
        problems.add(("model",), reason)


def _limit_problems(spec: RunSpec, limits: Limits, problems: Problems) -> None:
    """A generation's workload, a training step's steps, a kernel's repeats and buffers against the limits."""
    if isinstance(spec, GenerateSpec):
        _workload_limits(spec, limits, problems.over)
        workload = spec.workload
        # Each stage's declared time: its warm-up, its sending to stop.duration_s and its drain (an open loop too
        # slow to send its requests in time is refused below, with its own reason)
        send = (workload.stop.duration_s or 0) + workload.warmup.seconds
        stage_s = send + (workload.stop.drain_for(send) if workload.stop.duration_s is not None else 0.0)
        total = stage_s * workload.stage_count()
        if total > limits.max_run_duration_s:
            problems.add(("workload", "stop", "duration_s"), (
                f"{workload.stage_count()} stages last up to {total:,.0f} s together (their warm-up, sending and "
                f"drain), beyond the limit of {limits.max_run_duration_s:g} s a run "
                "(BENCHD_LIMITS__MAX_RUN_DURATION_S)"))
    if isinstance(spec, TrainStepSpec):
        train = spec.train_step
        for warmup in train.warmup_study or [train.warmup_steps]:
            problems.over(warmup + train.steps, limits.max_steps, "train_step", "steps", setting="max_steps")
        problems.over(len(train.warmup_study or [0]), limits.max_stages, "train_step", "warmup_study",
                      setting="max_stages")
    if isinstance(spec, KernelSpec):
        kernel = spec.kernel
        problems.over(kernel.warmup + kernel.repeats, limits.max_repeats, "kernel", "repeats", setting="max_repeats")
        problems.over(len(kernel.shapes) * len(kernel.chosen()), limits.max_stages, "kernel", "shapes",
                      setting="max_stages")
        if kernel.flush_l2:
            problems.over(kernel.flush_bytes, limits.max_flush_bytes, "kernel", "flush_bytes",
                          setting="max_flush_bytes")


def cores(slot: Slot) -> int:
    """The cores a slot's worker may run on: a CPU worker's share (devices.resolve), else the daemon's own."""
    pinned = slot.env.get("BENCHD_WORKER_CPUS")
    return len(pinned.split(",")) if pinned else len(os.sched_getaffinity(0))


def _thread_problems(spec: RunSpec, chosen: Sequence[Slot], problems: Problems) -> None:
    """torch's CPU threads at most the cores their worker may use (2³¹ of them once made libgomp ask for 463 GB)."""
    found = spec.cpu_threads() if isinstance(spec, GenerateSpec) else None
    field, threads = found if found is not None else ((), 0)
    for slot in chosen if found is not None else ():
        if threads > (n := cores(slot)):
            problems.add(field, f"{threads} threads, more than the {n} cores the worker of {slot.key} may use")


def _host_problems(spec: GenerateSpec, settings: Settings, memory: Memory, problems: Problems) -> None:
    """What the engine holds in host RAM beside its worker (the openai engine's client processes), against it."""
    found = spec.host_bytes()
    limit = memory.limit(settings, HOST) if found is not None else None
    if limit is not None and found[1] > limit:
        field, need, what = found
        source = ("BENCHD_LIMITS__MEMORY_BYTES" if settings.limits.memory_bytes is not None
                  else f"{settings.limits.memory_fraction:.0%} of what is available")
        problems.add(field, f"{what} hold about {gib(need)}, more than the {gib(limit)} of host RAM a run may use "
                            f"({source})")


def _size_problems(spec: RunSpec, settings: Settings, memory: Memory, chosen: Sequence[Slot],
                   slots: Sequence[Slot], speeds: Callable[[Slot], DeviceSpeed | None], problems: Problems) -> None:
    """What one request needs of the model and its cache, then the run's memory (the GPU plan) and its time at the
    speed each of its devices measured (benchd.models.duration). Raises Unmeasured for a timed run whose device has
    not been measured yet."""
    for device_type in _device_types(chosen):
        for field, why in fit_problems(spec, device_type):
            problems.add(field, why)
    for slot in chosen if not problems else ():  # a request that cannot fit the cache needs no plan
        problems.extend(_memory_problems(spec, settings, memory, slot, slots, problems.loc))
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


def _workload_limits(spec: GenerateSpec, limits: Limits, over: Callable[..., None]) -> None:
    """The workload against the limits; over(value, limit, *field, setting=…) refuses what exceeds one."""
    workload = spec.workload
    if workload.stop.requests is not None:
        over(workload.stop.requests, limits.max_requests, "workload", "stop", "requests", setting="max_requests")
    over(workload.warmup.requests, limits.max_requests, "workload", "warmup", "requests", setting="max_requests")
    duration = (workload.stop.duration_s or 0) + workload.warmup.seconds
    over(duration, limits.max_duration_s, "workload", "stop", "duration_s", setting="max_duration_s")
    if workload.stop.drain_s is not None:  # a stage sends within the limit, then drains within it
        over(workload.stop.drain_s, limits.max_duration_s, "workload", "stop", "drain_s", setting="max_duration_s")
    # A conversation's later turns hold every earlier one: its prompts reach max_prompt_tokens().
    over(workload.max_prompt_tokens(), limits.max_prompt_tokens, "workload", "prompt_tokens",
         setting="max_prompt_tokens")
    over(length_upper_bound(workload.output_tokens), limits.max_output_tokens, "workload", "output_tokens",
         setting="max_output_tokens")
    stages = workload.stages()
    sweep = isinstance(workload.arrivals, Sweep)
    if sweep:
        over(len(stages), limits.max_stages, "workload", "arrivals", "values", setting="max_stages")
    for index, profile in enumerate(stages):
        where = ("workload", "arrivals", "values", index) if sweep else ("workload", "arrivals")
        if isinstance(profile, Concurrent):
            over(profile.concurrency, limits.max_concurrency, *where, setting="max_concurrency")
        elif isinstance(profile, Constant | Poisson | Gamma | Ramp):
            over(profile.rate, limits.max_rate, *where, setting="max_rate")
            if isinstance(profile, Ramp):
                over(profile.start_rate, limits.max_rate, *where, "start_rate", setting="max_rate")


def _engine_problems(spec: GenerateSpec, settings: Settings, problems: Problems) -> None:
    """What its engine's spec says the run sends and reads (engines/<name>/spec.py): only key variables and hosts the
    settings allow (docs/guides/daemon.md, "Who can do what"), and files under the roots (a trace's: above)."""
    for field, name in spec.key_envs().items():
        if reason := settings.openai.key_problem(name):
            problems.add(tuple(field.split(".")), reason)
    for field, url in spec.urls().items():
        if reason := settings.openai.url_problem(url):
            problems.add(tuple(field.split(".")), reason)
    for field, path in spec.paths().items():
        if field != TRACE_PATH and (reason := path_problem(path, settings.model_roots)):
            problems.add(tuple(field.split(".")), reason)


def _memory_problems(spec: RunSpec, settings: Settings, memory: Memory, slot: Slot, slots: Sequence[Slot],
                     loc: tuple) -> list[dict]:
    """A GPU group's ranks each hold a shard, checked against each member's memory; CPU ranks share the host's RAM,
    which must hold the whole."""
    members = [s for s in slots if s.key in slot.devices] if slot.local == "cuda" and slot.size > 1 else [slot]
    sharding = f", its 1/{len(members)} share" if len(members) > 1 else ""
    need = None if planned(spec, slot.local) else estimate(spec, slot.local)
    share = need.sharded(len(members)) if need is not None and len(members) > 1 else need
    problems = []
    for member in members:
        limit = memory.limit(settings, member)
        if limit is None:
            continue
        where = "host RAM" if slot.local == "cpu" else f"free memory on {member.key}"
        source = ("BENCHD_LIMITS__MEMORY_BYTES" if settings.limits.memory_bytes is not None
                  else f"{settings.limits.memory_fraction:.0%} of the {where}")
        if need is None:  # the worker's plan for the cache, steps and CUDA graphs, made with this limit
            try:
                plan_for(spec, limit, len(members))
            except PlanError as error:
                problems.append(problem((*loc, *error.field.split(".")), f"{error.reason} in {spec.dtype} on "
                                                                        f"{member.key}{sharding} ({source})"))
            continue
        if share.total <= limit:
            continue
        field = {"kernel": ("kernel", "shapes"), "train_step": ("train_step", "batch_size")}.get(spec.kind,
                                                                                                ("model",))
        problems.append(problem((*loc, *field), f"needs about {gib(share.total)}{sharding} ({share.describe()}) in "
                                                f"{spec.dtype} on {member.key}, more than the {gib(limit)} it may "
                                                f"use ({source})"))
    return problems


def _arrival_problems(spec: GenerateSpec, settings: Settings, loc: tuple) -> list[dict]:
    """A capacity search's reach, a trace's file and a run's rounds: what the stage list above cannot see."""
    arrivals, limits, where = spec.workload.arrivals, settings.limits, (*loc, "workload", "arrivals")
    problems = []
    rounds = spec.rounds()
    if rounds is not None and rounds.budget_s > limits.max_run_duration_s:
        problems.append(problem((*loc, "decide", "budget_s"), f"{rounds.budget_s:g} s of rounds exceed the limit of "
                                f"{limits.max_run_duration_s:g} s a run (BENCHD_LIMITS__MAX_RUN_DURATION_S)"))
    if isinstance(arrivals, Capacity):
        if spec.placement == "every_gpu":
            problems.append(problem((*loc, "placement"), "a capacity search runs on one device: each GPU's search "
                                    "would choose its own rates"))
        if arrivals.max_probes > limits.max_stages:
            problems.append(problem((*where, "max_probes"), f"{arrivals.max_probes} probes exceed the limit of "
                                    f"{limits.max_stages} stages (BENCHD_LIMITS__MAX_STAGES)"))
        reach = arrivals.max_rate or arrivals.start_rate * 2 ** (arrivals.max_probes - 1)
        if reach > limits.max_rate:
            problems.append(problem((*where, "max_rate"), f"the search may reach {reach:g} requests/s, beyond the "
                                    f"limit of {limits.max_rate:g} (BENCHD_LIMITS__MAX_RATE): set max_rate"))
    if isinstance(arrivals, Trace):
        if reason := path_problem(arrivals.path, settings.model_roots):
            return [*problems, problem((*where, "path"), reason)]
        try:
            trace = read_trace(arrivals, limits.max_trace_bytes)
        except traces.TraceTooLarge as error:
            return [*problems, problem((*where, "path"), f"{str(error).split(': ', 1)[1]} "
                                                         "(BENCHD_LIMITS__MAX_TRACE_BYTES)")]
        except traces.TraceTooSlow as error:
            return [*problems, problem((*where, "path"), f"{str(error).split(': ', 1)[1]}: admission reads a trace "
                                                         f"within {TRACE_READ_S:g} s")]
        except traces.TraceError as error:
            return [*problems, problem((*where, "path"), str(error).split(": ", 1)[1])]
        if trace.requests > limits.max_requests and spec.workload.stop.requests is None:
            problems.append(problem((*where, "path"), f"the trace holds {trace.requests} requests, beyond the limit "
                                    f"of {limits.max_requests} (BENCHD_LIMITS__MAX_REQUESTS): set stop.requests"))
        if trace.duration_s > limits.max_duration_s and spec.workload.stop.duration_s is None:
            problems.append(problem((*where, "path"), f"the trace lasts {trace.duration_s:,.0f} s, beyond the limit "
                                    f"of {limits.max_duration_s:g} s (BENCHD_LIMITS__MAX_DURATION_S): set "
                                    "stop.duration_s or a speedup"))
        longest = trace.max_prompt_tokens
        if longest > limits.max_prompt_tokens:
            problems.append(problem((*where, "path"), f"a prompt of {longest} tokens exceeds the limit of "
                                    f"{limits.max_prompt_tokens} (BENCHD_LIMITS__MAX_PROMPT_TOKENS)"))
        if trace.max_output_tokens > limits.max_output_tokens:
            problems.append(problem((*where, "path"), f"an output of {trace.max_output_tokens} tokens exceeds the "
                                    f"limit of {limits.max_output_tokens} (BENCHD_LIMITS__MAX_OUTPUT_TOKENS)"))
    return problems
