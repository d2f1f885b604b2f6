"""Options of timed runs: a training step of the spec's model, and single kernels at given shapes."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from benchd.spec.fields import LIST_MAX, NAME_MAX, NonNegativeInt, PositiveFloat, PositiveInt
from benchd.spec.fields import Strict as _Strict


class TrainStepOptions(_Strict):
    """A training step of the spec's model on random tokens, each phase timed on its own.

    dtype "auto" means float32 for a training step; autocast runs the step under torch.autocast in that
    type (mixed precision: float32 weights, low-precision matmuls)."""

    batch_size: PositiveInt = 4
    """Sequences a step trains on."""
    context_length: PositiveInt = 512
    """Tokens a sequence holds (random tokens)."""
    mode: Literal["forward", "forward_backward", "train"] = "forward_backward"
    """The phases a step runs: the forward pass, forward and backward, or train (forward, backward and an AdamW step).
    """
    autocast: Literal["bfloat16", "float16"] | None = None
    """Run the step under torch.autocast in this type (mixed precision: float32 weights, low-precision matmuls); needs
    dtype auto or float32."""
    warmup_steps: NonNegativeInt = 5
    """Steps before the measured ones, not timed."""
    steps: PositiveInt = 10
    """Measured steps."""
    warmup_study: Annotated[list[NonNegativeInt], Field(min_length=1, max_length=LIST_MAX)] | None = None
    """Repeat the run once per warm-up count (a fresh model each time) to show what warm-up does to the figures."""
    peak_tflops: PositiveFloat | None = None
    """The device's peak for MFU, in TFLOP/s; default: what its worker measured, else benchd's table by device name."""


class MatmulShape(_Strict):
    m: PositiveInt
    """Rows of the left operand and of the product."""
    n: PositiveInt
    """Columns of the right operand and of the product."""
    k: PositiveInt
    """The dimension multiplied over."""

    def label(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"


class AttentionShape(_Strict):
    batch: PositiveInt = 1
    """Sequences in the batch."""
    heads: PositiveInt
    """Attention heads."""
    seq_len: PositiveInt
    """Tokens a sequence holds (queries and keys alike)."""
    head_dim: PositiveInt
    """Elements of a head's query, key and value vectors."""
    causal: bool = True
    """Each token attends only to those before it."""

    def label(self) -> str:
        return f"b{self.batch}h{self.heads}s{self.seq_len}d{self.head_dim}" + ("c" if self.causal else "")


class _Kernel(_Strict):
    warmup: NonNegativeInt = 10
    """Calls of each implementation at each shape before the measured ones, not timed."""
    repeats: PositiveInt = 100
    """Measured calls of each implementation at each shape."""
    flush_l2: bool = True
    """Overwrite a buffer larger than the last-level cache before every measured call, so each reads cold."""
    flush_bytes: PositiveInt = 256 * 2**20
    """The size of that buffer, in bytes."""
    implementations: Annotated[list[Annotated[str, Field(max_length=NAME_MAX)]],
                               Field(min_length=1, max_length=LIST_MAX)] | None = None
    """The implementations to time (default: every one the op has); those this device cannot run fail their stage with
    why."""
    reference: Annotated[str, Field(max_length=NAME_MAX)] | None = None
    """The implementation the others are compared with (their speedup); default: the first."""

    IMPLEMENTATIONS: ClassVar[tuple[str, ...]] = ()
    DEFAULT: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="after")
    def _known(self) -> _Kernel:
        for name in self.implementations or ():
            if name not in self.IMPLEMENTATIONS:
                raise ValueError(f"implementations: unknown {name!r}; known: {', '.join(self.IMPLEMENTATIONS)}")
        if len(set(self.chosen())) != len(self.chosen()):
            raise ValueError("implementations: each may appear once")
        if self.reference is not None and self.reference not in self.chosen():
            raise ValueError(f"reference: {self.reference!r} is not among the implementations run")
        return self

    def chosen(self) -> list[str]:
        return list(self.implementations or self.DEFAULT)

    def reference_name(self) -> str:
        return self.reference or self.chosen()[0]


class MatmulKernel(_Kernel):
    """C = A @ B with A (m, k) and B (k, n): 2·m·n·k FLOPs."""

    op: Literal["matmul"]
    """A matrix multiplication, (m × k) · (k × n)."""
    shapes: Annotated[list[MatmulShape], Field(min_length=1, max_length=LIST_MAX)]
    """The shapes to time, each on its own."""
    # torch: torch.matmul at full float32 precision; tf32: float32 on TF32 tensor cores (CUDA);
    # compiled: torch.compile with max-autotune.
    IMPLEMENTATIONS: ClassVar[tuple[str, ...]] = ("torch", "tf32", "compiled")
    DEFAULT: ClassVar[tuple[str, ...]] = ("torch",)


class AttentionKernel(_Kernel):
    """softmax(Q Kᵀ / √d) V, forward: 4·b·h·s²·d FLOPs, half that when causal (FlashAttention's convention)."""

    op: Literal["attention"]
    """Scaled dot-product attention."""
    shapes: Annotated[list[AttentionShape], Field(min_length=1, max_length=LIST_MAX)]
    """The shapes to time, each on its own."""
    # sdpa: PyTorch's dispatcher picks; flash / efficient / cudnn / math: that SDPA backend forced;
    # eager: the textbook composition of matmul, mask and softmax.
    IMPLEMENTATIONS: ClassVar[tuple[str, ...]] = ("sdpa", "flash", "efficient", "cudnn", "math", "eager")
    DEFAULT: ClassVar[tuple[str, ...]] = ("eager", "sdpa")


KernelOptions = Annotated[MatmulKernel | AttentionKernel, Field(discriminator="op")]
RunKind = Literal["generate", "train_step", "kernel"]
