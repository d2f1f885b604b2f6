"""torch's own varlen FlashAttention as continuous batching's paged attention, `paged|torch_varlen`, registered with
transformers' AttentionInterface: the kernel (across torch's signatures), the glue from transformers' packed step and
paged cache to it, and the reference it is checked against."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch
from transformers import AttentionInterface

from benchd.spec import SpecError

VARLEN = "torch_varlen"

# (q [Tq, H, D], k [Tk, Hkv, D], v, cu_q, cu_k, max_q, max_k, scale, window) -> [Tq, H, D]: K/V packed by sequence.
Kernel = Callable[..., torch.Tensor]


def varlen_attn():
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def packed_kernel() -> Kernel:
    """torch's varlen_attn with causal attention aligned to each sequence's end (FlashAttention's bottom-right
    alignment: a query of q new tokens after p cached attends p + its own position), across torch's signatures:
    2.10 takes is_causal; 2.11 a window (left, right), (-1, 0) being causal; 2.13 also enable_gqa, without which
    it refuses fewer K/V heads than query heads (FlashAttention itself shares each K/V head among its group)."""
    attend = varlen_attn()
    parameters = inspect.signature(attend).parameters
    windowed, gqa_flag = "window_size" in parameters, "enable_gqa" in parameters

    def kernel(q, k, v, cu_q, cu_k, max_q, max_k, scale, window):
        options = {"scale": scale}
        if windowed:
            options["window_size"] = (window, 0)  # a tuple: torch compares it with (-1, 0) to mean causal
        elif window == -1:
            options["is_causal"] = True
        else:
            raise SpecError(f"attn_implementation: torch {torch.__version__}'s varlen_attn has no sliding window")
        if gqa_flag and q.shape[1] != k.shape[1]:
            options["enable_gqa"] = True
        return attend(q, k, v, cu_q, cu_k, max_q, max_k, **options)

    return kernel


# The kernel paged_varlen calls: torch's, bound when first registered (tests put the reference below in its place
# on the CPU, which has no FlashAttention).
KERNEL: dict[str, Kernel] = {}


def paged_varlen(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor | None, cache=None, cu_seq_lens_q: torch.Tensor | None = None,
                 cu_seq_lens_k: torch.Tensor | dict | None = None, max_seqlen_q: int = 0,
                 max_seqlen_k: int | dict = 0, **kwargs) -> tuple[torch.Tensor, None]:
    """One layer's attention over a packed continuous-batching step, by sequence. Shapes: query [1, H, Tq, D], key
    and value [1, Hkv, Tq, D] (the step's new tokens); cu_seq_lens_* [N + 1] int32, and for a model with
    sliding-window layers a mapping by layer type; returns [Tq, H, D]. The step's new K/V are written into the
    paged cache and each sequence's whole K/V gathered back (cache.update), as transformers' own flash_paged.py does
    for flash-attn's kernels; torch 2.13's varlen_attn could read the pages in place through a block table, which
    torch 2.11's lacks (docs/benchmarks/roofline.md: the gather's share). No mask: transformers builds none for an
    implementation outside paged|sdpa and paged|eager (continuous_batching/utils.py, attn_mask_is_needed)."""
    window, cu_seq_lens_k, max_seqlen_k = layer_step(VARLEN, module, cache, cu_seq_lens_k, max_seqlen_k, kwargs)
    key, value = cache.update(key_states=key, value_states=value, layer_idx=module.layer_idx,
                              read_index=kwargs["read_index"], write_index=kwargs["write_index"])  # [Tk, Hkv, D]
    # token-major and contiguous, as FlashAttention reads them (a step with nothing cached hands its own K/V back
    # as a strided view)
    out = KERNEL[VARLEN](query.squeeze(0).transpose(0, 1).contiguous(), key.contiguous(), value.contiguous(),
                         cu_seq_lens_q, cu_seq_lens_k, max_seqlen_q, max_seqlen_k, module.scaling,
                         window - 1 if window else -1)
    return out, None


def layer_step(name: str, module: torch.nn.Module, cache, cu_seq_lens_k, max_seqlen_k,
               kwargs: dict) -> tuple[int | None, torch.Tensor, int]:
    """(the layer's sliding window or None, its cumulative key lengths, its longest keys): a model with
    sliding-window layers hands each layer type its own; a step outside continuous batching, or a model with
    attention sinks, is refused with the implementation's name."""
    if cache is None:
        raise ValueError(f"paged|{name} runs inside continuous batching, on its paged cache")
    if kwargs.get("s_aux") is not None:
        raise ValueError(f"paged|{name} has no attention sinks (s_aux), which this model uses")
    window = getattr(module, "sliding_window", None)
    if isinstance(cu_seq_lens_k, dict):
        layer_type = "sliding_attention" if window else "full_attention"
        cu_seq_lens_k, max_seqlen_k = cu_seq_lens_k[layer_type], max_seqlen_k[layer_type]
    return window, cu_seq_lens_k, max_seqlen_k


def register() -> None:
    """paged|torch_varlen in transformers' (process-wide) AttentionInterface, and torch's kernels behind it unless
    others stand there already."""
    if VARLEN not in KERNEL and varlen_attn() is not None:
        KERNEL[VARLEN] = packed_kernel()
    AttentionInterface.register(f"paged|{VARLEN}", paged_varlen)


# ---- what the kernels compute --------------------------------------------------------------------------------

def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: torch.Tensor, cu_k: torch.Tensor,
              max_q: int, max_k: int, scale: float, window: int) -> torch.Tensor:
    """What the kernel computes, sequence by sequence with sdpa and an explicit mask, in the inputs' type:
    each sequence's queries are its last tokens, so query j of q attends the keys up to its own position p + j
    (bottom-right causal), and only the window before it when window >= 0; K/V heads shared by groups of query
    heads. The check of paged_varlen's glue on a CPU (no FlashAttention there) and of the kernel on a GPU."""
    out = torch.zeros_like(q)
    groups = q.shape[1] // k.shape[1]
    for i in range(len(cu_q) - 1):
        qs, qe, ks, ke = int(cu_q[i]), int(cu_q[i + 1]), int(cu_k[i]), int(cu_k[i + 1])
        if qe == qs:  # a padding sequence (CUDA graphs pad the batch with empty ones)
            continue
        position = torch.arange(qe - qs, device=q.device)[:, None] + (ke - ks) - (qe - qs)
        key = torch.arange(ke - ks, device=q.device)[None]
        allowed = (key <= position) & ((key >= position - window) if window >= 0 else True)

        def heads(x: torch.Tensor) -> torch.Tensor:
            return x.repeat_interleave(groups, dim=1).transpose(0, 1)

        out[qs:qe] = torch.nn.functional.scaled_dot_product_attention(
            q[qs:qe].transpose(0, 1), heads(k[ks:ke]), heads(v[ks:ke]), attn_mask=allowed, scale=scale,
        ).transpose(0, 1)
    return out
