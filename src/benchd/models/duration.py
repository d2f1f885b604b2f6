"""What a run takes at its device's measured speed (benchd.hardware.speed), from its FLOPs and bytes and its arrivals
and lengths: admission refuses a run that could not end within BENCHD_LIMITS__MAX_DURATION_S, and the supervisor ends a
kernel run that passes its deadline, a multiple of what it should take.

Every figure is at the probe's speed, the device's best (its fastest GEMM and copy): a lower bound on the real time,
so that what is refused surely could not finish in time. What each counts:
- a kernel: every implementation's warm-up and measured calls at each shape, each call the longer of its FLOPs at the
  dtype's matmul rate and its bytes at the copy bandwidth (eager attention's scores too), and the cache flush before
  each measured call; CUDA-only implementations cost nothing on a CPU (they fail at once). tf32 at its own rate.
- a training step: the step's model FLOPs (flops.step_flops) at the matmul rate, and AdamW's passes over the weights.
- a generation stage: a prompt token costs its forward FLOPs; an output token a pass over the weights at the copy
  bandwidth, when the weights are larger than the probe's copy (smaller ones may run from the caches: nothing is
  counted). Open loop: its sending time (arrivals, rate, stop) and the longest request after the last is sent, at
  most its drain. Closed loop: the requests at their shortest lengths, `concurrency` at a time sharing each step's
  pass over the weights, or its stop.duration_s and the longest request, at most its drain. An openai run's server
  is another machine: its sending time only; a quantized model's weights are smaller than their dtype says: its
  prompts only.
And the most a stage can take whatever the engine does (stage_bound_s): its sending to its stop, then its drain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from benchd.hardware.speed import DeviceSpeed
from benchd.models.flops import attention_flops, forward_flops_per_token, matmul_flops, step_flops
from benchd.models.memory import LOGIT_BYTES, dtype_bytes, model_shape_and_weights
from benchd.spec import (
    ArrivalProfile,
    AttentionShape,
    Capacity,
    Concurrent,
    Constant,
    FixedLength,
    Gamma,
    GenerateSpec,
    KernelSpec,
    ListLength,
    MatmulKernel,
    MatmulShape,
    Poisson,
    Ramp,
    RunSpec,
    Sweep,
    Synchronous,
    Trace,
    TrainStepSpec,
    traces,
)
from benchd.spec.workload import CANCEL_GRACE_S

COMPILE_S = 120.0  # torch.compile with max-autotune, once a shape: allowed on top of a kernel run's deadline
SCORE_PASSES = 3  # eager attention writes its scores, softmaxes them (a read and a write), reads them for P·V
ADAM_PASSES = 7  # AdamW reads weights, gradients and two states and writes weights and two states
CUDA_ONLY = frozenset({"tf32", "flash", "efficient", "cudnn"})  # on a CPU these stages fail at once


def sending_s(profile: ArrivalProfile, spec: GenerateSpec) -> float | None:
    """How long an open-loop stage takes to send its requests (its warm-up included); None for a closed loop,
    whose pace is the engine's."""
    if not isinstance(profile, Constant | Poisson | Gamma | Ramp):
        return None
    stop, warmup = spec.workload.stop, spec.workload.warmup
    by_duration = None if stop.duration_s is None else stop.duration_s + warmup.seconds
    # A ramp sends n requests within ramp_s + n / rate: at most the whole ramp, then the rest at the final rate.
    ramp_s = profile.ramp_s if isinstance(profile, Ramp) else 0.0
    by_requests = None if stop.requests is None else ramp_s + (stop.requests + warmup.requests) / profile.rate
    if by_requests is not None and warmup.seconds:
        by_requests += warmup.seconds
    candidates = [d for d in (by_duration, by_requests) if d is not None]
    return min(candidates) if candidates else None


