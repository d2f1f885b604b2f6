"""What timed runs report, as plain data the daemon handles without torch: timing statistics, a kernel's result
and a training step's summary."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchd.models.flops import MemoryBreakdown, StepFlops
from benchd.spec.fields import Documented


@dataclass(slots=True)
class Timing:
    """One timed repetition: a phase of a training step, or one call of a kernel."""

    stage_index: int
    series: str  # forward | backward | optimizer | step, or the kernel's implementation
    index: int  # step or repeat number within the stage, warm-up included
    warmup: bool
    seconds: float


class TimingStats(Documented):
    """Seconds over the measured repetitions; std is the sample standard deviation (n − 1)."""

    count: int
    """Measured repetitions."""
    mean: float | None = None
    """Their mean, in seconds."""
    std: float | None = None
    """Their sample standard deviation (n − 1), in seconds."""
    min: float | None = None
    """The fastest, in seconds."""
    median: float | None = None
    """The median, in seconds."""
    max: float | None = None
    """The slowest, in seconds."""

    @classmethod
    def of(cls, values: list[float]) -> TimingStats:
        if not values:
            return cls(count=0)
        a = np.asarray(values, dtype=np.float64)
        return cls(count=a.size, mean=float(a.mean()), std=float(a.std(ddof=1)) if a.size > 1 else 0.0,
                   min=float(a.min()), median=float(np.median(a)), max=float(a.max()))


CSV_COLUMNS = ["kernel", "implementation", "shape", "dtype", "warmup", "repeats", "mean_s", "std_s", "min_s",
               "median_s", "max_s", "flops", "tflops", "reference", "speedup_vs_reference", "status", "error"]


class KernelResult(Documented):
    stage: str
    """"<implementation> <shape>"."""
    status: str
    """How the stage ended: succeeded, or failed (with its error)."""
    error: str | None = None
    """Why it failed (an implementation this device cannot run, …)."""
    kernel: str
    """The op: matmul or attention."""
    implementation: str
    """The implementation timed."""
    shape: str
    """The shape, as its label."""
    dtype: str
    """The element type."""
    warmup: int
    """Calls before the measured ones."""
    timing: TimingStats
    """Seconds a call."""
    flops: int
    """FLOPs a call."""
    tflops: float | None
    """flops / the median time, in TFLOP/s."""
    reference: str
    """The implementation it is compared with."""
    speedup_vs_reference: float | None = None
    """The reference's median / this one's, at the same shape."""
    # The device's matmul rate in this dtype (TF32's for the tf32 implementation) as its worker measured it
    # (hardware/speed.py), and tflops / it: how near the device's limit this kernel ran.
    peak_tflops: float | None = None
    """The device's matmul rate in this dtype (TF32's for the tf32 implementation) as its worker measured it."""
    of_peak: float | None = None
    """tflops / peak_tflops: how near the device's limit this kernel ran."""

    def csv_row(self) -> dict[str, object]:
        t = self.timing
        return {"kernel": self.kernel, "implementation": self.implementation, "shape": self.shape,
                "dtype": self.dtype, "warmup": self.warmup, "repeats": t.count, "mean_s": t.mean, "std_s": t.std,
                "min_s": t.min, "median_s": t.median, "max_s": t.max, "flops": self.flops, "tflops": self.tflops,
                "reference": self.reference, "speedup_vs_reference": self.speedup_vs_reference,
                "status": self.status, "error": self.error}


class TrainStepSummary(Documented):
    stage: str
    """"warmup=N": the warm-up steps before its measured ones."""
    status: str
    """How the stage ended: succeeded, or why not (failed, stopped, cancelled, interrupted)."""
    error: str | None = None
    """Why it failed."""
    model: str
    """The model trained."""
    parameters: int
    """Its parameters."""
    mode: str
    """forward | forward_backward | train."""
    dtype: str
    """The weights' type."""
    autocast: str | None
    """torch.autocast's type, where it ran under it."""
    matmul_precision: str
    """bf16 | fp16 | tf32 | fp32: what the peak is taken for."""
    batch_size: int
    """Sequences a step."""
    context_length: int
    """Tokens a sequence."""
    warmup_steps: int
    """Steps before the measured ones."""
    steps: int
    """Measured steps completed."""
    phases: dict[str, TimingStats]
    """Each phase and the whole step, seconds."""
    tokens_per_s: float | None
    """Tokens trained on a second."""
    flops: StepFlops
    """The step's model FLOPs."""
    achieved_tflops: float | None
    """Model FLOPs a second over the mean step, in TFLOP/s."""
    peak_tflops: float | None
    """The peak MFU is taken against, in TFLOP/s."""
    peak_source: str | None = None
    """given (train_step.peak_tflops), measured (the device's probe), or datasheet."""
    mfu: float | None
    """Model FLOPs per step / mean step time / peak."""
    memory: MemoryBreakdown
    """The step's memory: the estimate beside the measured peak."""
