"""The stack a model runs on, beyond its dtype: quantization, attention implementation and compilation, and whether
this host can run each (decided without importing torch: the daemon never does)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Literal

Quantization = Literal["none", "int8_weight_only", "int4_weight_only", "int8_dynamic", "float8", "bnb_8bit",
                       "bnb_4bit"]
# transformers' names; the paged variants are what continuous batching runs (it turns sdpa into paged|sdpa itself).
AttnImplementation = Literal["sdpa", "eager", "flash_attention_2", "flash_attention_3", "paged|sdpa", "paged|eager",
                             "paged|flash_attention_2", "paged|flash_attention_3"]
# torch.compile modes for static generate() (a static cache, transformers' CompileConfig); continuous batching has its
# own compile levels (transformers.compile_level).
CompileMode = Literal["off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


@dataclass(frozen=True, slots=True)
class Method:
    """What a quantization or attention implementation needs: a package (its import name and where it comes from),
    and the device types it runs on."""

    package: str | None  # the module to import; None: torch and transformers suffice
    devices: tuple[str, ...]
    needs: str  # said when it is missing


QUANTIZATIONS: dict[str, Method] = {
    "none": Method(None, ("cpu", "cuda"), ""),
    "int8_weight_only": Method("torchao", ("cpu", "cuda"), "torchao (pip install torchao)"),
    "int8_dynamic": Method("torchao", ("cpu", "cuda"), "torchao (pip install torchao)"),
    # torch's tinygemm int4 kernel (_weight_int4pack_mm, bf16) is the one torchao packs for without other packages
    "int4_weight_only": Method("torchao", ("cuda",), "torchao (pip install torchao) and a CUDA GPU"),
    # rowwise float8 matmuls (torch._scaled_mm): compute capability 8.9 or newer (Ada, Hopper), checked at load
    "float8": Method("torchao", ("cuda",), "torchao (pip install torchao) and a CUDA GPU of compute capability 8.9+"),
    "bnb_8bit": Method("bitsandbytes", ("cuda",), "bitsandbytes (pip install bitsandbytes) and a CUDA GPU"),
    "bnb_4bit": Method("bitsandbytes", ("cuda",), "bitsandbytes (pip install bitsandbytes) and a CUDA GPU"),
}

ATTENTION: dict[str, Method] = {
    "sdpa": Method(None, ("cpu", "cuda"), ""),
    "eager": Method(None, ("cpu", "cuda"), ""),
    "flash_attention_2": Method("flash_attn", ("cuda",), "flash-attn 2 (pip install flash-attn) and a CUDA GPU"),
    "flash_attention_3": Method("flash_attn_interface", ("cuda",),
                                "flash-attn 3 (the flash_attn_interface module, built from flash-attention's hopper/) "
                                "and a Hopper GPU"),
}


def base_attention(name: str) -> str:
    """The implementation a model is loaded with: continuous batching adds the paged| prefix at its start."""
    return name.removeprefix("paged|")


def installed(package: str) -> bool:
    """Whether the package can be imported here, without importing it (the daemon and its workers share the
    environment, so the daemon's answer holds for them)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def _missing(name: str, method: Method, device_type: str) -> str | None:
    if method.package is not None and not installed(method.package):
        return f"{name} needs {method.needs}: {method.package} is not installed"
    if device_type not in method.devices:
        return f"{name} needs {method.needs}: it does not run on {device_type}"
    return None


def unavailable(quantization: str, attn_implementation: str | None, device_type: str) -> list[tuple[str, str]]:
    """(field, why) for each stack choice this host cannot run on a device of this type (cpu, cuda)."""
    problems = []
    if (why := _missing(quantization, QUANTIZATIONS[quantization], device_type)) is not None:
        problems.append(("quantization", why))
    if attn_implementation is not None:
        base = base_attention(attn_implementation)
        if (why := _missing(base, ATTENTION[base], device_type)) is not None:
            problems.append(("attn_implementation", why))
    return problems


def stack_problems(quantization: str, attn_implementation: str | None, compile_mode: str, engine: str,
                   kind: str) -> list[tuple[str, str]]:
    """(field, why) for stack choices that contradict the rest of a spec, whatever the host."""
    problems = []
    loads = kind == "generate" and engine != "openai"
    chosen = [(f, v) for f, v in (("quantization", quantization != "none"), ("attn_implementation",
              attn_implementation is not None), ("compile", compile_mode != "off")) if v]
    if not loads:
        what = "a served model" if kind == "generate" else f"a {kind} run"
        return [(field, f"applies to models benchd loads for generation, not {what}") for field, _ in chosen]
    if attn_implementation is not None and attn_implementation.startswith("paged|") and engine != "transformers":
        problems.append(("attn_implementation", f"{attn_implementation} is for continuous batching (engine "
                                                f"transformers); the {engine} engine runs "
                                                f"{base_attention(attn_implementation)}"))
    if compile_mode != "off" and engine != "static":
        problems.append(("compile", "applies to static generate(); continuous batching compiles by "
                                    "transformers.compile_level (0–3)"))
    return problems