def stage_bound_s(profile: ArrivalProfile, spec: GenerateSpec) -> float | None:
    """The most a stage takes from its start whatever the engine does: its sending, which stops at its stop (its
    warm-up included), its drain (stop.drain_for) and the grace its engines have to end what it cut. None where the
    engine's pace decides when its sending stops (a closed loop, or an open loop held back by max_concurrency,
    stopped by requests alone, or a trace unreadable since admission)."""
    stop, warmup = spec.workload.stop, spec.workload.warmup
    send = sending_s(profile, spec) if getattr(profile, "max_concurrency", None) is None else None
    if isinstance(profile, Trace):
        trace: float | None
        try:
            trace = traces.summarize(profile).duration_s
        except traces.TraceError:  # changed since admission: its worker says so, failing the run
            trace = stop.duration_s
        if trace is None:
            return None
        send = min(trace, stop.duration_s) if stop.duration_s is not None else trace
        send = None if profile.max_concurrency is not None and stop.duration_s is None else send + warmup.seconds
    elif send is None and stop.duration_s is not None:
        send = stop.duration_s + warmup.seconds
    if send is None:
        return None
    return send + stop.drain_for(send) + CANCEL_GRACE_S


def run_bound_s(spec: RunSpec) -> float | None:
    """The most a generation run's stages take once its requests start, each within its stage_bound_s (a capacity
    search's max_probes probes, each at the longest); None where one stage has no bound, and for timed runs."""
    if not isinstance(spec, GenerateSpec):
        return None
    arrivals = spec.workload.arrivals
    if isinstance(arrivals, Capacity):  # its slowest probe sends the longest
        probe = stage_bound_s(arrivals.probe(arrivals.min_rate), spec)
        return None if probe is None else probe * arrivals.max_probes
    bounds = [stage_bound_s(profile, spec) for profile in spec.workload.stages()]
    known = [bound for bound in bounds if bound is not None]
    return None if not bounds or len(known) < len(bounds) else sum(known)


def span(seconds: float) -> str:
    if seconds >= 7200:
        return f"{seconds / 3600:,.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:,.0f} min"
    return f"{seconds:,.2f} s" if seconds < 10 else f"{seconds:,.0f} s"


# ---- timed runs ---------------------------------------------------------------------------------


def kernel_shapes_s(spec: KernelSpec, speed: DeviceSpeed) -> list[float]:
    """Per shape: every implementation's calls and the flushes before its measured ones."""
    kernel = spec.kernel
    on_cpu = not speed.device.startswith("cuda")
    element = dtype_bytes(spec.dtype, "cpu" if on_cpu else "cuda")
    bandwidth = speed.copy_bytes_per_s
    flush = kernel.flush_bytes / bandwidth if kernel.flush_l2 else 0.0
    out = []
    for shape in kernel.shapes:
        total = 0.0
        for name in kernel.chosen():
            if on_cpu and name in CUDA_ONLY:
                continue
            rate = speed.flops_per_s("tf32" if name == "tf32" else spec.dtype) or speed.flops_per_s("float32")
            if isinstance(kernel, MatmulKernel):
                assert isinstance(shape, MatmulShape)  # a matmul's shapes
                flops = matmul_flops(shape)
                moved = (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n) * element
            else:
                assert isinstance(shape, AttentionShape)  # an attention kernel's shapes
                flops = attention_flops(shape)
                moved = 4 * shape.batch * shape.heads * shape.seq_len * shape.head_dim * element
                if name == "eager":
                    moved += SCORE_PASSES * shape.batch * shape.heads * shape.seq_len ** 2 * (element + LOGIT_BYTES)
            total += (kernel.warmup + kernel.repeats) * max(flops / rate, moved / bandwidth) + kernel.repeats * flush
        out.append(total)
    return out


def train_step_s(spec: TrainStepSpec, speed: DeviceSpeed) -> float | None:
    """Every warm-up and measured step of every warm-up study level; None for a model unknown before it loads."""
    t = spec.train_step
    dtype = "float32" if spec.dtype == "auto" else spec.dtype
    element = dtype_bytes(dtype, "cuda" if speed.device.startswith("cuda") else "cpu")
    shape, weights = model_shape_and_weights(spec.model, element)
    rate = speed.flops_per_s(t.autocast or dtype)
    if shape is None or weights is None or not rate:
        return None
    step = step_flops(shape, t.batch_size, t.context_length, backward=t.mode != "forward").total / rate
    if t.mode == "train":
        step += ADAM_PASSES * weights / speed.copy_bytes_per_s
    return sum(warmup + t.steps for warmup in t.warmup_study or [t.warmup_steps]) * step


