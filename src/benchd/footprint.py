"""What a run needs in memory, estimated from the spec before anything loads (no torch): weights, KV cache,
activations, and a timed run's tensors; admission compares it with the memory of the device it will run on."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from benchd import replay
from benchd.documents import parse_json
from benchd.flops import Shape, memory_breakdown
from benchd.presets import PRESETS, Preset, parameter_count
from benchd.spec import AttentionKernel, MatmulKernel, RunSpec, Trace, TransformersOptions

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
LOGIT_BYTES = 4  # logits are upcast to float32
# What transformers' continuous batching takes by default where benchd sets nothing (engines/transformers_cb.py):
# on CPU the cache is sized explicitly; on CUDA it sizes the cache from free memory itself.
CPU_CACHE_TOKENS = 256 * 32
CPU_BATCH_TOKENS = 256
CUDA_BATCH_TOKENS = 2048


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


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


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
    if spec.kind == "kernel":
        return _kernel(spec, element)
    if spec.kind == "generate" and spec.engine == "openai":
        return Footprint()
    if spec.kind == "train_step":
        element = dtype_bytes("float32" if spec.dtype == "auto" else spec.dtype, device_type)
    shape, weights = model_shape_and_weights(spec.model, element)
    if shape is None:
        return None if weights is None else Footprint(weights=weights)
    weights = weights or 0
    if spec.kind == "train_step":
        t = spec.train_step
        activation = 2 if t.autocast or element == 2 else 4
        breakdown = memory_breakdown(weights // element, shape, t.batch_size, t.context_length, element, activation,
                                     t.mode)
        return Footprint(weights=weights, other=breakdown.total - weights)
    kv_per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * element
    workload = spec.workload
    sequence = sum(replay.longest(workload))  # a conversation's last turn, or a trace's longest request
    if spec.engine == "static":
        batch = spec.static.batch_size
        return Footprint(weights=weights, kv_cache=batch * sequence * kv_per_token,
                         activations=batch * shape.vocab * LOGIT_BYTES * 2)
    options = spec.transformers
    if options.num_blocks is not None:
        cache_tokens = options.num_blocks * (options.block_size or 32)
    else:
        cache_tokens = CPU_CACHE_TOKENS if device_type == "cpu" else sequence  # CUDA sizes it from what is free
    batch_tokens = options.max_batch_tokens or (CPU_BATCH_TOKENS if device_type == "cpu" else CUDA_BATCH_TOKENS)
    per_token = shape.vocab * LOGIT_BYTES + (4 * shape.hidden + 3 * shape.ffn) * element
    return Footprint(weights=weights, kv_cache=cache_tokens * kv_per_token, activations=batch_tokens * per_token)


def _kernel(spec: RunSpec, element: int) -> Footprint:
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

CPU_CACHE_BLOCKS, BLOCK_SIZE = 256, 32  # engines/transformers_cb.py's CPU cache, and transformers' default block


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
    """(blocks, tokens a block) of continuous batching's cache where benchd or the spec sizes it; None where
    transformers sizes it from the free memory (CUDA, unless num_blocks is set)."""
    if options.num_blocks is None and (options.library_defaults or device_type != "cpu"):
        return None
    return options.num_blocks or CPU_CACHE_BLOCKS, options.block_size or BLOCK_SIZE


def fit_problems(spec: RunSpec, device_type: str) -> list[tuple[tuple, str]]:
    """(field, why) for each thing one request (or a training step's context) needs and the model or its cache
    cannot hold: what the worker would otherwise find as it loads (runner.check_fits, the engine's capacity)."""
    problems: list[tuple[tuple, str]] = []
    positions = model_positions(spec.model) if spec.kind != "kernel" else None
    if spec.kind == "train_step":
        context = spec.train_step.context_length
        if positions is not None and context > positions:
            problems.append((("train_step", "context_length"),
                             f"{context} is beyond the model's {positions} positions"))
        return problems
    if spec.kind != "generate" or spec.engine == "openai":
        return problems
    trace = isinstance(spec.workload.arrivals, Trace)
    need = sum(replay.longest(spec.workload))
    if positions is not None and need > positions:
        field = ("workload", "arrivals", "path") if trace else ("workload", "prompt_tokens")
        problems.append((field, f"prompt + output may reach {need} tokens, beyond the model's {positions} positions"))
    cache = cache_tokens(spec.transformers, device_type) if spec.engine == "transformers" else None
    if cache is not None and cache[0] * cache[1] < need:
        problems.append((("transformers", "num_blocks"), f"the cache holds {cache[0]} × {cache[1]} tokens, but one "
                                                         f"request may need {need} (prompt + output)"))
    return problems
