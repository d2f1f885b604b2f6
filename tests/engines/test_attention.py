"""Continuous batching's attention (benchd.engines.attention, benchd.engines.varlen): torch's varlen kernel's glue
checked on the CPU with the reference attention in the kernel's place (the CPU has no FlashAttention; the GPU run,
bench/gpu_attention.py, checks the kernel itself), and the choice of attention by what is installed."""

from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen2Config

from benchd.engines import GenerationRequest, attention, paged, varlen
from benchd.engines.base import Choice
from benchd.engines.transformers.engine import TransformersEngine
from benchd.engines.transformers.spec import TransformersOptions
from benchd.models.loading import LoadedModel, load_model
from benchd.spec import SpecError, stack
from tests.engines.helpers import prompts, run_requests
from tests.helpers import make_spec

pytestmark = pytest.mark.engine
VARLEN = f"paged|{varlen.VARLEN}"
# Chunked prefills: prompts of up to 90 tokens through steps of 32, so that most steps carry queries after cached
# tokens (the causal alignment) beside other sequences' decodes (the packing).
CHUNKED = TransformersOptions(block_size=16, num_blocks=128, max_batch_tokens=32)


@pytest.fixture
def reference_kernel(monkeypatch):
    """paged|torch_varlen runnable here: the reference attention as its kernel, the device check passed."""
    monkeypatch.setitem(varlen.KERNEL, varlen.VARLEN, varlen.reference)
    monkeypatch.setattr(attention, "runs_here", lambda base, model, device: None)
    if not attention.batching_takes_registered():
        pytest.skip("this transformers' continuous batching runs no registered attention")


@pytest.fixture(scope="module")
def sliding():
    """A tiny Qwen2 whose second layer attends a window of 8 tokens (transformers groups its cache by layer type)."""
    torch.manual_seed(0)
    config = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=512, max_position_embeddings=512, use_sliding_window=True,
                         sliding_window=8, max_window_layers=1)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    assert config.layer_types == ["full_attention", "sliding_attention"]
    return LoadedModel(ref="tiny-qwen2-sliding", model=model, device=torch.device("cpu"), dtype=torch.float32,
                       load_s=0.0)


def generated(loaded, implementation, batch, options=CHUNKED, new_tokens=12):
    engine = TransformersEngine(loaded, options, make_spec(workload={"ignore_eos": True}).workload, implementation)
    engine.start()
    try:
        sink = run_requests(engine, [GenerationRequest(f"r{i}", p, new_tokens) for i, p in enumerate(batch)])
        return [sink.token_ids[f"r{i}"] for i in range(len(batch))], engine.settings()["attention"]
    finally:
        engine.stop()


def test_the_glue_attends_what_paged_sdpa_attends_packed_chunked_and_grouped(tiny, reference_kernel):
    """tiny has 4 query heads sharing 2 K/V heads: with the kernel's reference in its place, paged|torch_varlen
    generates what paged sdpa does, greedy, for a batch of chunked prefills and decodes packed together."""
    batch = prompts(10, seed=3, low=3, high=90)
    expected, sdpa = generated(tiny, "paged|sdpa", batch)
    tokens, chosen = generated(tiny, VARLEN, batch)
    assert chosen["implementation"] == VARLEN and sdpa["implementation"] == "paged|sdpa"
    assert tokens == expected
    assert len({tuple(t) for t in expected}) > 5  # the sequences differ: equality says something


def test_an_attention_aligned_wrongly_is_caught(tiny, monkeypatch, reference_kernel):
    """The check above can fail: causal from the sequence's start instead of its end (each chunk's queries would
    attend only the first keys) changes what is generated."""
    def top_left(q, k, v, cu_q, cu_k, max_q, max_k, scale, window):
        out = torch.zeros_like(q)
        for i in range(len(cu_q) - 1):
            qs, qe, ks, ke = (int(x) for x in (cu_q[i], cu_q[i + 1], cu_k[i], cu_k[i + 1]))
            ones = torch.ones(qe - qs, ke - ks, dtype=torch.bool)

            def heads(x: torch.Tensor) -> torch.Tensor:
                return x.repeat_interleave(q.shape[1] // k.shape[1], dim=1).transpose(0, 1)

            out[qs:qe] = torch.nn.functional.scaled_dot_product_attention(
                q[qs:qe].transpose(0, 1), heads(k[ks:ke]), heads(v[ks:ke]), attn_mask=ones.tril(), scale=scale,
            ).transpose(0, 1)
        return out

    batch = prompts(6, seed=4, low=40, high=90)
    expected, _ = generated(tiny, "paged|sdpa", batch)
    monkeypatch.setitem(varlen.KERNEL, varlen.VARLEN, top_left)
    assert generated(tiny, VARLEN, batch)[0] != expected


def test_sliding_window_layers_attend_their_window(sliding, reference_kernel):
    """A model with a full and a sliding-window layer: transformers hands each layer type its own sequence lengths
    (the window's cache is a ring), and the glue gives the kernel the window; prompts longer than the window."""
    batch = prompts(6, seed=5, low=10, high=60)
    expected, _ = generated(sliding, "paged|sdpa", batch)
    assert generated(sliding, VARLEN, batch)[0] == expected


def test_the_reference_is_the_attention_written_out():
    """varlen.reference, which stands in for the kernel, against attention computed by hand for one sequence of
    2 new queries after 3 cached keys, one K/V head shared by 2 query heads, with and without a window of 2."""
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 2, 4, generator=g), torch.randn(5, 1, 4, generator=g), torch.randn(5, 1, 4, generator=g)
    cu_q, cu_k = torch.tensor([0, 2], dtype=torch.int32), torch.tensor([0, 5], dtype=torch.int32)
    for window, seen in ((-1, [range(4), range(5)]), (2, [range(1, 4), range(2, 5)])):
        out = varlen.reference(q, k, v, cu_q, cu_k, 2, 5, 0.5, window)
        for row, keys in enumerate(seen):  # query row j is position 3 + j: it sees keys up to its own
            for head in range(2):
                weights = torch.softmax(torch.stack([q[row, head] @ k[j, 0] * 0.5 for j in keys]), 0)
                assert torch.allclose(out[row, head], sum(w * v[j, 0] for w, j in zip(weights, keys)), atol=1e-6)


