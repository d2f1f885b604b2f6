"""Model presets: Llama-style shapes with random weights, as plain data (no torch: the daemon sizes runs with them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Preset:
    hidden: int
    ffn: int
    layers: int
    heads: int
    vocab: int
    kv_heads: int | None = None
    max_positions: int = 2048
    tie_embeddings: bool = False
    rope_theta: float = 10_000.0
    rope_scaling: dict[str, Any] | None = None


_LLAMA3_ROPE = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}

# Llama-style blocks (RMSNorm, SwiGLU, RoPE, no biases, untied embeddings): the classic scaling-table sizes
# (d_model / d_ff / layers / heads, vocab 10,000) as in Stanford CS336 assignment 1, where the 2.7B size has
# exactly 3,406,809,600 parameters. The Llama 3 shapes follow their published configs.
PRESETS: dict[str, Preset] = {
    "tiny": Preset(hidden=64, ffn=128, layers=2, heads=4, kv_heads=2, vocab=512, max_positions=4096),
    "small": Preset(hidden=768, ffn=3072, layers=12, heads=12, vocab=10_000),
    "medium": Preset(hidden=1024, ffn=4096, layers=24, heads=16, vocab=10_000),
    "large": Preset(hidden=1280, ffn=5120, layers=36, heads=20, vocab=10_000),
    "xl": Preset(hidden=1600, ffn=6400, layers=48, heads=25, vocab=10_000),
    "2.7B": Preset(hidden=2560, ffn=10240, layers=32, heads=32, vocab=10_000),
    "llama-3.2-1b": Preset(hidden=2048, ffn=8192, layers=16, heads=32, kv_heads=8, vocab=128_256,
                           max_positions=131_072, tie_embeddings=True, rope_theta=500_000.0,
                           rope_scaling={**_LLAMA3_ROPE, "factor": 32.0}),
    "llama-3.1-8b": Preset(hidden=4096, ffn=14336, layers=32, heads=32, kv_heads=8, vocab=128_256,
                           max_positions=131_072, rope_theta=500_000.0,
                           rope_scaling={**_LLAMA3_ROPE, "factor": 8.0}),
}


def parameter_count(p: Preset) -> int:
    """Weights of a Llama-style decoder: embeddings, per layer q/k/v/o and a SwiGLU MLP and two RMSNorms, a final
    norm, and an output head unless tied (e.g. 2.7B: 3,406,809,600)."""
    head_dim = p.hidden // p.heads
    kv = (p.kv_heads or p.heads) * head_dim
    per_layer = 2 * p.hidden * p.hidden + 2 * p.hidden * kv + 3 * p.hidden * p.ffn + 2 * p.hidden
    return p.vocab * p.hidden * (1 if p.tie_embeddings else 2) + p.layers * per_layer + p.hidden
