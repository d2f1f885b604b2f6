"""What a run needs in memory, estimated from the spec before anything loads (no torch): weights, KV cache,
activations, and a timed run's tensors; admission compares it with the memory of the device it will run on (and on a
GPU with the plan that models/plan.py makes for transformers' cache)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from benchd.models.flops import Shape, memory_breakdown
from benchd.models.plan import (
    BLOCK_SIZE,
    CUDA_BATCH_TOKENS,
    LOGIT_BYTES,
    REQUESTS_PER_BATCH,
    CachePlan,
    cache_figures,
    chosen,
    gib,
    io_pairs,
    plan_cache,
)
from benchd.models.presets import PRESETS, Preset, parameter_count
from benchd.spec import (
    AttentionKernel,
    GenerateSpec,
    KernelSpec,
    MatmulKernel,
    OpenAISpec,
    RunSpec,
    SpecError,
    StaticSpec,
    Trace,
    TrainStepSpec,
    TransformersOptions,
    TransformersSpec,
    traces,
)
from benchd.spec.documents import parse_json
from benchd.spec.stack import base_attention, batching_attention

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# What benchd gives transformers' continuous batching where the spec sets nothing (engines/transformers.py): on
# CPU a fixed small cache; on CUDA a planned one (plan_cache below).
CPU_BLOCK_SIZE, CPU_CACHE_TOKENS = 32, 256 * 32
CPU_BATCH_TOKENS = 256
# The share of a device's available memory a run may plan to use (BENCHD_LIMITS__MEMORY_FRACTION's default).
MEMORY_FRACTION = 0.9


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
                     head_dim=int(config.get("head_dim") or hidden // heads), vocab=int(config["vocab_size"]))
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


def estimate(spec: RunSpec, device_type: str) -> Footprint | None:
    """None when nothing can be said before loading (a hub id, a server)."""
    element = dtype_bytes(spec.dtype, device_type)
    if isinstance(spec, KernelSpec):
        return _kernel(spec, element)
    if isinstance(spec, OpenAISpec):
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
    kv_per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * element
    workload = spec.workload
    sequence = sum(traces.longest(workload))  # a conversation's last turn, or a trace's longest request
    if isinstance(spec, StaticSpec):  # a batch's prefill: its mask, K/V repeated for every query head, the logits
        batch = spec.static.batch_size
        step = batch * sequence * (sequence * element + 2 * shape.heads * shape.head_dim * element)
        if device_type == "cpu":  # float32 scores per KV-head group, as continuous batching's (cache_figures)
            step += batch * shape.kv_heads * sequence * sequence * LOGIT_BYTES
        return Footprint(weights=weights, kv_cache=batch * sequence * kv_per_token,
                         activations=batch * shape.vocab * LOGIT_BYTES * 2 + step)
    # transformers' continuous batching where benchd does not plan (a CPU, or the library's own sizing on a GPU,
    # for which the cache holds one request at least): the cache and its worst step, a step reading all of it
    assert isinstance(spec, TransformersSpec)
    options = spec.transformers
    cpu = device_type == "cpu"
    size = options.block_size or (CPU_BLOCK_SIZE if cpu else BLOCK_SIZE)
    blocks = options.num_blocks or (CPU_CACHE_TOKENS // size if cpu else -(-sequence // size))
    batch_tokens = options.max_batch_tokens or (CPU_BATCH_TOKENS if cpu else CUDA_BATCH_TOKENS)
    attention = attention_of(spec, device_type)
    figures = cache_figures(shape, element, weights, attention, options.use_cuda_graph is True and not cpu,
                            io_pairs(options, attention, device_type) if not options.library_defaults else 1, size,
                            blocks, batch_tokens, options.max_requests_per_batch or REQUESTS_PER_BATCH, device_type)
    return Footprint(weights=weights, kv_cache=figures.kv_cache, activations=figures.masks + figures.graph_pool,
                     other=figures.reserve)


def planned(spec: RunSpec, device_type: str) -> bool:
    """Whether benchd plans the run's cache (transformers' continuous batching on a GPU, unless the spec asks for
    the library's own sizing): its memory is then the plan's, not estimate()'s."""
    return (isinstance(spec, TransformersSpec) and device_type == "cuda"
            and not spec.transformers.library_defaults)