def kernel_deadline(spec: RunSpec, speed: DeviceSpeed | None, factor: float,
                    slack_s: float) -> tuple[float, str] | None:
    """(seconds into its run, the cause) after which the supervisor ends a kernel run: factor times what it should
    take, plus slack_s (start-up, input tensors, a busy host) and COMPILE_S a shape for a compiled implementation.
    None: not a kernel run, or no speed to judge by."""
    if not isinstance(spec, KernelSpec) or speed is None:
        return None
    expected = sum(kernel_shapes_s(spec, speed))
    compiled = len(spec.kernel.shapes) if "compiled" in spec.kernel.chosen() else 0
    limit = factor * expected + slack_s + COMPILE_S * compiled
    allowance = f" + {COMPILE_S * compiled:g} s to compile" if compiled else ""
    return limit, (f"the kernel run passed its deadline of {span(limit)} ({factor:g} × the {span(expected)} it should "
                   f"take at this device's measured speed, {speed.describe(spec.dtype)}, + {slack_s:g} s{allowance}; "
                   "BENCHD_WORKERS__DEADLINE_FACTOR and _SLACK_S): the supervisor ended it")


# ---- generation ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TokenTimes:
    """The least a prompt token and an output token's step take on the device (0: nothing can be said)."""

    prompt_s: float = 0.0
    step_s: float = 0.0

    def request_s(self, prompt: int, output: int) -> float:
        return prompt * self.prompt_s + output * self.step_s


def token_times(spec: GenerateSpec, speed: DeviceSpeed | None) -> TokenTimes:
    if speed is None or not spec.engine_record.loads_model:  # a server's model: its time is the server's
        return TokenTimes()
    element = dtype_bytes(spec.dtype, "cuda" if speed.device.startswith("cuda") else "cpu")
    shape, weights = model_shape_and_weights(spec.model, element)
    rate = speed.flops_per_s(spec.dtype)
    prompt = forward_flops_per_token(shape, 0) / rate if shape is not None and rate else 0.0
    shard = (weights or 0) // spec.tensor_parallel
    step = shard / speed.copy_bytes_per_s if spec.quantization == "none" and shard > speed.copy_bytes else 0.0
    return TokenTimes(prompt, step)


def length_lower_bound(dist) -> int:
    if isinstance(dist, FixedLength):
        return dist.value
    return min(dist.values) if isinstance(dist, ListLength) else dist.min


def stage_s(profile: ArrivalProfile, spec: GenerateSpec, times: TokenTimes) -> tuple[float, float, str] | None:
    """(the stage's least time, its longest request's, what bounds it: sending, trace, requests or duration) at
    these token times; None when nothing bounds it. After its sending, a stage waits for its longest request at
    most its drain: one longer is cut then."""
    workload = spec.workload
    stop, warmup = workload.stop, workload.warmup
    longest = times.request_s(*traces.longest(workload))

    def tail(send: float) -> float:
        return min(longest, stop.drain_for(send) + CANCEL_GRACE_S)

    send = sending_s(profile, spec)
    if send is not None:
        return send + tail(send), longest, "sending"
    if isinstance(profile, Trace):
        trace = traces.summarize(profile)
        send = (trace.duration_s if stop.duration_s is None else min(trace.duration_s, stop.duration_s)) \
            + warmup.seconds
        return send + tail(send), longest, "trace"
    if not isinstance(profile, Concurrent | Synchronous):
        return None
    concurrency = profile.concurrency if isinstance(profile, Concurrent) else 1
    bounds = []
    if stop.requests is not None:
        n = stop.requests + warmup.requests
        prompt, output = length_lower_bound(workload.prompt_tokens), length_lower_bound(workload.output_tokens)
        bounds.append((warmup.seconds + n * prompt * times.prompt_s
                       + math.ceil(n / concurrency) * output * times.step_s, "requests"))
    if stop.duration_s is not None:
        send = stop.duration_s + warmup.seconds
        bounds.append((send + tail(send), "duration"))
    total, bound = min(bounds)
    return total, longest, bound


