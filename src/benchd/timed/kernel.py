"""Single kernels over lists of shapes: warm-up, many repeats with the cache flushed before each, device timing,
TFLOP/s, and the speed of each implementation relative to a named reference at the same shape."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from benchd.measure.timings import KernelResult, TimingStats
from benchd.models.flops import attention_flops, matmul_flops
from benchd.models.loading import resolve_device, resolve_dtype
from benchd.spec import AttentionKernel, AttentionShape, KernelSpec, MatmulKernel, MatmulShape
from benchd.timed.clock import CacheFlusher, DeviceClock
from benchd.timed.context import TimedContext


class Unsupported(Exception):
    """This implementation cannot run this shape, type or device: its result records why."""


# ---- implementations ---------------------------------------------------------------------------


@contextlib.contextmanager
def _float32_precision(value: str) -> Iterator[None]:
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(value)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def matmul(name: str, shape: MatmulShape, dtype: torch.dtype, device: torch.device,
           generator: torch.Generator) -> tuple[Callable[[], object], contextlib.AbstractContextManager]:
    a = torch.randn(shape.m, shape.k, dtype=dtype, device=device, generator=generator)
    b = torch.randn(shape.k, shape.n, dtype=dtype, device=device, generator=generator)
    if name == "tf32":
        if device.type != "cuda":
            raise Unsupported("tf32 needs a CUDA device")
        if dtype != torch.float32:
            raise Unsupported(f"tf32 applies to float32 inputs, not {dtype}")
        return (lambda: torch.matmul(a, b)), _float32_precision("high")
    if name == "compiled":
        compiled = torch.compile(torch.matmul, mode="max-autotune-no-cudagraphs", dynamic=False)
        return (lambda: compiled(a, b)), _float32_precision("highest")
    return (lambda: torch.matmul(a, b)), _float32_precision("highest")


_BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION",
             "math": "MATH"}


def attention(name: str, shape: AttentionShape, dtype: torch.dtype, device: torch.device,
              generator: torch.Generator) -> tuple[Callable[[], object], contextlib.AbstractContextManager]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    size = (shape.batch, shape.heads, shape.seq_len, shape.head_dim)
    q, k, v = (torch.randn(size, dtype=dtype, device=device, generator=generator) for _ in range(3))
    causal = shape.causal
    if name == "eager":
        scale = shape.head_dim ** -0.5
        mask = torch.ones(shape.seq_len, shape.seq_len, dtype=torch.bool, device=device).triu(1) if causal else None

        def eager() -> torch.Tensor:
            scores = (q @ k.transpose(-2, -1)) * scale
            if mask is not None:
                scores = scores.masked_fill(mask, float("-inf"))
            return torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype) @ v

        return eager, contextlib.nullcontext()

    def sdpa() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    if name == "sdpa":
        return sdpa, contextlib.nullcontext()
    backend = getattr(SDPBackend, _BACKENDS[name])
    with sdpa_kernel(backend):  # a backend that cannot take these inputs fails here, not in the timed loop
        try:
            sdpa()
        except RuntimeError as error:
            raise Unsupported(f"{name} cannot run this shape/type here: {str(error).splitlines()[0]}") from None
    return sdpa, sdpa_kernel(backend)


# ---- the run -----------------------------------------------------------------------------------


def execute(ctx: TimedContext) -> None:
    assert isinstance(ctx.spec, KernelSpec)  # run_timed (timed/__init__.py) picks this body by the spec's kind
    options = ctx.spec.kernel
    device = resolve_device(ctx.spec.device)
    dtype = resolve_dtype(ctx.spec.dtype, device)
    dtype_name = str(dtype).removeprefix("torch.")
    build, flops = (matmul, matmul_flops) if isinstance(options, MatmulKernel) else (attention, attention_flops)
    clock = DeviceClock(device)
    flush = CacheFlusher(device, options.flush_bytes) if options.flush_l2 else None
    reference = options.reference_name()
    stages = len(options.shapes) * len(options.chosen())
    measured = (ctx.metadata.device_limits or {}).get("matmul_flops_per_s", {})
    for shape in options.shapes:
        at_shape: dict[str, KernelResult] = {}
        for name in options.chosen():
            ctx.check_stop()
            times: list[float] = []

            def summary(status: str, error: str | None, name=name, shape=shape, times=times) -> KernelResult:
                stats = TimingStats.of(times)
                tflops = flops(shape) / stats.median / 1e12 if stats.median else None
                peak = (rate := measured.get("tf32" if name == "tf32" else dtype_name)) and rate / 1e12
                return KernelResult(
                    stage=f"{name} {shape.label()}", status=status if error is None else "failed", error=error,
                    kernel=options.op, implementation=name, shape=shape.label(), dtype=dtype_name,
                    warmup=options.warmup, timing=stats, flops=flops(shape),
                    tflops=tflops, reference=reference, peak_tflops=peak or None,
                    of_peak=tflops / peak if tflops and peak else None)

            ctx.open_stage(summary)
            generator = torch.Generator(device=device).manual_seed(ctx.spec.seed)
            try:
                fn, scope = build(name, shape, dtype, device, generator)
                _time(ctx, fn, scope, clock, flush, options, times, name, shape.label(), dtype_name)
            except (Unsupported, RuntimeError) as error:  # out of memory, no kernel for it: the others go on
                reason = str(error) if isinstance(error, Unsupported) else f"{type(error).__name__}: {error}"
                at_shape[name] = ctx.close_stage("failed", reason)
            else:
                at_shape[name] = ctx.close_stage()
            ctx.progress(f"{options.op} {shape.label()}", stages, ctx.stage_index, stages)
        if _relate(at_shape, reference):
            ctx.restate_all()  # the summaries now carry their speed relative to the reference


def _time(ctx: TimedContext, fn: Callable[[], object], scope: contextlib.AbstractContextManager,
          clock: DeviceClock, flush: CacheFlusher | None, options: MatmulKernel | AttentionKernel,
          times: list[float], name: str, shape: str, dtype: str) -> None:
    """Warm-up calls (compilation, autotuning, allocator growth happen there), then the timed repeats; repeats
    completed before a stop or an error are kept."""
    marks = []
    try:
        with scope:
            for _ in range(options.warmup):
                fn()
            clock.synchronize()
            for _ in range(options.repeats):
                ctx.check_stop()
                if flush is not None:
                    flush()
                start = clock.mark()
                fn()
                marks.append((start, clock.mark()))
    finally:
        clock.synchronize()
        times.extend(clock.seconds(a, b) for a, b in marks)
        for i, seconds in enumerate(times):
            ctx.timing(name, options.warmup + i, False, seconds, shape, dtype)


def _relate(results: dict[str, KernelResult], reference: str) -> bool:
    """Each implementation's speed relative to the reference at the same shape; whether any was set."""
    base = results.get(reference)
    if base is None or not base.timing.median:
        return False
    for result in results.values():
        if result.timing.median:
            result.speedup_vs_reference = base.timing.median / result.timing.median
    return True
