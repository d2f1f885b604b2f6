"""Continuous batching's attention: the implementation chosen for the device (best available first, or the one the
spec names), with where its kernel comes from."""

from __future__ import annotations

import importlib.metadata
import inspect

import torch
import transformers

from benchd.engines import paged, varlen
from benchd.engines.base import Choice
from benchd.engines.paged import PAGED
from benchd.engines.varlen import VARLEN
from benchd.spec import SpecError
from benchd.spec.stack import ATTENTION, BATCHING_ORDER, base_attention, hub_kernel_cached, installed

# FlashAttention-2's limits, which torch's varlen kernel is (aten::_flash_attention_forward): Ampere or newer, half
# precision, a head dimension a multiple of 8 up to 256.
FLASH_CAPABILITY = (8, 0)
FLASH_DTYPES = (torch.float16, torch.bfloat16)
FLASH_HEAD_DIM = 256


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown version"


def kernel_source(base: str, via_kernels: bool = False) -> str:
    if via_kernels:
        return f"{ATTENTION[base].kernels} through transformers' kernels hub (kernels {_version('kernels')})"
    return {
        "flash_attention_3": f"flash-attn 3 (flash_attn_interface, {_version('flash_attn_3')})",
        "flash_attention_2": f"flash-attn {_version('flash_attn')}",
        VARLEN: f"torch {torch.__version__} (torch.nn.attention.varlen: FlashAttention-2, varlen)",
        PAGED: f"benchd's Triton kernels (engines/paged_kernels.py), Triton {_version('triton')}",
        "sdpa": f"torch {torch.__version__} (scaled_dot_product_attention)",
        "eager": f"transformers {transformers.__version__} (eager)",
    }[base]


def _head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def runs_here(base: str, model: torch.nn.Module, device: torch.device) -> str | None:
    """Why this model on this device cannot run the implementation; None when it can."""
    method = ATTENTION[base]
    if device.type not in method.devices:
        return f"it does not run on {device.type}"
    if method.dtypes is None:
        return None
    if model.dtype not in FLASH_DTYPES:
        return f"it runs bf16 or fp16 weights, not {str(model.dtype).removeprefix('torch.')}"
    if device.type == "cuda" and torch.cuda.get_device_capability(device) < FLASH_CAPABILITY:
        return f"it needs compute capability 8.0 or newer, not {torch.cuda.get_device_capability(device)}"
    config = model.config.get_text_config()
    head_dim = _head_dim(config)
    if head_dim % 8 or head_dim > FLASH_HEAD_DIM:
        return f"it needs a head dimension that is a multiple of 8 up to {FLASH_HEAD_DIM}, not {head_dim}"
    if base not in (VARLEN, PAGED) and not getattr(model, "_supports_flash_attn", False):
        return f"{type(model).__name__} does not support flash attention in transformers"
    if base in (VARLEN, PAGED):
        if getattr(config, "attn_logit_softcapping", None):
            return f"{base}'s kernel has no logit soft-capping, which this model's attention applies"
        if not batching_takes_registered():
            return (f"transformers {transformers.__version__}'s continuous batching runs only its own "
                    "implementations (sdpa, paged|eager, flash), not a registered one")
    return None


def batching_takes_registered() -> bool:
    """Whether this transformers' continuous batching runs an attention registered with AttentionInterface: 5.17
    calls whatever paged| implementation the model is set to; 5.24 refuses any but sdpa, paged|eager and flash
    (ContinuousBatchingManager.switch_to_cb_friendly_attn)."""
    from transformers.generation.continuous_batching.continuous_api import ContinuousBatchingManager

    return "is not supported for continuous batching" not in inspect.getsource(
        ContinuousBatchingManager.switch_to_cb_friendly_attn)


def _resolves(base: str) -> tuple[bool, bool]:
    """(whether the implementation's kernel can be had here, whether through transformers' kernels hub)."""
    if base == VARLEN:
        return varlen.varlen_attn() is not None, False
    package = ATTENTION[base].package
    if package is None or installed(package):
        return True, False
    return hub_kernel_cached(ATTENTION[base]), True


def choose(model: torch.nn.Module, device: torch.device, named: str | None) -> Choice:
    """The attention continuous batching runs on this device: exactly the one the spec names (a SpecError naming
    the field when it cannot run here), else the first of BATCHING_ORDER that runs here."""
    if named is not None:
        base = base_attention(named)
        why = runs_here(base, model, device)
        available, via_kernels = _resolves(base)
        if why is None and not available:
            why = f"its kernel is not installed ({ATTENTION[base].needs})"
        if why is not None:
            raise SpecError(f"attn_implementation: {base} cannot run here: {why}")
        return Choice(f"paged|{base}", kernel_source(base, via_kernels))
    for base in BATCHING_ORDER:
        available, via_kernels = _resolves(base)
        if available and runs_here(base, model, device) is None:
            return Choice(f"paged|{base}", kernel_source(base, via_kernels))
    raise AssertionError("paged sdpa runs on every device")  # BATCHING_ORDER ends with it


def register(implementation: str | None) -> None:
    """benchd's own paged kernel behind the implementation, registered with transformers, where it is one."""
    if implementation == f"paged|{VARLEN}":
        varlen.register()
    elif implementation == f"paged|{PAGED}":
        paged.register()


def adopted(implementation: str) -> Choice:
    """What transformers chose itself (library_defaults), with where its kernel comes from."""
    base = base_attention(implementation)
    via_kernels = base in ATTENTION and _resolves(base)[1]
    return Choice(implementation, kernel_source(base, via_kernels) if base in ATTENTION else "unknown")