def plan_for(spec: RunSpec, available: int, ranks: int = 1) -> CachePlan | None:
    """The plan a worker will make for this spec with `available` bytes of its GPU (each rank's, for a
    tensor-parallel group); None when the model's shape is unknown before it loads (a hub id). Raises PlanError."""
    element = dtype_bytes(spec.dtype, "cuda")
    shape, weights = model_shape_and_weights(spec.model, element)
    if shape is None:
        return None
    attention = attention_of(spec, "cuda")
    return plan_cache(shape.sharded(ranks), element, (weights or 0) // ranks, available,
                      sum(traces.longest(spec.workload)), attention, **chosen(spec.transformers, attention))


def attention_of(spec: TransformersSpec, device_type: str) -> str:
    """The attention continuous batching will run (its base name): the spec's, or what the worker will choose for
    the device (spec/stack.py's BATCHING_ORDER); transformers' own choice under library_defaults is taken as sdpa,
    the one that needs the most."""
    if spec.attn_implementation is not None:
        return base_attention(spec.attn_implementation)
    return "sdpa" if spec.transformers.library_defaults else batching_attention(device_type, spec.dtype)


def _kernel(spec: KernelSpec, element: int) -> Footprint:
    kernel = spec.kernel
    flush = kernel.flush_bytes if kernel.flush_l2 else 0
    largest = 0
    for shape in kernel.shapes:
        if isinstance(kernel, MatmulKernel):
            need = (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n) * element
        else:
            assert isinstance(kernel, AttentionKernel)
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


def cache_tokens(options: TransformersOptions, device_type: str) -> tuple[int, int] | None:
    """(blocks, tokens a block) of continuous batching's cache where the spec or benchd's CPU default sizes it; None
    where a plan (CUDA: plan_cache) or transformers (library_defaults) sizes it from the memory."""
    cpu = device_type == "cpu"
    if options.num_blocks is None and (options.library_defaults or not cpu):
        return None
    size = options.block_size or (CPU_BLOCK_SIZE if cpu else BLOCK_SIZE)
    return options.num_blocks or CPU_CACHE_TOKENS // size, size


def fit_problems(spec: RunSpec, device_type: str) -> list[tuple[tuple, str]]:
    """(field, why) for each thing one request (or a training step's context) needs and the model or its cache
    cannot hold: what the worker would otherwise find as it loads (runner.check_fits, the engine's capacity)."""
    problems: list[tuple[tuple, str]] = []
    positions = model_positions(spec.model) if not isinstance(spec, KernelSpec) else None
    if isinstance(spec, TrainStepSpec):
        context = spec.train_step.context_length
        if positions is not None and context > positions:
            problems.append((("train_step", "context_length"),
                             f"{context} is beyond the model's {positions} positions"))
        return problems
    if not isinstance(spec, GenerateSpec) or isinstance(spec, OpenAISpec):
        return problems
    trace = isinstance(spec.workload.arrivals, Trace)
    need = sum(traces.longest(spec.workload))
    if positions is not None and need > positions:
        field = ("workload", "arrivals", "path") if trace else ("workload", "prompt_tokens")
        problems.append((field, f"prompt + output may reach {need} tokens, beyond the model's {positions} positions"))
    cache = cache_tokens(spec.transformers, device_type) if isinstance(spec, TransformersSpec) else None
    if cache is not None and cache[0] * cache[1] < need:
        problems.append((("transformers", "num_blocks"), f"the cache holds {cache[0]} × {cache[1]} tokens, but one "
                                                         f"request may need {need} (prompt + output)"))
    return problems


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