def test_the_best_installed_attention_is_chosen_for_the_device(tiny, monkeypatch):
    """Order: flash-attn 3, flash-attn 2, benchd's Triton kernels, torch's varlen kernel, paged sdpa; the CPU runs
    paged sdpa. Each is taken where its package is found and the device runs it; what the spec names is taken as
    named."""
    cuda = torch.device("cuda", 0)
    runs = {"flash_attention_3": "not a Hopper GPU", "flash_attention_2": None, paged.PAGED: None, varlen.VARLEN: None,
            "sdpa": None}
    monkeypatch.setattr(attention, "runs_here", lambda base, model, device: runs.get(base))
    found = {"flash_attention_3": (True, False), "flash_attention_2": (False, False), paged.PAGED: (True, False),
             varlen.VARLEN: (True, False), "sdpa": (True, False)}
    monkeypatch.setattr(attention, "_resolves", lambda base: found[base])
    assert attention.choose(tiny.model, cuda, None).implementation == f"paged|{paged.PAGED}"
    found[paged.PAGED] = (False, False)  # no Triton
    assert attention.choose(tiny.model, cuda, None).implementation == VARLEN
    found["flash_attention_2"] = (True, True)  # through transformers' kernels hub
    choice = attention.choose(tiny.model, cuda, None)
    assert choice == Choice("paged|flash_attention_2", choice.kernel)
    assert "kernels-community/flash-attn2 through" in choice.kernel
    runs["flash_attention_3"] = None
    assert attention.choose(tiny.model, cuda, None).implementation == "paged|flash_attention_3"
    assert attention.choose(tiny.model, cuda, "sdpa") == Choice("paged|sdpa", attention.kernel_source("sdpa"))
    monkeypatch.undo()
    assert attention.choose(tiny.model, torch.device("cpu"), None).implementation == "paged|sdpa"
    with pytest.raises(SpecError, match="attn_implementation: torch_varlen cannot run here: it does not run on cpu"):
        attention.choose(tiny.model, torch.device("cpu"), "torch_varlen")


def test_the_daemon_predicts_the_workers_choice_without_torch(monkeypatch):
    """Admission plans the memory for the attention the worker will choose (models/memory.py): the same order,
    read off what is installed (a submodule found without importing its package)."""
    assert stack.installed("torch.nn.attention.varlen") and not stack.installed("torch.nn.no_such_module")
    assert stack.batching_attention("cpu") == "sdpa"
    assert stack.batching_attention("cuda", "float32") == "sdpa"  # FlashAttention runs half precision
    have = {"flash_attn_interface": False, "flash_attn": False, "kernels": False, "triton": False,
            "torch.nn.attention.varlen": True}
    monkeypatch.setattr(stack, "installed", lambda package: have[package])
    assert stack.batching_attention("cuda") == "torch_varlen"
    have["triton"] = True
    assert stack.batching_attention("cuda") == "triton_paged"
    have["flash_attn"] = True
    assert stack.batching_attention("cuda", "bfloat16") == "flash_attention_2"


def test_a_transformers_that_runs_no_registered_attention_falls_back(monkeypatch):
    """transformers 5.24's continuous batching refuses any attention but its own: torch_varlen is then not chosen,
    and a spec naming it is told why. (A CUDA device as the checks see one: its type and an H100's capability.)"""
    half = load_model("tiny", dtype="bfloat16", device="cpu", seed=0)
    cuda = SimpleNamespace(type="cuda")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(attention, "_resolves", lambda base: (base in (varlen.VARLEN, "sdpa"), False))
    monkeypatch.setattr(attention, "batching_takes_registered", lambda: True)
    assert attention.choose(half.model, cuda, None).implementation == VARLEN
    monkeypatch.setattr(attention, "batching_takes_registered", lambda: False)
    assert attention.choose(half.model, cuda, None).implementation == "paged|sdpa"
    with pytest.raises(SpecError, match="runs only its own implementations"):
        attention.choose(half.model, cuda, "torch_varlen")
