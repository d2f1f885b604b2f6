"""Model FLOPs and memory of a training step, computed from the model's config, single kernels' FLOPs, and devices'
peak rates."""

from __future__ import annotations

from dataclasses import dataclass, replace

from benchd.spec.fields import Documented

# Dense peak TFLOP/s by the matmul precision, from NVIDIA's datasheets (no sparsity). fp32 is the CUDA-core
# rate: PyTorch runs float32 matmuls at full precision unless float32_matmul_precision is lowered (then tf32).
# Matched against the device name in order, so the more specific names come first. Override per run with
# train_step.peak_tflops.
PEAK_TFLOPS: list[tuple[str, dict[str, float]]] = [
    ("H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.0}),
    ("H100 NVL", {"bf16": 835.0, "fp16": 835.0, "tf32": 418.0, "fp32": 60.0}),
    ("H100", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),  # SXM5
    ("H200", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("H20", {"bf16": 148.0, "fp16": 148.0, "tf32": 74.0, "fp32": 44.0}),
    ("A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("L40S", {"bf16": 362.0, "fp16": 362.0, "tf32": 183.0, "fp32": 91.6}),
    ("L4", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    ("A10", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}),
]


# Peak memory bandwidth, bytes/s, from NVIDIA's datasheets: H100 (SXM5 80 GB HBM3 3.35 TB/s, PCIe 2.0 TB/s, NVL
# 3.9 TB/s), H200 (4.8 TB/s), H20 (4.0 TB/s), A100 (80 GB SXM 2,039 GB/s, 80 GB PCIe 1,935 GB/s, 40 GB 1,555 GB/s),
# L40S (864 GB/s), L4 (300 GB/s), A10 (600 GB/s). Matched as PEAK_TFLOPS is.
PEAK_BANDWIDTH: list[tuple[str, float]] = [
    ("H100 PCIe", 2.0e12), ("H100 NVL", 3.9e12), ("H100", 3.35e12), ("H200", 4.8e12), ("H20", 4.0e12),
    ("A100-SXM4-80GB", 2.039e12), ("A100 80GB PCIe", 1.935e12), ("A100", 1.555e12),
    ("L40S", 0.864e12), ("L4", 0.3e12), ("A10", 0.6e12),
]
PRECISIONS = {"bfloat16": "bf16", "float16": "fp16", "tf32": "tf32", "float32": "fp32"}  # torch's names: the table's


def peak_bandwidth(device_name: str) -> float | None:
    """The datasheet's memory bandwidth for this device, bytes/s; None when unknown."""
    return next((peak for name, peak in PEAK_BANDWIDTH if name in device_name), None)


def peak_tflops(device_name: str, precision: str) -> float | None:
    """The table's peak for this device and matmul precision (bf16, fp16, tf32, fp32); None when unknown."""
    for name, peaks in PEAK_TFLOPS:
        if name in device_name:
            return peaks.get(precision)
    return None


def sliding_window(config: dict) -> int:
    """A decoder config's sliding window where any of its layers slides, else 0: as transformers groups layers
    (continuous_batching/cache.py), by layer_types where the config names them, else all slide when it has one."""
    window = config.get("sliding_window") or 0
    types = config.get("layer_types")
    return int(window) if types is None or "sliding_attention" in types else 0


@dataclass(frozen=True, slots=True)
class Shape:
    """The dimensions of a Llama-style decoder that FLOPs and memory depend on."""

    hidden: int
    ffn: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    gated_mlp: bool = True  # SwiGLU: gate, up and down projections
    window: int = 0  # the sliding window of a model with sliding-window layers (0: none)

    @classmethod
    def of(cls, config) -> Shape:
        c = config.get_text_config()
        heads = c.num_attention_heads
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
        return cls(hidden=c.hidden_size, ffn=c.intermediate_size, layers=c.num_hidden_layers, heads=heads,
                   kv_heads=getattr(c, "num_key_value_heads", None) or heads, head_dim=head_dim,
                   vocab=c.vocab_size, gated_mlp=getattr(c, "hidden_act", "silu") in ("silu", "swish"),
                   window=sliding_window({"sliding_window": getattr(c, "sliding_window", None),
                                          "layer_types": getattr(c, "layer_types", None)}))


    def sharded(self, ranks: int) -> Shape:
        """One tensor-parallel rank's share: its heads, KV heads and MLP columns (the vocabulary stays whole)."""
        if ranks == 1:
            return self
        return replace(self, heads=max(1, self.heads // ranks), kv_heads=max(1, self.kv_heads // ranks),
                       ffn=self.ffn // ranks)


def forward_flops_per_token(shape: Shape, context: int) -> int:
    """Matmul FLOPs (2 per multiply-add) of one token's forward pass at this context length.

    Attention counts every query against the whole context, causal or not, as PaLM's model-FLOPs
    definition does; embeddings, norms, RoPE and softmax are not matmuls and are not counted."""
    d, q, kv = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    projections = 2 * d * q + 2 * 2 * d * kv + 2 * q * d
    scores = 2 * 2 * q * context  # Q·Kᵀ and P·V
    mlp = (3 if shape.gated_mlp else 2) * 2 * d * shape.ffn
    return shape.layers * (projections + scores + mlp) + 2 * d * shape.vocab


def matmul_flops(shape) -> int:
    """C = A @ B with A (m, k), B (k, n): a multiply and an add per term."""
    return 2 * shape.m * shape.n * shape.k


def attention_flops(shape) -> int:
    """softmax(Q Kᵀ / √d) V, forward: 4·b·h·s²·d, half when causal (FlashAttention's convention)."""
    full = 4 * shape.batch * shape.heads * shape.seq_len * shape.seq_len * shape.head_dim
    return full // 2 if shape.causal else full


class StepFlops(Documented):
    forward: int
    """The forward pass' FLOPs."""
    backward: int
    """The backward pass': twice the forward (gradients with respect to inputs and to weights)."""
    total: int
    """Both."""


def step_flops(shape: Shape, batch: int, context: int, backward: bool) -> StepFlops:
    forward = batch * context * forward_flops_per_token(shape, context)
    back = 2 * forward if backward else 0
    return StepFlops(forward=forward, backward=back, total=forward + back)


class MemoryBreakdown(Documented):
    """Bytes: an analytic estimate beside the measured peak (CUDA's allocator; None on a CPU)."""

    parameters: int
    """The weights' bytes."""
    gradients: int
    """Their gradients' bytes."""
    optimizer_states: int
    """AdamW's exp_avg and exp_avg_sq, each the size and type of the weights."""
    activations: int
    """Estimated: the tensors autograd saves for the backward pass (the peak of one forward)."""
    total: int
    """The estimate's sum."""
    peak_allocated: int | None = None
    """torch's allocator peak on a CUDA device (null on a CPU)."""


def activation_bytes(shape: Shape, batch: int, context: int, element_bytes: int, saved: bool) -> int:
    """What the forward pass keeps for backward, per layer (memory-efficient attention: no s² score matrix):
    norm inputs and outputs (4·d), Q (q), K and V (2·kv), attention output and o_proj input (2·q), the MLP's
    gate, its activation, up and their product (4·ffn), per token; then the final norm and the logits with their
    float32 copy for the loss. Without gradients only one layer's intermediates and the logits are alive."""
    n = batch * context
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    per_layer = n * (4 * shape.hidden + q + 2 * kv + 2 * q + 4 * shape.ffn) * element_bytes
    logits = n * shape.vocab * (element_bytes + 4 + 4)  # logits, float32 upcast, log-softmax for the loss
    head = n * shape.hidden * element_bytes + logits
    return (shape.layers if saved else 1) * per_layer + head


def memory_breakdown(parameters: int, shape: Shape, batch: int, context: int, weight_bytes: int,
                     activation_element_bytes: int, mode: str) -> MemoryBreakdown:
    weights = parameters * weight_bytes
    grads = weights if mode != "forward" else 0
    states = 2 * weights if mode == "train" else 0
    acts = activation_bytes(shape, batch, context, activation_element_bytes, saved=mode != "forward")
    return MemoryBreakdown(parameters=weights, gradients=grads, optimizer_states=states, activations=acts,
                           total=weights + grads + states + acts)
