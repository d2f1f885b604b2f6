"""The Triton kernels behind paged|triton_paged (engines/paged.py, which launches them). Each reads K and V where
the paged cache holds them, instead of a gathered copy: through transformers' block table (a sequence's blocks, in
order) on its decode fast path, else row by row through its read index (each sequence's tokens' rows, in order: the
page table at a token's grain); the query heads that share a K/V head are packed into one tile, so that each K/V
row is read once per group rather than once per query head.

- decode: one program a (sequence, K/V head, split of its keys) for sequences of at most QTOK new tokens (decode
  rows); a long sequence's keys are split across programs, each writing a partial that `combine` merges;
- prefill: one program a (tile of QTOK new tokens, K/V head) for the longer ones (prefills and their chunks);
  a program finds its sequence by a binary search over the tiles' starts, so that the grid depends on the step's
  padded shape alone (one CUDA graph per shape, whatever the step's mix).

Causal attention aligned to each sequence's end (a query of q new tokens after p cached attends p + its own
position), and a sliding window's left edge where one is given, as FlashAttention's varlen kernels compute it. Only
imported where the kernels run: triton comes with torch's CUDA builds; on a CPU Triton's interpreter runs them
(TRITON_INTERPRET=1, the tests)."""

import triton
import triton.language as tl


