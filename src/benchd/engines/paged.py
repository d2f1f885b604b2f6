"""benchd's paged attention for continuous batching, `paged|triton_paged`, registered with transformers'
AttentionInterface: K and V read where the paged cache holds them (engines/paged_kernels.py), no copy gathered
before each step; the query heads of a K/V head packed into one tile; a long sequence's keys split across programs
for decode rows. Here: the launch (tiles, splits, the partials' memory), the glue from transformers' packed step and
paged cache, and the reference the kernels are checked against."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import AttentionInterface

from benchd.engines import varlen
from benchd.spec.stack import ATTENTION

PAGED = "triton_paged"
LOG2E = math.log2(math.e)
# A decode row's keys are split across programs only where the step's sequences leave the device short of
# PROGRAMS_PER_SM programs a multiprocessor, in spans of at least MIN_SPLIT_KEYS keys (a split's partial then costs
# little beside the K/V it reads); the partials (float32) are a step's own memory, at most the attention's step_bytes
# (which engines/transformers/plan.py counts).
PARTIAL_BYTES = ATTENTION[PAGED].step_bytes
MIN_SPLIT_KEYS = 512
PROGRAMS_PER_SM = 4

# (q [Tq, H, D], k, v, index, cu_q, cu_k, max_k, scale, window, block_size=0) -> [Tq, H, D]. k and v: the layer's
# paged cache [rows, Hkv, D], read through index: each sequence's rows in order (packed as cu_k says), or with
# block_size a block table [N, blocks] (each sequence's blocks in order); with index None, the step's K/V packed by
# sequence. window: the left window (-1: none).
Kernel = Callable[..., torch.Tensor]


@dataclass(frozen=True, slots=True)
class Tiles:
    """The kernels' shapes: a decode program's query rows (its new tokens × the heads of a group) and keys a step,
    a prefill program's; Triton's warps and pipeline stages for each."""

    decode_rows: int = 16
    decode_keys: int = 128  # on an H100 the reference's decode step took 98 µs, 109 with 64 and 119 with 32
    decode_warps: int = 4
    decode_stages: int = 2
    prefill_rows: int = 128
    prefill_keys: int = 64
    prefill_warps: int = 8
    prefill_stages: int = 2


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@functools.cache
def device_programs(device: torch.device) -> int:
    """Programs that keep the device busy: PROGRAMS_PER_SM a multiprocessor (the interpreter on a CPU: any number)."""
    if device.type != "cuda":
        return 1 << 30
    return PROGRAMS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count


def splits(max_k: int, seqs: int, kv_heads: int, rows: int, d_pad: int, programs: int) -> tuple[int, int]:
    """(keys a split reads, splits) for decode rows: as many as the device's programs want beside the sequences',
    their keys allow (MIN_SPLIT_KEYS each) and the partials' bound keeps. The last split reads on to the sequence's
    end whatever max_k says."""
    per_split = seqs * kv_heads * rows * (d_pad + 2) * 4
    wanted = -(-programs // max(1, seqs * kv_heads))
    count = max(1, min(wanted, PARTIAL_BYTES // max(1, per_split), -(-max_k // MIN_SPLIT_KEYS)))
    span = -(-max_k // count)
    return span, -(-max_k // span)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, index: torch.Tensor | None, cu_q: torch.Tensor,
           cu_k: torch.Tensor, max_k: int, scale: float, window: int, block_size: int = 0, max_q: int | None = None,
           tiles: Tiles = Tiles()) -> torch.Tensor:
    """The Kernel, through Triton: decode rows (sequences of at most a decode program's tokens) by the decode
    kernel, split when long; the rest by the prefill kernel, which is skipped where max_q says none is longer (and
    under a block table, which transformers gives decode rows alone). Only shapes decide the launches, so a CUDA
    graph replays them for any step of its shape."""
    from benchd.engines import paged_kernels as kernels

    for tensor in (q, k, v):
        if tensor.stride(-1) != 1:
            raise ValueError("paged|triton_paged reads rows whose last dimension is contiguous")
    tokens, heads, dim = q.shape
    kv_heads = k.shape[1]
    group = heads // kv_heads
    seqs = cu_q.numel() - 1
    d_pad = max(16, _pow2(dim))
    decode_rows, prefill_rows = max(tiles.decode_rows, _pow2(group)), max(tiles.prefill_rows, _pow2(group))
    decode_tokens, prefill_tokens = decode_rows // group, prefill_rows // group
    out = torch.empty(tokens, heads, dim, dtype=q.dtype, device=q.device)
    span, count = splits(max(1, max_k), seqs, kv_heads, decode_rows, d_pad, device_programs(q.device))
    if count > 1:
        part_acc = torch.empty(seqs * kv_heads * count * decode_rows * d_pad, dtype=torch.float32, device=q.device)
        part_m, part_l = torch.empty(2, seqs * kv_heads * count * decode_rows, dtype=torch.float32, device=q.device)
    else:
        part_acc = part_m = part_l = out  # unused
    index_ = index if index is not None else cu_k  # unused without an index
    strides = (q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0),
               out.stride(1))
    shape = {"GROUP": group, "HEAD_DIM": dim, "D_PAD": d_pad}
    flags = {"INDEXED": index is not None, "WINDOWED": window >= 0}
    table = index is not None and index.dim() == 2
    qk_scale = scale * LOG2E
    kernels.decode[(seqs, kv_heads, count)](
        out, part_acc, part_m, part_l, q, k, v, index_, cu_q, cu_k, qk_scale, window, span, count,
        index.stride(0) if table else 0, *strides, QTOK=decode_tokens, BLOCK_M=decode_rows, TILE=tiles.decode_keys,
        PARTIAL=count > 1, PAGE=block_size if table else 0, **shape, **flags, num_warps=tiles.decode_warps,
        num_stages=tiles.decode_stages)
    if count > 1:
        kernels.combine[(seqs, kv_heads)](out, part_acc, part_m, part_l, cu_q, cu_k, span, count, out.stride(0),
                                          out.stride(1), QTOK=decode_tokens, BLOCK_M=decode_rows, **shape)
    if not table and (max_q is None or max_q > decode_tokens):
        kernels.prefill[(tokens // prefill_tokens + seqs, kv_heads)](
            out, q, k, v, index_, cu_q, cu_k, seqs, qk_scale, window, *strides, QTOK=prefill_tokens,
            DECODE_QTOK=decode_tokens, BLOCK_M=prefill_rows, TILE=tiles.prefill_keys, **shape, **flags,
            num_warps=tiles.prefill_warps, num_stages=tiles.prefill_stages)
    return out


# The kernel paged_in_place calls: attend, bound when first registered (tests put the reference below in its place
# where Triton cannot run).
KERNEL: dict[str, Kernel] = {}


def paged_in_place(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, cache=None, cu_seq_lens_q: torch.Tensor | None = None,
                   cu_seq_lens_k: torch.Tensor | dict | None = None, max_seqlen_q: int = 0,
                   max_seqlen_k: int | dict = 0, **kwargs) -> tuple[torch.Tensor, None]:
    """One layer's attention over a packed continuous-batching step (shapes as engines/varlen.py's paged_varlen
    takes them). The step's new K/V are written into the layer's cache (transformers' write index, padding to its
    trash rows), then the kernel reads every sequence's K/V there through the read index; on transformers' decode
    fast path (a step of decode rows alone, engines/transformers/paged_cache.py turns it on) through the block table
    instead, each new token written after its sequence's cached ones. A sliding-window layer keeps transformers' own
    update (it reads before it writes: a chunk may overwrite its own window in the ring of blocks) and a step with
    nothing cached its own K/V: both hand the kernel K/V packed by sequence."""
    window, cu_seq_lens_k, max_seqlen_k = varlen.layer_step(PAGED, module, cache, cu_seq_lens_k, max_seqlen_k,
                                                            kwargs)
    group, in_group = cache.layer_index_to_group_indices[module.layer_idx]
    block_table = kwargs.get("block_table")
    if block_table is not None:
        k_cache, v_cache, table = cache.key_cache[in_group], cache.value_cache[in_group], block_table[group]
        rows = decode_rows(table, cu_seq_lens_q, cu_seq_lens_k, cache.block_size, cache.write_trash_index,
                           query.shape[2])
        k_cache.index_copy_(0, rows, key.squeeze(0).transpose(0, 1))
        v_cache.index_copy_(0, rows, value.squeeze(0).transpose(0, 1))
        out = KERNEL[PAGED](query.squeeze(0).transpose(0, 1), k_cache, v_cache, table, cu_seq_lens_q, cu_seq_lens_k,
                            table.shape[1] * cache.block_size, module.scaling, -1, cache.block_size)
        return out, None
    read, write = kwargs["read_index"][group], kwargs["write_index"][group]
    if window or read.numel() == 0:
        key, value = cache.update(key_states=key, value_states=value, layer_idx=module.layer_idx,
                                  read_index=kwargs["read_index"], write_index=kwargs["write_index"])
        index = None
    else:
        k_cache, v_cache = cache.key_cache[in_group], cache.value_cache[in_group]
        k_cache.index_copy_(0, write, key.squeeze(0).transpose(0, 1))
        v_cache.index_copy_(0, write, value.squeeze(0).transpose(0, 1))
        key, value, index = k_cache, v_cache, read
    out = KERNEL[PAGED](query.squeeze(0).transpose(0, 1), key, value, index, cu_seq_lens_q, cu_seq_lens_k,
                        max_seqlen_k, module.scaling, window - 1 if window else -1)
    return out, None


def decode_rows(table: torch.Tensor, cu_q: torch.Tensor, cu_k: torch.Tensor, block_size: int, trash: int,
                tokens: int) -> torch.Tensor:
    """Where a decode step's new tokens go in the cache: token i is sequence i's (transformers pads a decode step's
    tokens and sequences alike), after its cached ones; a padding token to the trash row."""
    if not table.shape[0] == cu_q.numel() - 1 == tokens:
        raise ValueError(f"a decode step of {tokens} tokens for {cu_q.numel() - 1} sequences")
    position = (cu_k[1:] - cu_k[:-1] - 1).clamp(min=0).long()
    block = table.gather(1, (position // block_size)[:, None]).squeeze(1).long()
    return torch.where(cu_q[1:] > cu_q[:-1], block * block_size + position % block_size, trash)


def register() -> None:
    """paged|triton_paged in transformers' (process-wide) AttentionInterface, Triton's kernels behind it unless
    others stand there already."""
    KERNEL.setdefault(PAGED, attend)
    AttentionInterface.register(f"paged|{PAGED}", paged_in_place)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, index: torch.Tensor | None, cu_q: torch.Tensor,
              cu_k: torch.Tensor, max_k: int, scale: float, window: int, block_size: int = 0) -> torch.Tensor:
    """What the Kernel computes: each sequence's K/V gathered through the index, then engines/varlen.py's reference
    (sdpa by sequence with an explicit mask)."""
    if index is not None and index.dim() == 2:  # a block table: each sequence's rows from its blocks
        lengths = (cu_k[1:] - cu_k[:-1]).tolist()
        keys = [torch.arange(n, device=index.device) for n in lengths]
        index = torch.cat([index[i, j // block_size].long() * block_size + j % block_size for i, j in enumerate(keys)])
    if index is not None:
        rows = index[:int(cu_k[-1])]
        k, v = k.index_select(0, rows), v.index_select(0, rows)
    return varlen.reference(q, k, v, cu_q, cu_k, 0, max_k, scale, window)
