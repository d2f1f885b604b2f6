"""What one spec may ask of the daemon (BENCHD_LIMITS__*): a generation's requests, lengths, rates, stages and time,
a training step's steps, a kernel's repeats and buffers."""

from __future__ import annotations

from benchd.admission.refusal import Problems
from benchd.daemon.settings import Limits
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
    TrainStepSpec,
    length_upper_bound,
)


def limit_problems(spec: RunSpec, limits: Limits, problems: Problems) -> None:
    """A generation's workload, a training step's steps, a kernel's repeats and buffers against the limits."""
    if isinstance(spec, GenerateSpec):
        _workload_limits(spec, limits, problems)
        workload = spec.workload
        # Each stage's declared time: its warm-up, its sending to stop.duration_s and its drain (an open loop too
        # slow to send its requests in time is refused by its time, with its own reason)
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


def _workload_limits(spec: GenerateSpec, limits: Limits, problems: Problems) -> None:
    workload, over = spec.workload, problems.over
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
        where: tuple[str | int, ...] = ("workload", "arrivals", "values", index) if sweep else ("workload", "arrivals")
        if isinstance(profile, Concurrent):
            over(profile.concurrency, limits.max_concurrency, *where, setting="max_concurrency")
        elif isinstance(profile, Constant | Poisson | Gamma | Ramp):
            over(profile.rate, limits.max_rate, *where, setting="max_rate")
            if isinstance(profile, Ramp):
                over(profile.start_rate, limits.max_rate, *where, "start_rate", setting="max_rate")


def rounds_limits(spec: GenerateSpec, limits: Limits, problems: Problems) -> None:
    """A run's rounds (decide) together within the time a run may take."""
    rounds = spec.rounds()
    if rounds is not None and rounds.budget_s > limits.max_run_duration_s:
        problems.add(("decide", "budget_s"), f"{rounds.budget_s:g} s of rounds exceed the limit of "
                                             f"{limits.max_run_duration_s:g} s a run "
                                             "(BENCHD_LIMITS__MAX_RUN_DURATION_S)")


def capacity_limits(arrivals: Capacity, limits: Limits, problems: Problems) -> None:
    """A capacity search's probes and the rate they may reach, which the stage list cannot see."""
    where = ("workload", "arrivals")
    if arrivals.max_probes > limits.max_stages:
        problems.add((*where, "max_probes"), f"{arrivals.max_probes} probes exceed the limit of {limits.max_stages} "
                                             "stages (BENCHD_LIMITS__MAX_STAGES)")
    reach = arrivals.max_rate or arrivals.start_rate * 2 ** (arrivals.max_probes - 1)
    if reach > limits.max_rate:
        problems.add((*where, "max_rate"), f"the search may reach {reach:g} requests/s, beyond the limit of "
                                           f"{limits.max_rate:g} (BENCHD_LIMITS__MAX_RATE): set max_rate")
