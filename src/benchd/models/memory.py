"""What a run needs in memory, estimated from the spec before anything loads (no torch): weights, a timed run's
tensors, and through its engine's memory plan (EngineMemory) the KV cache and activations of a generation; admission
compares it with the memory of the device it will run on, or with the plan the engine makes there."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from benchd.models.flops import Shape, memory_breakdown, sliding_window
from benchd.models.presets import PRESETS, Preset, parameter_count
from benchd.spec import (
    AttentionKernel,
    AttentionShape,
    GenerateSpec,
    KernelSpec,
    MatmulKernel,
    MatmulShape,
    RunSpec,
    SpecError,
    Trace,
    TrainStepSpec,
    traces,
)
from benchd.spec.documents import parse_json

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
LOGIT_BYTES = 4  # logits are upcast to float32
# The share of a device's available memory a run may plan to use (BENCHD_LIMITS__MEMORY_FRACTION's default).
MEMORY_FRACTION = 0.9


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


class PlanError(ValueError):
    """The run cannot fit the device: field names what to change."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


@dataclass(frozen=True, slots=True)
class Footprint:
    weights: int = 0
    kv_cache: int = 0
    activations: int = 0
    other: int = 0  # a timed run's tensors, the cache-flush buffer

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.activations + self.other

    def sharded(self, ranks: int) -> Footprint:
        """What each rank of a tensor-parallel group holds: its share of the weights and of the KV heads; the
        activations are counted whole (the logits, the largest of them, are gathered on every rank)."""
        return Footprint(weights=self.weights // ranks, kv_cache=self.kv_cache // ranks,
                         activations=self.activations, other=self.other // ranks)

    def describe(self) -> str:
        parts = [(name, getattr(self, name)) for name in ("weights", "kv_cache", "activations", "other")]
        return " + ".join(f"{name} {gib(n)}" for name, n in parts if n) or "nothing"


def dtype_bytes(dtype: str, device_type: str) -> int:
    return DTYPE_BYTES.get(dtype, 2 if device_type == "cuda" else 4)  # auto: bf16 on CUDA, fp32 on CPU


def _preset_shape(p: Preset) -> Shape:
    return Shape(hidden=p.hidden, ffn=p.ffn, layers=p.layers, heads=p.heads, kv_heads=p.kv_heads or p.heads,
                 head_dim=p.hidden // p.heads, vocab=p.vocab)


def _dir_config(path: Path) -> dict | None:
    """A local model's config.json, its text model's part (a multimodal config nests it)."""
    try:
        config = parse_json((path / "config.json").read_text())  # bounded: a config.json may be anything
    except (OSError, ValueError):
        return None
    config = config.get("text_config", config) if isinstance(config, dict) else None
    return config if isinstance(config, dict) else None


def _dir_shape(path: Path) -> Shape | None:
    """A local model's shape from its config.json (decoder configs name these fields alike)."""
    config = _dir_config(path)
    if config is None:
        return None
    try:
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        return Shape(hidden=hidden, ffn=int(config.get("intermediate_size") or 4 * hidden),
                     layers=int(config["num_hidden_layers"]), heads=heads,
                     kv_heads=int(config.get("num_key_value_heads") or heads),
                     head_dim=int(config.get("head_dim") or hidden // heads), vocab=int(config["vocab_size"]),
                     window=sliding_window(config))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def _dir_weight_bytes(path: Path, element_bytes: int) -> int | None:
    """Weights on disk, scaled from the type they are stored in (taken as 2 bytes, the common case) to the type
    the run loads them in."""
    files = [f for pattern in ("*.safetensors", "*.bin") for f in path.glob(pattern)]
    if not files:
        return None
    return sum(os.path.getsize(f) for f in files) * element_bytes // 2


def model_shape_and_weights(ref: str, element_bytes: int) -> tuple[Shape | None, int | None]:
    if ref in PRESETS:
        preset = PRESETS[ref]
        return _preset_shape(preset), parameter_count(preset) * element_bytes
    path = Path(ref)
    if not path.is_dir():
        return None, None  # a hub id: nothing to read before it loads
    return _dir_shape(path), _dir_weight_bytes(path, element_bytes)


SpecT = TypeVar("SpecT", bound=GenerateSpec)  # an engine's own spec


class EngineMemory(Generic[SpecT]):
    """An engine's memory plan (its record's `memory`): what a generation holds beside the weights before anything
    loads, and on a GPU the plan its worker will make. This base holds the weights and nothing more, plans nothing,
    and bounds no request; an engine's folder declares its own (engines/transformers/memory.py), of its spec."""

    def footprint(self, spec: SpecT, device_type: str, shape: Shape, weights: int, element: int) -> Footprint:
        """weights: bytes in the run's dtype (element bytes an element), shape: the model's."""
        return Footprint(weights=weights)

    def planned(self, spec: SpecT, device_type: str) -> bool:
        """Whether the engine plans the run's memory on this device: its memory is then the plan's (plan())."""
        return False

    def plan(self, spec: SpecT, shape: Shape, element: int, weights: int, available: int) -> Any:
        """The plan its worker will make with `available` bytes of the device for a model of this shape (sharded:
        each rank's share); raises PlanError when none fits."""
        return None

    def fit_problems(self, spec: SpecT, device_type: str, need: int) -> list[tuple[tuple, str]]:
        """(field, why) when a request of `need` tokens (prompt + output) cannot fit what the engine holds for it."""
        return []


NO_PLAN: EngineMemory[GenerateSpec] = EngineMemory()


def _memory(spec: GenerateSpec) -> EngineMemory[GenerateSpec]:  # the record's, of this spec's engine
    return spec.engine_record.memory or NO_PLAN


def estimate(spec: RunSpec, device_type: str) -> Footprint | None:
    """None when nothing can be said before loading (a hub id); nothing for a model a server holds."""
    element = dtype_bytes(spec.dtype, device_type)
    if isinstance(spec, KernelSpec):
        return _kernel(spec, element)
    if isinstance(spec, GenerateSpec) and not spec.engine_record.loads_model:
        return Footprint()
    if isinstance(spec, TrainStepSpec):
        element = dtype_bytes("float32" if spec.dtype == "auto" else spec.dtype, device_type)
    shape, weights = model_shape_and_weights(spec.model, element)
    if shape is None:
        return None if weights is None else Footprint(weights=weights)
    weights = weights or 0
    if isinstance(spec, TrainStepSpec):
        t = spec.train_step
        activation = 2 if t.autocast or element == 2 else 4
        breakdown = memory_breakdown(weights // element, shape, t.batch_size, t.context_length, element, activation,
                                     t.mode)
        return Footprint(weights=weights, other=breakdown.total - weights)
    return _memory(spec).footprint(spec, device_type, shape, weights, element)


def planned(spec: RunSpec, device_type: str) -> bool:
    """Whether its engine plans the run's memory on this device: it is then the plan's, not estimate()'s."""
    return isinstance(spec, GenerateSpec) and _memory(spec).planned(spec, device_type)


def plan_for(spec: RunSpec, available: int, ranks: int = 1) -> Any:
    """The plan a worker will make for this spec with `available` bytes of its GPU (each rank's, for a
    tensor-parallel group: its engine's, as engines/transformers/plan.py's CachePlan); None when the model's shape is
    unknown before it loads (a hub id), or the engine plans nothing. Raises PlanError."""
    element = dtype_bytes(spec.dtype, "cuda")
    shape, weights = model_shape_and_weights(spec.model, element)
    if shape is None:
        return None
    return _memory(spec).plan(spec, shape.sharded(ranks), element, (weights or 0) // ranks, available)


def _kernel(spec: KernelSpec, element: int) -> Footprint:
    kernel = spec.kernel
    flush = kernel.flush_bytes if kernel.flush_l2 else 0
    largest = 0
    for shape in kernel.shapes:
        if isinstance(kernel, MatmulKernel):
            assert isinstance(shape, MatmulShape)  # a matmul's shapes
            need = (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n) * element
        else:
            assert isinstance(kernel, AttentionKernel)
            assert isinstance(shape, AttentionShape)  # an attention kernel's shapes
            qkvo = 4 * shape.batch * shape.heads * shape.seq_len * shape.head_dim * element
            # eager: the scores and their float32 softmax, and the mask
            scores = (shape.batch * shape.heads * shape.seq_len ** 2 * (element + LOGIT_BYTES)
                      + shape.seq_len ** 2 if "eager" in kernel.chosen() else 0)
            need = qkvo + scores
        largest = max(largest, need)
    return Footprint(other=largest + flush)


# ---- what one request needs of the model and its cache (the worker checks the same as it loads) --------------

def model_positions(ref: str) -> int | None:
    """The longest sequence the model takes: a preset's positions, or a local model's max_position_embeddings;
    None when unknown before loading (a hub id)."""
    if ref in PRESETS:
        return PRESETS[ref].max_positions
    path = Path(ref)
    config = _dir_config(path) if path.is_dir() else None
    value = config.get("max_position_embeddings") if config is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def fit_problems(spec: RunSpec, device_type: str) -> list[tuple[tuple, str]]:
    """(field, why) for each thing one request (or a training step's context) needs and the model or its cache
    cannot hold: what the worker would otherwise find as it loads (worker/core.py's check_fits, the engine's
    capacity)."""
    problems: list[tuple[tuple, str]] = []
    positions = model_positions(spec.model) if not isinstance(spec, KernelSpec) else None
    if isinstance(spec, TrainStepSpec):
        context = spec.train_step.context_length
        if positions is not None and context > positions:
            problems.append((("train_step", "context_length"),
                             f"{context} is beyond the model's {positions} positions"))
        return problems
    if not isinstance(spec, GenerateSpec) or not spec.engine_record.loads_model:
        return problems
    trace = isinstance(spec.workload.arrivals, Trace)
    need = sum(traces.longest(spec.workload))
    if positions is not None and need > positions:
        field = ("workload", "arrivals", "path") if trace else ("workload", "prompt_tokens")
        problems.append((field, f"prompt + output may reach {need} tokens, beyond the model's {positions} positions"))
    return [*problems, *_memory(spec).fit_problems(spec, device_type, need)]


def check_fits(spec: GenerateSpec, max_positions: int | None) -> None:
    """A generation's longest request within the model's positions (known once it has loaded)."""
    workload = spec.workload
    if isinstance(workload.arrivals, Trace):
        trace = traces.summarize(workload.arrivals)
        need, field = trace.max_prompt_tokens + trace.max_output_tokens, "workload.arrivals.path"
    else:
        need, field = workload.max_sequence_tokens(), "workload.prompt_tokens"
    if max_positions is not None and need > max_positions:
        raise SpecError(f"{field}: prompt + output may reach {need} tokens, beyond the model's {max_positions} "
                        "positions")
