"""Model presets (random weights from a config, no download; a real preset from its converted directory) and loading
from a path or hub id, with the model's tokenizer where it has one at hand."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedModel

from benchd.models.convert import prepared
from benchd.models.presets import PRESETS, real
from benchd.models.quantize import Quantized, quantize, weight_bytes

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def preset_config(name: str) -> LlamaConfig:
    p = PRESETS[name]
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": p.rope_theta}
    if p.rope_scaling:
        rope = {**p.rope_scaling, "rope_theta": p.rope_theta}
    return LlamaConfig(
        vocab_size=p.vocab,
        hidden_size=p.hidden,
        intermediate_size=p.ffn,
        num_hidden_layers=p.layers,
        num_attention_heads=p.heads,
        num_key_value_heads=p.kv_heads or p.heads,
        max_position_embeddings=p.max_positions,
        tie_word_embeddings=p.tie_embeddings,
        rope_parameters=rope,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return DTYPES[dtype]


@dataclass(slots=True)
class LoadedModel:
    ref: str  # preset name, path or hub id, as given
    model: PreTrainedModel
    device: torch.device
    dtype: torch.dtype
    load_s: float  # loading and quantizing
    quantization: str = "none"
    quantized: Quantized | None = None
    quantize_s: float | None = None
    weight_bytes: int | None = None  # as stored on the device (benchd.models.quantize.weight_bytes)
    # Its tokenizer (with its chat template) where the model came with one: a real preset's, a directory's; None for
    # random weights, which are sent random ids (loadgen/contents.py).
    tokenizer: Any = None

    @property
    def vocab_size(self) -> int:
        return self.model.config.get_text_config().vocab_size

    @property
    def max_positions(self) -> int | None:
        return getattr(self.model.config.get_text_config(), "max_position_embeddings", None)

    @property
    def special_ids(self) -> frozenset[int]:
        config = self.model.config.get_text_config()
        ids = set()
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            value = getattr(config, name, None)
            ids.update(value if isinstance(value, list) else [value] if value is not None else [])
        return frozenset(i for i in ids if isinstance(i, int) and i >= 0)

    @property
    def eos_ids(self) -> list[int]:
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.model.config.get_text_config().eos_token_id
        return [i for i in (eos if isinstance(eos, list) else [eos]) if i is not None and i >= 0]


def load_model(
    ref: str,
    dtype: str = "auto",
    device: str = "auto",
    seed: int = 0,
    attn_implementation: str = "sdpa",
    trust_remote_code: bool = False,
    quantization: str = "none",
) -> LoadedModel:
    """A preset gets random weights (seeded) built directly on the device; anything else goes to from_pretrained.
    Quantization (benchd.spec.stack) then replaces the linear layers' weights in place."""
    target = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, target)
    start = time.perf_counter()
    tokenizer = None
    if ref in PRESETS and real(ref) is None:
        torch.manual_seed(seed)
        with target:
            model = AutoModelForCausalLM.from_config(
                preset_config(ref), dtype=torch_dtype, attn_implementation=attn_implementation
            )
    else:
        source = str(prepared(ref)) if real(ref) is not None else ref
        model = AutoModelForCausalLM.from_pretrained(
            source, dtype=torch_dtype, attn_implementation=attn_implementation,
            trust_remote_code=trust_remote_code,
        ).to(target)
        tokenizer = local_tokenizer(source)
    model.eval()
    quantized = quantize_s = None
    if quantization != "none":
        begun = time.perf_counter()
        quantized = quantize(model, quantization, target, torch_dtype)
        quantize_s = time.perf_counter() - begun
    if target.type == "cuda":
        torch.cuda.synchronize(target)
    return LoadedModel(ref=ref, model=model, device=target, dtype=torch_dtype, load_s=time.perf_counter() - start,
                       quantization=quantization, quantized=quantized, quantize_s=quantize_s,
                       weight_bytes=weight_bytes(model), tokenizer=tokenizer)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def local_tokenizer(source: str):
    """The tokenizer a local model directory holds; None for a directory without one, or a hub id (whose tokenizer
    might be fetched from the network)."""
    path = Path(source)
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(source, local_files_only=True)


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def greedy_config(loaded: LoadedModel, ignore_eos: bool, max_new_tokens: int = 128):
    """Greedy decoding; with ignore_eos every request produces exactly its requested number of tokens."""
    from transformers import GenerationConfig

    config = loaded.model.config.get_text_config()
    pad = config.pad_token_id if config.pad_token_id is not None else 0
    # An empty list (not None, which generate() would fill from the model) disables EOS without a warning.
    eos = [] if ignore_eos else loaded.eos_ids
    return GenerationConfig(do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=pad)
