"""Decode attention that reads the paged cache in place (issue 50, item 1): the candidates on packed steps laid out
as transformers' paged cache lays them out (blocks of 256 tokens in shuffled order, read through the read index,
the step padded as CUDA graphs pad it), each checked against float32 and timed as CUDA graphs replay it.

- gather + varlen: today's paged|torch_varlen (cache.update's index_copy and index_select, then torch's varlen
  FlashAttention-2 on the gathered copy);
- triton: benchd's paged|triton_paged (engines/paged.py), with a few tile shapes;
- flex: FlexAttention compiled through Triton over the physical cache, a block mask made from the page table (full
  pages as full blocks, the last page masked to the sequence's length): decode-only steps, its one batched form;
- paged sdpa: transformers' paged|sdpa (gather, K/V repeated per head, a mask over the whole step), on the
  reference's decode step.

    PYTHONPATH=/tmp/site:src python3 bench/gpu_paged_attention.py        # a GPU
    TRITON_INTERPRET=1 python bench/gpu_paged_attention.py --smoke      # the CPU: tiny steps, Triton interpreted

$OUT/paged_attention.json keeps every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

import torch
from common import environment

from benchd.engines import paged, varlen

BLOCK = 256
HEADS, KV_HEADS, DIM = 32, 8, 64  # llama-3.2-1b's attention


def padded(n: int, interval: int) -> int:
    return -(-n // interval) * interval


class Step:
    """A packed step over a paged cache: (past, new) tokens a sequence; K/V rows in shuffled blocks of BLOCK."""

    def __init__(self, pairs, heads, kv_heads, dim, block, dtype, device, seed, pad=True):
        g = torch.Generator().manual_seed(seed)
        blocks = [-(-(p + q) // block) for p, q in pairs]
        order = torch.randperm(sum(blocks) + 2, generator=g).tolist()
        rows_per_seq, new_rows = [], []
        for (p, q), count in zip(pairs, blocks):
            mine = [order.pop() for _ in range(count)]
            rows = [mine[t // block] * block + t % block for t in range(p + q)]
            rows_per_seq.append(rows)
            new_rows += rows[p:]
        cache_rows = (sum(blocks) + 4) * block
        self.k_cache = torch.randn(cache_rows, kv_heads, dim, generator=g).to(dtype).to(device)
        self.v_cache = torch.randn(cache_rows, kv_heads, dim, generator=g).to(dtype).to(device)
        tokens = sum(q for _, q in pairs)
        # transformers pads a graph's step to 64 tokens, a decode step (its decode fast path) to a power of two, and
        # its sequences with empty ones
        decoding = all(q == 1 for _, q in pairs)
        self.tokens = (1 << (tokens - 1).bit_length() if decoding else padded(tokens, 64)) if pad else tokens
        seqs = min(self.tokens, 1024) if pad else len(pairs)
        lengths_q = [q for _, q in pairs] + [0] * (seqs - len(pairs))
        lengths_k = [p + q for p, q in pairs] + [0] * (seqs - len(pairs))
        self.cu_q = torch.tensor([0, *torch.tensor(lengths_q).cumsum(0).tolist()], dtype=torch.int32, device=device)
        self.cu_k = torch.tensor([0, *torch.tensor(lengths_k).cumsum(0).tolist()], dtype=torch.int32, device=device)
        trash = cache_rows - block  # padding reads and writes go to spare rows, as transformers' trash blocks
        self.index = torch.tensor([row for rows in rows_per_seq for row in rows] + [trash] * (self.tokens - tokens),
                                  device=device)
        self.write = torch.tensor(new_rows + [trash] * (self.tokens - tokens), device=device)
        self.q = (torch.randn(self.tokens, heads, dim, generator=g) * 2).to(dtype).to(device)
        # the step's own K/V as the model hands them over: [1, Hkv, T, D], equal to what the cache holds there
        self.k_new = self.k_cache[self.write].transpose(0, 1).unsqueeze(0).contiguous()
        self.v_new = self.v_cache[self.write].transpose(0, 1).unsqueeze(0).contiguous()
        self.max_q = self.tokens if pad else max(q for _, q in pairs)  # transformers' padded max_seqlen_q
        longest = max(p + q for p, q in pairs)
        self.max_k = min(1 << (longest - 1).bit_length(), cache_rows) if pad else longest
        self.pairs, self.scale, self.real_tokens = pairs, dim ** -0.5, tokens
        self.fresh = all(p == 0 for p, _ in pairs)
        # the block table transformers hands a decode step (padding rows -1), its tokens and sequences alike
        self.block, self.trash = block, trash
        self.table = torch.full((seqs, max(blocks)), -1, dtype=torch.int32)
        for i, rows in enumerate(rows_per_seq):
            self.table[i, :len(rows[::block])] = torch.tensor(rows[::block]) // block
        self.table = self.table.to(device)

    def kv_bytes(self) -> int:
        element = self.k_cache.element_size()
        return sum(p + q for p, q in self.pairs) * 2 * self.k_cache.shape[1] * self.k_cache.shape[2] * element

    def flops(self) -> int:
        heads, dim = self.q.shape[1], self.q.shape[2]
        return sum(4 * heads * dim * sum(p + j + 1 for j in range(q)) for p, q in self.pairs)

    def write_new(self) -> None:
        self.k_cache.index_copy_(0, self.write, self.k_new.squeeze(0).transpose(0, 1))
        self.v_cache.index_copy_(0, self.write, self.v_new.squeeze(0).transpose(0, 1))


def gather_varlen(step: Step) -> torch.Tensor:
    step.write_new()
    if step.fresh:  # nothing cached: transformers hands the step's own K/V over, strided
        k, v = step.k_new.squeeze(0).transpose(0, 1).contiguous(), step.v_new.squeeze(0).transpose(0, 1).contiguous()
    else:
        k, v = step.k_cache.index_select(0, step.index), step.v_cache.index_select(0, step.index)
    return KERNELS["varlen"](step.q, k, v, step.cu_q, step.cu_k, step.max_q, step.max_k, step.scale, -1)


def triton_paged(tiles: paged.Tiles):
    def run(step: Step) -> torch.Tensor:
        step.write_new()
        if step.fresh:
            k, v = step.k_new.squeeze(0).transpose(0, 1), step.v_new.squeeze(0).transpose(0, 1)
            return paged.attend(step.q, k, v, None, step.cu_q, step.cu_k, step.max_k, step.scale, -1,
                                max_q=step.max_q, tiles=tiles)
        return paged.attend(step.q, step.k_cache, step.v_cache, step.index, step.cu_q, step.cu_k, step.max_k,
                            step.scale, -1, max_q=step.max_q, tiles=tiles)
    return run


def triton_table(step: Step) -> torch.Tensor:
    """transformers' decode fast path: the new tokens written where the block table puts them, the table read."""
    rows = paged.decode_rows(step.table, step.cu_q, step.cu_k, step.block, step.trash, step.tokens)
    step.k_cache.index_copy_(0, rows, step.k_new.squeeze(0).transpose(0, 1))
    step.v_cache.index_copy_(0, rows, step.v_new.squeeze(0).transpose(0, 1))
    return paged.attend(step.q, step.k_cache, step.v_cache, step.table, step.cu_q, step.cu_k,
                        step.table.shape[1] * step.block, step.scale, -1, step.block)


