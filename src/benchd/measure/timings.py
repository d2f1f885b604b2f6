"""What timed runs report, as plain data the daemon handles without torch: timing statistics, a kernel's result
and a training step's summary."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel

from benchd.models.flops import MemoryBreakdown, StepFlops


@dataclass(slots=True)
class Timing:
    """One timed repetition: a phase of a training step, or one call of a kernel."""

    stage_index: int
    series: str  # forward | backward | optimizer | step, or the kernel's implementation
    index: int  # step or repeat number within the stage, warm-up included
    warmup: bool
    seconds: float


class TimingStats(BaseModel):
    """Seconds over the measured repetitions; std is the sample standard deviation (n − 1)."""

    count: int
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    median: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: list[float]) -> TimingStats:
        if not values:
            return cls(count=0)
        a = np.asarray(values, dtype=np.float64)
        return cls(count=a.size, mean=float(a.mean()), std=float(a.std(ddof=1)) if a.size > 1 else 0.0,
                   min=float(a.min()), median=float(np.median(a)), max=float(a.max()))


CSV_COLUMNS = ["kernel", "implementation", "shape", "dtype", "warmup", "repeats", "mean_s", "std_s", "min_s",
               "median_s", "max_s", "flops", "tflops", "reference", "speedup_vs_reference", "status", "error"]


class KernelResult(BaseModel):
    stage: str  # "<implementation> <shape>"
    status: str
    error: str | None = None
    kernel: str
    implementation: str
    shape: str
    dtype: str
    warmup: int
    timing: TimingStats  # seconds per call
    flops: int
    tflops: float | None  # flops / median time
    reference: str
    speedup_vs_reference: float | None = None  # reference's median / this one's, at the same shape
    # The device's matmul rate in this dtype (TF32's for the tf32 implementation) as its worker measured it
    # (hardware/speed.py), and tflops / it: how near the device's limit this kernel ran.
    peak_tflops: float | None = None
    of_peak: float | None = None

    def csv_row(self) -> dict[str, object]:
        t = self.timing
        return {"kernel": self.kernel, "implementation": self.implementation, "shape": self.shape,
                "dtype": self.dtype, "warmup": self.warmup, "repeats": t.count, "mean_s": t.mean, "std_s": t.std,
                "min_s": t.min, "median_s": t.median, "max_s": t.max, "flops": self.flops, "tflops": self.tflops,
                "reference": self.reference, "speedup_vs_reference": self.speedup_vs_reference,
                "status": self.status, "error": self.error}


class TrainStepSummary(BaseModel):
    stage: str  # "warmup=N"
    status: str
    error: str | None = None
    model: str
    parameters: int
    mode: str
    dtype: str  # the weights' type
    autocast: str | None
    matmul_precision: str  # bf16 | fp16 | tf32 | fp32: what the peak is taken for
    batch_size: int
    context_length: int
    warmup_steps: int
    steps: int  # measured steps completed
    phases: dict[str, TimingStats]  # each phase and the whole step, seconds
    tokens_per_s: float | None
    flops: StepFlops
    achieved_tflops: float | None
    peak_tflops: float | None
    peak_source: str | None = None  # given (train_step.peak_tflops), measured (the device's probe), or datasheet
    mfu: float | None  # model FLOPs per step / mean step time / peak
    memory: MemoryBreakdown
