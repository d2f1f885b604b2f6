"""The stack a model runs on, beyond its dtype: quantization, attention implementation and compilation, and whether
this host can run each (decided without importing torch: the daemon never does)."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from benchd.spec.engines import engines

if TYPE_CHECKING:
    from benchd.spec.engines import EngineRecord

Quantization = Literal["none", "int8_weight_only", "int4_weight_only", "int8_dynamic", "float8", "bnb_8bit",
                       "bnb_4bit"]
# transformers' names, torch_varlen (torch's own varlen FlashAttention, registered by benchd: engines/varlen.py) and
# triton_paged (benchd's kernels reading the paged cache in place: engines/paged.py); the paged variants are what
# continuous batching runs (it turns sdpa into paged|sdpa itself).
AttnImplementation = Literal["sdpa", "eager", "flash_attention_2", "flash_attention_3", "torch_varlen",
                             "triton_paged", "paged|sdpa", "paged|eager", "paged|flash_attention_2",
                             "paged|flash_attention_3", "paged|torch_varlen", "paged|triton_paged"]
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

@dataclass(frozen=True, slots=True)
class Attention(Method):
    """An attention implementation, and what continuous batching's step holds for it (engines/transformers/plan.py
    plans it): masked, a mask over the step's tokens × the cache it reads, built on the host each step; repeats_kv, K
    and V repeated for every query head under grouped-query attention; batching_only, a paged kernel with no unpaged
    form (the model loads with sdpa, continuous batching switches to it); in_place, it reads the cache where it lies
    (no K/V gathered for the step but a sliding-window layer's) and holds step_bytes whatever the step's size (its
    decode splits' partials, at most); dtypes, the element types it runs (None:
    any); kernels, the hub repository of transformers' kernels-hub fallback, which stands in for the package where
    the `kernels` package is installed and the repository is in the Hugging Face cache already (a host without the
    hub would fail to fetch it at the engine's start)."""

    masked: bool = False
    repeats_kv: bool = False
    batching_only: bool = False
    in_place: bool = False
    step_bytes: int = 0
    dtypes: tuple[str, ...] | None = None
    kernels: str | None = None  # transformers' kernels-hub fallback for it: the hub repository


HALF = ("bfloat16", "float16", "auto")  # FlashAttention's element types (auto: bf16 on CUDA)
ATTENTION: dict[str, Attention] = {
    "sdpa": Attention(None, ("cpu", "cuda"), "", masked=True, repeats_kv=True),
    "eager": Attention(None, ("cpu", "cuda"), "", masked=True, repeats_kv=True),
    # transformers' FLASH_ATTN_KERNEL_FALLBACK (modeling_flash_attention_utils.py) names the repositories
    "flash_attention_2": Attention("flash_attn", ("cuda",), "flash-attn 2 (pip install flash-attn) and a CUDA GPU",
                                   dtypes=HALF, kernels="kernels-community/flash-attn2"),
    "flash_attention_3": Attention("flash_attn_interface", ("cuda",),
                                   "flash-attn 3 (the flash_attn_interface module, built from flash-attention's "
                                   "hopper/) and a Hopper GPU", dtypes=HALF,
                                   kernels="kernels-community/vllm-flash-attn3"),
    "torch_varlen": Attention("torch.nn.attention.varlen", ("cuda",),
                              "torch's varlen FlashAttention (torch.nn.attention.varlen, torch 2.10 or newer), a CUDA "
                              "GPU of compute capability 8.0 or newer and bf16 or fp16 weights",
                              batching_only=True, dtypes=HALF),
    "triton_paged": Attention("triton", ("cuda",),
                              "Triton (with torch's CUDA builds), a CUDA GPU of compute capability 8.0 or newer and "
                              "bf16 or fp16 weights", batching_only=True, in_place=True, step_bytes=128 << 20,
                              dtypes=HALF),
}
# Continuous batching's attention where the spec names none, best first (engines/attention.py chooses, in the
# worker, the first its device runs): a FlashAttention package (transformers reads the cache in place on decode
# steps with flash_attn_with_kvcache), else benchd's Triton kernels reading it in place, else torch's own varlen
# kernel over a gathered copy, else paged sdpa. Each but sdpa attends the packed step by sequence (no mask, no
# repeated K/V): on an H200 the reference workload spent 41 % of each step in paged sdpa's masked attention
# (docs/benchmarks/roofline.md); on an H100 the Triton kernels took the reference's decode step's attention from
# 930 µs to 98 and its output from 7,851 to 17,703 tok/s (docs/benchmarks/paged-attention.md).
BATCHING_ORDER = ("flash_attention_3", "flash_attention_2", "triton_paged", "torch_varlen", "sdpa")


def base_attention(name: str) -> str:
    """The implementation's own name: continuous batching adds the paged| prefix at its start."""
    return name.removeprefix("paged|")


def loading_attention(name: str | None) -> str:
    """The implementation a model is loaded with: a kernel that runs only paged loads the model with sdpa."""
    base = base_attention(name or "sdpa")
    return "sdpa" if ATTENTION[base].batching_only else base


def installed(package: str) -> bool:
    """Whether the module can be imported here, without importing it or its parents (the daemon never imports torch;
    the daemon and its workers share the environment, so the daemon's answer holds for them)."""
    top, _, rest = package.partition(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None or not rest:
        return spec is not None
    path = rest.split(".")
    return any(Path(root, *path).with_suffix(".py").is_file() or Path(root, *path, "__init__.py").is_file()
               for root in spec.submodule_search_locations or ())


def hub_kernel_cached(method: Method) -> bool:
    """Whether transformers' kernels-hub fallback can stand in for the method's package here without the network:
    the `kernels` package installed and the repository in the Hugging Face cache."""
    repository = method.kernels if isinstance(method, Attention) else None
    if repository is None or not installed("kernels"):
        return False
    cache = os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", Path.home() / ".cache/huggingface"),
                                                    "hub")
    return Path(cache, "models--" + repository.replace("/", "--")).is_dir()


def _missing(name: str, method: Method, device_type: str, dtype: str | None = None) -> str | None:
    kernels = hub_kernel_cached(method)
    if method.package is not None and not installed(method.package) and not kernels:
        return f"{name} needs {method.needs}: {method.package} is not installed"
    if device_type not in method.devices:
        return f"{name} needs {method.needs}: it does not run on {device_type}"
    if dtype is not None and isinstance(method, Attention) and method.dtypes and dtype not in method.dtypes:
        return f"{name} needs {method.needs}: it does not run in {dtype}"
    return None


def batching_attention(device_type: str, dtype: str = "auto") -> str:
    """The attention the worker will choose for continuous batching where the spec names none, as this host can tell
    without torch (engines/attention.py checks the device's compute capability too): what admission plans with."""
    return next(name for name in BATCHING_ORDER if _missing(name, ATTENTION[name], device_type, dtype) is None)


def unavailable(quantization: str, attn_implementation: str | None, device_type: str,
                dtype: str | None = None) -> list[tuple[str, str]]:
    """(field, why) for each stack choice this host cannot run on a device of this type (cpu, cuda)."""
    problems = []
    if (why := _missing(quantization, QUANTIZATIONS[quantization], device_type)) is not None:
        problems.append(("quantization", why))
    if attn_implementation is not None:
        base = base_attention(attn_implementation)
        if (why := _missing(base, ATTENTION[base], device_type, dtype)) is not None:
            problems.append(("attn_implementation", why))
    return problems


def stack_problems(quantization: str, attn_implementation: str | None, compile_mode: str,
                   engine: EngineRecord | None, kind: str) -> list[tuple[str, str]]:
    """(field, why) for stack choices that contradict the rest of a spec, whatever the host. engine: a generation's
    (spec/engines.py), None for a timed run."""
    problems = []
    chosen = [(f, v) for f, v in (("quantization", quantization != "none"), ("attn_implementation",
              attn_implementation is not None), ("compile", compile_mode != "off")) if v]
    if engine is None or not engine.loads_model:
        what = "a served model" if kind == "generate" else f"a {kind} run"
        return [(field, f"applies to models benchd loads for generation, not {what}") for field, _ in chosen]
    paged = " or ".join(r.name for r in engines().values() if r.paged_attention)
    if attn_implementation is not None and not engine.paged_attention:
        base = base_attention(attn_implementation)
        if ATTENTION[base].batching_only:
            problems.append(("attn_implementation", f"{base} is a paged kernel for continuous batching (engine "
                                                    f"{paged}); the {engine.name} engine runs sdpa, eager or flash "
                                                    "attention"))
        elif attn_implementation.startswith("paged|"):
            problems.append(("attn_implementation", f"{attn_implementation} is for continuous batching (engine "
                                                    f"{paged}); the {engine.name} engine runs {base}"))
    if compile_mode != "off" and not engine.compiles:
        compiling = " or ".join(r.name for r in engines().values() if r.compiles)
        problems.append(("compile", f"applies to the {compiling} engine (torch.compile of generate()'s forward), not "
                                    f"the {engine.name} engine (its own options may compile)"))
    return problems