def paged_sdpa(step: Step) -> torch.Tensor:
    """transformers' sdpa_paged: the gathered K/V repeated for each query head, a mask over the whole step."""
    step.write_new()
    k = step.k_cache.index_select(0, step.index).transpose(0, 1).unsqueeze(0)
    v = step.v_cache.index_select(0, step.index).transpose(0, 1).unsqueeze(0)
    groups = step.q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    out = torch.nn.functional.scaled_dot_product_attention(step.q.transpose(0, 1).unsqueeze(0), k, v,
                                                           attn_mask=step.mask, scale=step.scale)
    return out.squeeze(0).transpose(0, 1)


def sdpa_mask(step: Step) -> torch.Tensor:
    rows, cols = step.tokens, step.index.numel()
    allowed = torch.zeros(rows, cols, dtype=torch.bool)
    for i in range(len(step.pairs)):
        qs, qe, ks, ke = (int(t) for t in (step.cu_q[i], step.cu_q[i + 1], step.cu_k[i], step.cu_k[i + 1]))
        position = torch.arange(qe - qs)[:, None] + (ke - ks) - (qe - qs)
        allowed[qs:qe, ks:ke] = torch.arange(ke - ks)[None] <= position
    mask = torch.zeros(rows, cols, dtype=step.q.dtype).masked_fill_(~allowed, torch.finfo(step.q.dtype).min)
    return mask.to(step.q.device)[None, None]


