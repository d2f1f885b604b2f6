"""paged|triton_paged (benchd.engines.paged): the Triton kernels themselves through Triton's interpreter (the CPU
has no GPU; bench/gpu_paged_attention.py checks and times them on one), and their glue in continuous batching with
the reference in the kernel's place: the step's K/V written into the cache, every sequence's read back in place."""

import pytest
import torch

from benchd.engines import attention, paged
from tests.engines.helpers import prompts
from tests.engines.test_attention import CHUNKED, generated, sliding  # noqa: F401 (a fixture)

# the interpreter divides the rows a tile leaves empty (masked at the store) in numpy, which warns
pytestmark = [pytest.mark.engine, pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]
PAGED = f"paged|{paged.PAGED}"


@pytest.fixture(scope="module")
def interpreted():
    """The kernels' module under Triton's interpreter (tests/conftest.py switches it on before triton loads)."""
    import triton

    from benchd.engines import paged_kernels

    assert triton.knobs.runtime.interpret, "Triton's kernels need its interpreter on a CPU (TRITON_INTERPRET=1)"
    return paged_kernels


def paged_step(pairs, heads, kv_heads, dim, block, seed, padding=0):
    """A packed step over a cache of shuffled blocks: (past, new) tokens a sequence, then `padding` empty
    sequences (as CUDA graphs pad a step); the read index lists each sequence's rows in order."""
    g = torch.Generator().manual_seed(seed)
    counts = [-(-(p + q) // block) for p, q in pairs]
    order = torch.randperm(sum(counts) + 1, generator=g).tolist()
    index, cu_q, cu_k = [], [0], [0]
    for (p, q), count in zip(pairs, counts):
        blocks = [order.pop() for _ in range(count)]
        index += [blocks[t // block] * block + t % block for t in range(p + q)]
        cu_q.append(cu_q[-1] + q)
        cu_k.append(cu_k[-1] + p + q)
    cu_q += [cu_q[-1]] * padding
    cu_k += [cu_k[-1]] * padding
    rows = (sum(counts) + 1) * block
    k, v = (torch.randn(rows, kv_heads, dim, generator=g, dtype=torch.float16) for _ in range(2))
    q = torch.randn(cu_q[-1], heads, dim, generator=g, dtype=torch.float16) * 2
    as_int = dict(dtype=torch.int32)
    return q, k, v, torch.tensor(index), torch.tensor(cu_q, **as_int), torch.tensor(cu_k, **as_int)


def test_the_kernels_attend_what_the_reference_does(interpreted, monkeypatch):
    """Decodes (split across programs where long) beside chunked prefills and a fresh prompt, empty padding
    sequences, heads grouped by 1, 3 and 4 a K/V head, a head dimension padded to a power of two, a sliding
    window; and the step's own K/V packed by sequence (index None), as a step with nothing cached hands them."""
    monkeypatch.setattr(paged, "MIN_SPLIT_KEYS", 32)  # the decode rows' keys split on these short sequences
    pairs = [(70, 1), (5, 1), (0, 9), (40, 23), (120, 1), (13, 3)]
    for seed, (heads, kv_heads, dim, window) in enumerate([(4, 1, 16, -1), (6, 2, 24, -1), (4, 4, 16, 6)]):
        q, k, v, index, cu_q, cu_k = paged_step(pairs, heads, kv_heads, dim, 16, seed, padding=2)
        longest = int((cu_k[1:] - cu_k[:-1]).max())
        expected = paged.reference(q.float(), k.float(), v.float(), index, cu_q, cu_k, longest, 0.3, window)
        out = paged.attend(q, k, v, index, cu_q, cu_k, longest, 0.3, window).float()
        assert torch.isfinite(out).all()
        assert (out - expected).norm() / expected.norm() < 2e-3, (heads, kv_heads, dim, window)
    packed_k, packed_v = k[index], v[index]  # K/V already by sequence: no index
    out = paged.attend(q, packed_k, packed_v, None, cu_q, cu_k, longest, 0.3, -1).float()
    expected = paged.reference(q.float(), k.float(), v.float(), index, cu_q, cu_k, longest, 0.3, -1)
    assert (out - expected).norm() / expected.norm() < 2e-3


def test_decode_rows_read_through_the_block_table(interpreted, monkeypatch):
    """transformers' decode fast path: decode rows alone, each sequence's blocks in a table (padding rows -1, as
    transformers leaves them), the keys of the longer ones split; and where each new token is written."""
    monkeypatch.setattr(paged, "MIN_SPLIT_KEYS", 32)
    pairs = [(70, 1), (5, 1), (130, 1), (0, 1)]
    q, k, v, index, cu_q, cu_k = paged_step(pairs, 8, 2, 16, 16, seed=11, padding=0)
    lengths = (cu_k[1:] - cu_k[:-1]).tolist()
    table = torch.full((len(pairs), 10), -1, dtype=torch.int32)
    for i, start in enumerate(cu_k[:-1].tolist()):
        blocks = index[start:start + lengths[i]:16] // 16
        table[i, :len(blocks)] = blocks.int()
    expected = paged.reference(q.float(), k.float(), v.float(), index, cu_q, cu_k, 160, 0.3, -1)
    assert torch.equal(paged.reference(q.float(), k.float(), v.float(), table, cu_q, cu_k, 160, 0.3, -1, 16),
                       expected)
    out = paged.attend(q, k, v, table, cu_q, cu_k, 160, 0.3, -1, 16).float()
    assert (out - expected).norm() / expected.norm() < 2e-3
    last = [start + n - 1 for start, n in zip(cu_k[:-1].tolist(), lengths)]
    assert paged.decode_rows(table, cu_q, cu_k, 16, 999, len(pairs)).tolist() == index[last].tolist()


def test_rows_left_unmerged_are_caught(interpreted, monkeypatch):
    """The check above can fail: decode rows whose keys were split, with their splits never merged (combine not
    launched), hold whatever their memory held."""
    class Skipped:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: None

    monkeypatch.setattr(paged, "MIN_SPLIT_KEYS", 32)
    q, k, v, index, cu_q, cu_k = paged_step([(100, 1), (90, 1)], 4, 2, 16, 16, seed=7)
    expected = paged.reference(q.float(), k.float(), v.float(), index, cu_q, cu_k, 101, 0.3, -1)
    right = paged.attend(q, k, v, index, cu_q, cu_k, 101, 0.3, -1).float()
    monkeypatch.setattr(interpreted, "combine", Skipped())
    wrong = paged.attend(q, k, v, index, cu_q, cu_k, 101, 0.3, -1).float()
    assert (right - expected).norm() / expected.norm() < 2e-3
    assert not (wrong - expected).norm() / expected.norm() < 2e-3  # NaN or far


@pytest.fixture
def reference_kernel(monkeypatch):
    """paged|triton_paged runnable here: the reference as its kernel, the device check passed."""
    monkeypatch.setitem(paged.KERNEL, paged.PAGED, paged.reference)
    monkeypatch.setattr(attention, "runs_here", lambda base, model, device: None)
    if not attention.batching_takes_registered():
        pytest.skip("this transformers' continuous batching runs no registered attention")


@pytest.fixture(scope="module")
def tiny_sdpa(tiny):
    """Chunked prefills and decodes on the tiny model, and what paged sdpa generates for them."""
    batch = prompts(10, seed=3, low=3, high=90)
    return batch, generated(tiny, "paged|sdpa", batch)[0]


def test_the_glue_reads_the_cache_in_place(tiny, tiny_sdpa, sliding, reference_kernel, monkeypatch):
    """With the reference in the kernel's place, paged|triton_paged generates what paged sdpa does for chunked
    prefills and decodes packed together (by the read index), steps of decodes alone (by the block table, on
    transformers' decode fast path), grouped heads, and a model with a sliding-window layer (which keeps
    transformers' own update and never gets a block table); the choice says where its kernel comes from."""
    ways = []

    def counted(q, k, v, index, *args):
        ways.append("none" if index is None else "table" if index.dim() == 2 else "index")
        return paged.reference(q, k, v, index, *args)

    monkeypatch.setitem(paged.KERNEL, paged.PAGED, counted)
    sliding_batch = prompts(6, seed=5, low=10, high=60)
    for model, batch, expected in ((tiny, *tiny_sdpa), (sliding, sliding_batch,
                                                        generated(sliding, "paged|sdpa", sliding_batch)[0])):
        ways.clear()
        tokens, chosen = generated(model, PAGED, batch, CHUNKED)
        assert tokens == expected
        assert chosen["implementation"] == PAGED and "Triton" in chosen["kernel"]
        assert ("table" in ways) == (model is tiny) and "index" in ways
    assert len({tuple(t) for t in expected}) > 3  # the sequences differ: equality says something


def test_a_glue_that_reads_other_rows_is_caught(tiny, tiny_sdpa, reference_kernel, monkeypatch):
    """The check above can fail: a kernel handed the cache's rows in packed order (the read index and the block
    table ignored) attends other tokens' K/V, and what is generated changes."""
    def unindexed(q, k, v, index, cu_q, cu_k, max_k, scale, window, block_size=0):
        rows = index if index is None else torch.arange(int(cu_k[-1])) % k.shape[0]
        return paged.reference(q, k, v, rows, cu_q, cu_k, max_k, scale, window)

    batch, expected = tiny_sdpa
    monkeypatch.setitem(paged.KERNEL, paged.PAGED, unindexed)
    assert generated(tiny, PAGED, batch, CHUNKED)[0] != expected