# ---- the limit ----------------------------------------------------------------------------------


def time_problems(spec: RunSpec, speed: DeviceSpeed | None, limit_s: float) -> list[tuple[tuple, str]]:
    """(field, why) for each part of the run that could not end within limit_s (the whole of a timed run, each stage
    of a generation run) at the device's speed. A timed run needs the speed; an open loop's sending time is judged
    without it."""
    limit = f"the limit of {limit_s:g} s (BENCHD_LIMITS__MAX_DURATION_S)"
    dtype = (spec.train_step.autocast or ("float32" if spec.dtype == "auto" else spec.dtype)
             if isinstance(spec, TrainStepSpec) else spec.dtype)
    at = f"at this device's measured speed ({speed.describe(dtype)})" if speed is not None else ""
    if isinstance(spec, KernelSpec) and speed is not None:
        shapes = kernel_shapes_s(spec, speed)
        total = sum(shapes)
        if total <= limit_s:
            return []
        worst = max(range(len(shapes)), key=shapes.__getitem__)
        calls = spec.kernel.warmup + spec.kernel.repeats
        return [(("kernel", "shapes", worst), f"the run should take {span(total)} {at}, beyond {limit}; this shape's "
                                               f"{calls} calls an implementation take {span(shapes[worst])}")]
    if isinstance(spec, TrainStepSpec) and speed is not None:
        total = train_step_s(spec, speed)
        if total is None or total <= limit_s:
            return []
        return [(("train_step", "steps"), f"the run's steps should take at least {span(total)} {at} (their model "
                                          f"FLOPs), beyond {limit}")]
    if not isinstance(spec, GenerateSpec):
        return []
    times = token_times(spec, speed)
    problems: list[tuple[tuple, str]] = []
    sweep = isinstance(spec.workload.arrivals, Sweep)
    prompt, output = traces.longest(spec.workload)
    for index, profile in enumerate(spec.workload.stages()):
        found = stage_s(profile, spec, times)
        if found is None:
            continue
        total, longest, bound = found
        if total <= limit_s and longest <= limit_s:  # a request longer than the limit would always be cut: refused
            continue
        where: tuple[str | int, ...]
        arrivals: tuple[str | int, ...] = ("workload", "arrivals", "values", index) if sweep else ("workload",
                                                                                                  "arrivals")
        send = sending_s(profile, spec)
        if bound == "sending" and send > limit_s:
            where, why = arrivals, (f"at {profile.rate:g} requests/s the stage takes {send:,.0f} s to send its "
                                    f"requests, beyond {limit}: raise the rate or send fewer requests")
        elif longest > limit_s:
            where = ("workload", "output_tokens")
            why = f"one request of {prompt} + {output} tokens should take at least {span(longest)} {at}, beyond {limit}"
        elif bound == "sending":
            where, why = arrivals, (f"the stage sends its requests in {span(send)}, and its longest request takes at "
                                    f"least {span(longest)} more {at}: beyond {limit}")
        elif bound == "trace":
            where = ("workload", "arrivals", "path")
            why = f"the trace's stage should take at least {span(total)} {at}, beyond {limit}: set stop.duration_s"
        elif bound == "duration":
            where = ("workload", "stop", "duration_s")
            why = (f"the stage runs for stop.duration_s, and its longest request takes at least {span(longest)} more "
                   f"{at}: beyond {limit}")
        else:
            where = ("workload", "stop", "requests")
            why = (f"the stage's requests should take at least {span(total)} {at} at their shortest lengths, "
                   f"{profile.concurrency if isinstance(profile, Concurrent) else 1} at a time, beyond {limit}: "
                   "fewer requests, shorter ones, or a stop.duration_s")
        if (where, why) not in problems:
            problems.append((where, why))
    return problems