def flex_decode():
    """FlexAttention over the physical cache for a decode-only step: batch = sequences, one query each."""
    from torch.nn.attention.flex_attention import BlockMask, flex_attention

    compiled = torch.compile(flex_attention, dynamic=False)

    def run(step: Step) -> torch.Tensor:
        step.write_new()
        n = len(step.pairs)
        lengths = (step.cu_k[1:n + 1] - step.cu_k[:n]).long()
        pages = -(-lengths // BLOCK)
        most = -(-step.max_k // BLOCK)
        slots = torch.arange(most, device=step.q.device)
        starts = (step.cu_k[:n, None].long() + slots[None] * BLOCK).clamp(max=step.index.numel() - 1)
        page_ids = (step.index[starts] // BLOCK).int()
        full = pages - (lengths % BLOCK != 0).long()  # whole pages need no mask
        fill = lengths - (pages - 1) * BLOCK  # tokens in the last page
        width = step.k_cache.shape[0] // BLOCK  # a block mask's index rows span every KV block of the sequence
        last = torch.zeros(n, width, dtype=torch.int32, device=step.q.device)
        last[:, :1] = page_ids.gather(1, (pages - 1)[:, None])
        full_ids = torch.zeros(n, width, dtype=torch.int32, device=step.q.device)
        full_ids[:, :most] = torch.where(slots[None] < full[:, None], page_ids, 0)

        def in_sequence(b, h, q_idx, kv_idx):
            return kv_idx % BLOCK < fill[b]

        mask = BlockMask.from_kv_blocks(
            (pages - full).int()[:, None, None], last.int()[:, None, None, :], full.int()[:, None, None],
            full_ids.int()[:, None, None, :], BLOCK_SIZE=(128, BLOCK), mask_mod=in_sequence,
            seq_lengths=(1, step.k_cache.shape[0]))
        q = step.q[step.cu_q[:n].long()].unsqueeze(2)  # [N, H, 1, D]
        k = step.k_cache.transpose(0, 1).unsqueeze(0)  # [1, Hkv, rows, D]: one cache for every sequence
        v = step.v_cache.transpose(0, 1).unsqueeze(0)
        out = compiled(q, k, v, block_mask=mask, scale=step.scale, enable_gqa=True)
        full_out = torch.empty_like(step.q)
        full_out[step.cu_q[:n].long()] = out.squeeze(2)
        return full_out

    return run


KERNELS: dict = {}


def check(step: Step, run) -> dict:
    """Relative error against float32 over the rows of real sequences (a row left unwritten would hold whatever
    the allocator's memory held, far from the reference), and whether all of them are finite."""
    out = run(step)[:step.real_tokens].float()
    exact = paged.reference(step.q.float(), step.k_cache.float(), step.v_cache.float(), step.index, step.cu_q,
                            step.cu_k, step.max_k, step.scale, -1)[:step.real_tokens]
    return {"rel_error": ((out - exact).norm() / exact.norm()).item(), "all_finite": bool(out.isfinite().all())}


def timed(step: Step, run, repeats: int) -> dict:
    """Median of CUDA-graph replays (a graph of `inner` calls, as the engine replays a step's graph), with the
    graph's capture as the proof that the path runs inside one."""
    if step.q.device.type != "cuda":
        return {}
    for _ in range(3):
        run(step)
    torch.cuda.synchronize()
    inner = 10
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(inner):
                run(step)
        replay, how = graph.replay, "captured"
    except RuntimeError as error:  # timed eagerly then, launches and all
        torch.cuda.synchronize()
        how = f"capture failed ({str(error)[:120]}): eager"

        def replay():
            for _ in range(inner):
                run(step)
    replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner * 1e3)
    median = statistics.median(times)
    return {"graph": how, "us": median, "us_spread": (max(times) - min(times)) / median,
            "gb_s": step.kv_bytes() / median / 1e3, "tflop_s": step.flops() / median / 1e6}


def steps(smoke: bool) -> dict[str, list[tuple[int, int]]]:
    r = torch.Generator().manual_seed(1)

    def ints(low, high, n):
        return torch.randint(low, high, (n,), generator=r).tolist()

    if smoke:  # the interpreter runs each program in numpy: small steps, blocks of 16
        return {"decodes": [(p, 1) for p in ints(1, 90, 6)],
                "mixed": [(p, 1) for p in ints(1, 60, 3)] + [(0, 37), (50, 21)],
                "long decodes, split": [(p, 1) for p in ints(600, 900, 2)]}
    return {
        "reference decode (256 × 1 after 256–511)": [(p, 1) for p in ints(256, 512, 256)],
        "closed-loop decode (512 × 1 after 1,024–4,999)": [(p, 1) for p in ints(1024, 5000, 512)],
        "few long decodes (8 × 1 after 32–64k)": [(p, 1) for p in ints(32_000, 64_000, 8)],
        "mixed (192 decodes + 3 chunks)": [(p, 1) for p in ints(256, 1024, 192)] + [(1024, 512), (0, 768),
                                                                                  (300, 512)],
        "long prefill chunk (2,048 after 8,192)": [(8192, 2048)],
        "prefills, nothing cached (8 × 256)": [(0, 256)] * 8,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="the CPU: tiny steps through Triton's interpreter")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-flex", action="store_true")
    args = parser.parse_args()
    device = "cpu" if args.smoke else "cuda"
    dtype = torch.float16 if args.smoke else torch.bfloat16  # the interpreter's bf16 dot is wrong (Triton 3.9)
    block = 16 if args.smoke else BLOCK
    print(environment())
    candidates = {f"triton {t.decode_keys}/{t.prefill_rows}x{t.prefill_keys} w{t.prefill_warps}": triton_paged(t)
                  for t in (paged.Tiles(), paged.Tiles(prefill_rows=64, prefill_warps=4),
                            paged.Tiles(prefill_keys=32, prefill_stages=3))}
    candidates["triton, block table"] = triton_table
    if not args.smoke:
        KERNELS["varlen"] = varlen.packed_kernel()
        candidates = {"gather + varlen (today)": gather_varlen, **candidates}
        if not args.no_flex:
            candidates["flex (decode only)"] = flex_decode()
        candidates["paged sdpa"] = paged_sdpa
    else:
        candidates = {label: candidates[label] for label in [next(iter(candidates)), "triton, block table"]}
        paged.MIN_SPLIT_KEYS = 64  # splits on the smoke's short sequences
    rows = []
    for number, (name, pairs) in enumerate(steps(args.smoke).items()):
        step = Step(pairs, HEADS, KV_HEADS, DIM, block, dtype, device, seed=number)
        decode_only = all(q == 1 for _, q in pairs)
        for label, run in candidates.items():
            if ("table" in label and not decode_only) or (label in ("paged sdpa", "flex (decode only)") and number):
                continue  # flex compiles for each shape: the reference's decode step alone
            if label == "paged sdpa":
                step.mask = sdpa_mask(step)
            try:
                row = {"step": name, "candidate": label, **check(step, run), **timed(step, run, args.repeats)}
            except Exception as error:  # a candidate that cannot run this step is a finding, not the end
                row = {"step": name, "candidate": label, "failed": f"{type(error).__name__}: {str(error)[:300]}"}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n{'step':<48}{'candidate':<28}{'rel err':>9}{'µs':>10}{'GB/s':>8}{'TFLOP/s':>9}")
    for r in rows:
        if "failed" in r:
            print(f"{r['step'][:47]:<48}{r['candidate']:<28} failed: {r['failed'][:60]}")
            continue
        us = f"{r['us']:,.1f}" if "us" in r else r.get("graph", "-")[:10]
        print(f"{r['step'][:47]:<48}{r['candidate']:<28}{r['rel_error']:>9.1e}{us:>10}"
              f"{r.get('gb_s', 0):>8,.0f}{r.get('tflop_s', 0):>9.1f}")
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    (out / "paged_attention.json").write_text(json.dumps({"environment": environment(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