@triton.jit
def _attend(acc, m_i, l_i, q, k_ptr, v_ptr, index_ptr, key_base, lo, hi, qpos, rows_ok, kv_head,
            stride_kt, stride_kh, stride_vt, stride_vh, qk_scale, window,
            HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, TILE: tl.constexpr, INDEXED: tl.constexpr,
            WINDOWED: tl.constexpr, PAGE: tl.constexpr):
    """Online softmax of the tile's query rows over the sequence's keys lo..hi (logical positions), in base 2.
    key_base: where the sequence's entries start in the index (its block-table row where PAGE, the block size, is
    given), or in K/V themselves without an index."""
    offs_t = tl.arange(0, TILE)
    offs_d = tl.arange(0, D_PAD)
    d_ok = offs_d < HEAD_DIM
    for start in range(lo, hi, TILE):
        keys = start + offs_t
        k_ok = keys < hi
        if PAGE:
            pages = tl.load(index_ptr + key_base + keys // PAGE, mask=k_ok, other=0).to(tl.int64)
            rows = pages * PAGE + keys % PAGE
        elif INDEXED:
            rows = tl.load(index_ptr + key_base + keys, mask=k_ok, other=0).to(tl.int64)
        else:
            rows = (key_base + keys).to(tl.int64)
        kt = tl.load(k_ptr + rows[None, :] * stride_kt + kv_head * stride_kh + offs_d[:, None],
                     mask=k_ok[None, :] & d_ok[:, None], other=0.0)  # [D, TILE]
        s = tl.dot(q, kt) * qk_scale  # [M, TILE], float32
        allowed = k_ok[None, :] & (keys[None, :] <= qpos[:, None]) & rows_ok[:, None]
        if WINDOWED:
            allowed = allowed & (keys[None, :] >= qpos[:, None] - window)
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing allowed yet stays empty
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + rows[:, None] * stride_vt + kv_head * stride_vh + offs_d[None, :],
                    mask=k_ok[:, None] & d_ok[None, :], other=0.0)  # [TILE, D]
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _attend_rows(q_ptr, k_ptr, v_ptr, index_ptr, key_base, lo, hi, q_start, token, head, rows_ok, qpos, kv_head,
                 stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, qk_scale, window,
                 BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, TILE: tl.constexpr,
                 INDEXED: tl.constexpr, WINDOWED: tl.constexpr, PAGE: tl.constexpr):
    """A tile's query rows (its tokens × the heads of a group) loaded and attended: (acc, row maxima, row sums)."""
    offs_d = tl.arange(0, D_PAD)
    q_rows = (q_start + token).to(tl.int64)
    q = tl.load(q_ptr + q_rows[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :],
                mask=rows_ok[:, None] & (offs_d < HEAD_DIM)[None, :], other=0.0)
    acc = tl.zeros([BLOCK_M, D_PAD], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    return _attend(acc, m_i, l_i, q, k_ptr, v_ptr, index_ptr, key_base, lo, hi, qpos, rows_ok, kv_head,
                   stride_kt, stride_kh, stride_vt, stride_vh, qk_scale, window, HEAD_DIM, D_PAD, TILE, INDEXED,
                   WINDOWED, PAGE)


@triton.jit
def _store_rows(out_ptr, out, q_start, token, head, rows_ok, stride_ot, stride_oh, HEAD_DIM: tl.constexpr,
                D_PAD: tl.constexpr):
    offs_d = tl.arange(0, D_PAD)
    q_rows = (q_start + token).to(tl.int64)
    tl.store(out_ptr + q_rows[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=rows_ok[:, None] & (offs_d < HEAD_DIM)[None, :])


@triton.jit
def decode(out_ptr, part_acc_ptr, part_m_ptr, part_l_ptr, q_ptr, k_ptr, v_ptr, index_ptr, cu_q_ptr, cu_k_ptr,
           qk_scale, window, split_keys, splits, table_stride,
           stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
           GROUP: tl.constexpr, QTOK: tl.constexpr, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr,
           D_PAD: tl.constexpr, TILE: tl.constexpr, PARTIAL: tl.constexpr, INDEXED: tl.constexpr,
           WINDOWED: tl.constexpr, PAGE: tl.constexpr):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    q_start = tl.load(cu_q_ptr + seq)
    n_q = tl.load(cu_q_ptr + seq + 1) - q_start
    if (n_q == 0) | (n_q > QTOK):  # padding, or the prefill kernel's
        return
    key_base = tl.load(cu_k_ptr + seq)
    n_k = tl.load(cu_k_ptr + seq + 1) - key_base
    if PAGE:  # the sequence's row of the block table
        key_base = seq * table_stride
    lo = split * split_keys
    if lo >= n_k:  # combine reads only the splits a sequence's keys reach
        return
    hi = tl.where(split == splits - 1, n_k, tl.minimum(lo + split_keys, n_k))  # the last reads on to the end
    r = tl.arange(0, BLOCK_M)
    token = r // GROUP
    head = kv_head * GROUP + r % GROUP
    rows_ok = (r < QTOK * GROUP) & (token < n_q)
    qpos = n_k - n_q + token
    if WINDOWED:
        lo = tl.maximum(lo, n_k - n_q - window)
    acc, m_i, l_i = _attend_rows(q_ptr, k_ptr, v_ptr, index_ptr, key_base, lo, hi, q_start, token, head, rows_ok,
                                 qpos, kv_head, stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                                 qk_scale, window, BLOCK_M, HEAD_DIM, D_PAD, TILE, INDEXED, WINDOWED, PAGE)
    if PARTIAL:  # [sequence, K/V head, split, row]: combine merges the splits
        part = ((seq * tl.num_programs(1) + kv_head) * splits + split).to(tl.int64) * BLOCK_M + r
        tl.store(part_acc_ptr + part[:, None] * D_PAD + tl.arange(0, D_PAD)[None, :], acc)
        tl.store(part_m_ptr + part, m_i)
        tl.store(part_l_ptr + part, l_i)
    else:
        _store_rows(out_ptr, acc / l_i[:, None], q_start, token, head, rows_ok, stride_ot, stride_oh, HEAD_DIM,
                    D_PAD)


@triton.jit
def combine(out_ptr, part_acc_ptr, part_m_ptr, part_l_ptr, cu_q_ptr, cu_k_ptr, split_keys, splits,
            stride_ot, stride_oh,
            GROUP: tl.constexpr, QTOK: tl.constexpr, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr,
            D_PAD: tl.constexpr):
    """The decode kernel's splits of one (sequence, K/V head) merged: each weighed by its rows' maxima."""
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    q_start = tl.load(cu_q_ptr + seq)
    n_q = tl.load(cu_q_ptr + seq + 1) - q_start
    if (n_q == 0) | (n_q > QTOK):
        return
    n_k = tl.load(cu_k_ptr + seq + 1) - tl.load(cu_k_ptr + seq)
    active = tl.minimum(tl.cdiv(n_k, split_keys), splits)
    r = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D_PAD)
    first = (seq * tl.num_programs(1) + kv_head).to(tl.int64) * splits
    m_all = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    for s in range(0, active):
        m_all = tl.maximum(m_all, tl.load(part_m_ptr + (first + s) * BLOCK_M + r))
    m_safe = tl.where(m_all == float("-inf"), 0.0, m_all)
    acc = tl.zeros([BLOCK_M, D_PAD], dtype=tl.float32)
    l_all = tl.zeros([BLOCK_M], dtype=tl.float32)
    for s in range(0, active):
        part = (first + s) * BLOCK_M + r
        weight = tl.exp2(tl.load(part_m_ptr + part) - m_safe)
        l_all += weight * tl.load(part_l_ptr + part)
        acc += weight[:, None] * tl.load(part_acc_ptr + part[:, None] * D_PAD + offs_d[None, :])
    token = r // GROUP
    rows_ok = (r < QTOK * GROUP) & (token < n_q)
    _store_rows(out_ptr, acc / l_all[:, None], q_start, token, kv_head * GROUP + r % GROUP, rows_ok, stride_ot,
                stride_oh, HEAD_DIM, D_PAD)


@triton.jit
def prefill(out_ptr, q_ptr, k_ptr, v_ptr, index_ptr, cu_q_ptr, cu_k_ptr, num_seqs, qk_scale, window,
            stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
            GROUP: tl.constexpr, QTOK: tl.constexpr, DECODE_QTOK: tl.constexpr, BLOCK_M: tl.constexpr,
            HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, TILE: tl.constexpr, INDEXED: tl.constexpr,
            WINDOWED: tl.constexpr):
    tile = tl.program_id(0)
    kv_head = tl.program_id(1)
    # sequence i's tiles start at cu_q[i] // QTOK + i (strictly increasing): the last start at or before this tile
    low = tile * 0  # a tensor from the start: the loop carries it
    high = low + num_seqs
    while low < high:
        middle = (low + high) // 2
        before = tl.load(cu_q_ptr + middle) // QTOK + middle <= tile
        low = tl.where(before, middle + 1, low)
        high = tl.where(before, high, middle)
    seq = low - 1
    q_start = tl.load(cu_q_ptr + seq)
    n_q = tl.load(cu_q_ptr + seq + 1) - q_start
    first_token = (tile - (q_start // QTOK + seq)) * QTOK
    if (n_q <= DECODE_QTOK) | (first_token >= n_q):  # the decode kernel's, or past the sequence's last tile
        return
    key_base = tl.load(cu_k_ptr + seq)
    n_k = tl.load(cu_k_ptr + seq + 1) - key_base
    r = tl.arange(0, BLOCK_M)
    token = first_token + r // GROUP
    head = kv_head * GROUP + r % GROUP
    rows_ok = (r < QTOK * GROUP) & (token < n_q)
    qpos = n_k - n_q + token
    hi = n_k - n_q + tl.minimum(first_token + QTOK, n_q)
    lo = 0
    if WINDOWED:
        lo = tl.maximum(0, n_k - n_q + first_token - window)
    acc, _, l_i = _attend_rows(q_ptr, k_ptr, v_ptr, index_ptr, key_base, lo, hi, q_start, token, head, rows_ok,
                               qpos, kv_head, stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                               qk_scale, window, BLOCK_M, HEAD_DIM, D_PAD, TILE, INDEXED, WINDOWED, 0)
    _store_rows(out_ptr, acc / l_i[:, None], q_start, token, head, rows_ok, stride_ot, stride_oh, HEAD_DIM, D_PAD)
