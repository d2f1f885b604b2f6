"""A training step, phase by phase: forward (with the loss), backward, and AdamW's step.

The structure of the classic benchmarking scripts: random tokens, warm-up steps that enter no figure, then
measured steps; every phase between two device marks and one synchronisation per step."""

from __future__ import annotations

import contextlib
import gc
import time

import torch

from benchd.measure.timings import TimingStats, TrainStepSummary
from benchd.models.flops import PRECISIONS, Shape, memory_breakdown, peak_tflops, step_flops
from benchd.models.loading import DTYPES, load_model, parameter_count
from benchd.spec import SpecError, TrainStepSpec
from benchd.timed.clock import DeviceClock
from benchd.timed.context import TimedContext

PHASES = {"forward": ("forward",), "forward_backward": ("forward", "backward"),
          "train": ("forward", "backward", "optimizer")}
PRECISION = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def execute(ctx: TimedContext) -> None:
    assert isinstance(ctx.spec, TrainStepSpec)  # run_timed (timed/__init__.py) picks this body by the spec's kind
    options = ctx.spec.train_step
    levels = options.warmup_study or [options.warmup_steps]
    for warmup in levels:
        _Level(ctx, warmup, len(levels)).run()
        ctx.close_stage()
        gc.collect()
        if ctx.device.type == "cuda":
            torch.cuda.empty_cache()


def matmul_precision(weights: torch.dtype, autocast: torch.dtype | None) -> str:
    low = autocast or weights
    if low in PRECISION:
        return PRECISION[low]
    return "fp32" if torch.get_float32_matmul_precision() == "highest" else "tf32"


def peak_for(given: float | None, metadata, precision: str) -> tuple[float | None, str | None]:
    """The peak TFLOP/s MFU is taken against, and whence: the spec's (train_step.peak_tflops), else the device's
    matmul rate in this precision as its worker measured it (hardware/speed.py), else the datasheet's by the
    device's name (models/flops.py)."""
    if given:
        return given, "given"
    measured = (metadata.device_limits or {}).get("matmul_flops_per_s", {})
    name = next((torch_name for torch_name, short in PRECISIONS.items() if short == precision), precision)
    if measured.get(name):
        return measured[name] / 1e12, "measured"
    sheet = peak_tflops(metadata.device_name, precision)
    return sheet, "datasheet" if sheet is not None else None


class _Level:
    """One run of warm-up steps then measured steps on a freshly built model."""

    def __init__(self, ctx: TimedContext, warmup: int, levels: int) -> None:
        self.ctx, self.warmup, self.levels = ctx, warmup, levels
        spec = ctx.spec
        assert isinstance(spec, TrainStepSpec)  # execute() is its only maker
        self.options = spec.train_step
        self.phases = PHASES[self.options.mode]
        self.times: dict[str, list[float]] = {phase: [] for phase in (*self.phases, "step")}
        self.label = f"warmup={warmup}"
        dtype = "float32" if spec.dtype == "auto" else spec.dtype
        # A fresh model per level, so each warm-up count starts from the same cold state.
        loaded = load_model(ctx.model, dtype, spec.device, spec.seed, trust_remote_code=spec.trust_remote_code)
        self.model = loaded.model
        self.device = loaded.device
        limit = loaded.max_positions
        if limit is not None and self.options.context_length > limit:
            raise SpecError(f"train_step.context_length: {self.options.context_length} is beyond the model's "
                            f"{limit} positions")
        self.weights = DTYPES[dtype]
        self.autocast = DTYPES[self.options.autocast] if self.options.autocast else None
        self.shape = Shape.of(self.model.config)
        self.parameters = parameter_count(self.model)
        self.flops = step_flops(self.shape, self.options.batch_size, self.options.context_length,
                                backward=self.options.mode != "forward")
        self.precision = matmul_precision(self.weights, self.autocast)
        self.peak, self.peak_source = peak_for(self.options.peak_tflops, ctx.metadata, self.precision)
        self.peak_allocated: int | None = None
        ctx.open_stage(self.summary)

    def run(self) -> None:
        ctx, options = self.ctx, self.options
        model = self.model
        model.train()  # the presets have no dropout: train mode changes nothing but what autograd keeps
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4) if options.mode == "train" else None
        generator = torch.Generator(device=self.device).manual_seed(ctx.spec.seed)
        ids = torch.randint(0, self.shape.vocab, (options.batch_size, options.context_length),
                            device=self.device, generator=generator)
        clock = DeviceClock(self.device)
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        grad = torch.no_grad() if options.mode == "forward" else contextlib.nullcontext()
        autocast = (torch.autocast(self.device.type, dtype=self.autocast) if self.autocast
                    else contextlib.nullcontext())
        total = self.warmup + options.steps
        for step in range(total):
            ctx.check_stop()
            start = time.perf_counter()
            model.zero_grad(set_to_none=True)
            marks = [clock.mark()]
            with grad, autocast:
                loss = model(input_ids=ids, labels=ids).loss
            marks.append(clock.mark())
            if options.mode != "forward":
                loss.backward()
                marks.append(clock.mark())
            if optimizer is not None:
                optimizer.step()
                marks.append(clock.mark())
            clock.synchronize()
            end = time.perf_counter()
            durations = {phase: clock.seconds(a, b) for phase, a, b in zip(self.phases, marks, marks[1:])}
            durations["step"] = clock.seconds(marks[0], marks[-1])
            self._record(step, step < self.warmup, durations, start, end)
            ctx.progress(self.label, self.levels, step + 1, total)
        if cuda:
            self.peak_allocated = torch.cuda.max_memory_allocated(self.device)
        del optimizer, loss, ids

    def _record(self, step: int, warmup: bool, durations: dict[str, float], start: float, end: float) -> None:
        ctx = self.ctx
        for phase, seconds in durations.items():
            ctx.timing(phase, step, warmup, seconds)
        if warmup:
            return
        for phase, seconds in durations.items():
            self.times[phase].append(seconds)
        ctx.span(f"benchd.train_step.step {step}", start, end,
                 {f"benchd.{phase}_s": seconds for phase, seconds in durations.items()})

    def summary(self, status: str, error: str | None) -> TrainStepSummary:
        options = self.options
        phases = {phase: TimingStats.of(values) for phase, values in self.times.items()}
        step = phases["step"].mean
        achieved = self.flops.total / step / 1e12 if step else None
        activation_bytes = 2 if self.autocast or self.weights in PRECISION else 4
        memory = memory_breakdown(self.parameters, self.shape, options.batch_size, options.context_length,
                                  self.weights.itemsize, activation_bytes, options.mode)
        memory.peak_allocated = self.peak_allocated
        return TrainStepSummary(
            stage=self.label, status=status, error=error, model=self.ctx.spec.model, parameters=self.parameters,
            mode=options.mode, dtype=str(self.weights).removeprefix("torch."), autocast=options.autocast,
            matmul_precision=self.precision, batch_size=options.batch_size,
            context_length=options.context_length, warmup_steps=self.warmup, steps=phases["step"].count,
            phases=phases,
            tokens_per_s=options.batch_size * options.context_length / step if step else None,
            flops=self.flops, achieved_tflops=achieved, peak_tflops=self.peak, peak_source=self.peak_source,
            mfu=achieved / self.peak if achieved is not None and self.peak else None, memory=memory,
        )
