"""Continuous batching on torch's varlen FlashAttention, checked against paged sdpa on a GPU (issue 40, item 2):

1. the kernel alone: packed steps of decodes, prefills and chunked prefills (GQA 32/8 heads, head dim 64, bf16),
   full and sliding-window, against the same attention in float32 (engines/varlen.py: reference); paged
   sdpa's answer (the reference's mask in bf16, as paged sdpa computes) beside it;
2. the model: llama-3.2-1b with sharpened logits (random weights give near-flat logits, where agreement proves
   nothing: the final norm ×30, see sharpen()); plain generate() (the model's sdpa,
   unpaged) is the reference, and benchd's continuous-batching engine runs the same prompts with paged sdpa and
   with paged|torch_varlen (no CUDA graphs, so that a hook sees every step's logits): each prompt's first-token
   logits (max abs difference, top-1 agreement on all prompts and on those whose top-1 leads by more than 1),
   then all prompts at once, greedy.

    PYTHONPATH=/tmp/site:src python3 bench/gpu_attention.py [--requests 64] [--new-tokens 8]

$OUT/attention.json keeps every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
from pathlib import Path

import torch
from common import environment

from benchd.engines import GenerationRequest, paged, varlen
from benchd.engines.transformers.engine import TransformersEngine
from benchd.models.loading import load_model
from benchd.spec import validate_spec


def packed(pairs: list[tuple[int, int]], heads: int, kv_heads: int, dim: int, device: str, g: torch.Generator):
    """A step's packed q/k/v for (past, query) pairs: each sequence's K/V are its past and its new tokens."""
    tq, tk = sum(q for _, q in pairs), sum(p + q for p, q in pairs)
    q = torch.randn(tq, heads, dim, generator=g, device=device) * 3  # peaky attention: scores of a few units
    k = torch.randn(tk, kv_heads, dim, generator=g, device=device)
    v = torch.randn(tk, kv_heads, dim, generator=g, device=device)
    cu_q = torch.tensor([0, *torch.tensor([q for _, q in pairs]).cumsum(0).tolist()], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, *torch.tensor([p + q for p, q in pairs]).cumsum(0).tolist()], dtype=torch.int32,
                        device=device)
    return q, k, v, cu_q, cu_k, max(q for _, q in pairs), max(p + q for p, q in pairs)


def kernel_check(device: str) -> list[dict]:
    g = torch.Generator(device=device).manual_seed(0)
    r = torch.Generator().manual_seed(1)
    ints = lambda low, high, n: torch.randint(low, high, (n,), generator=r).tolist()
    steps = {
        "decodes (128 × 1 after 1–4,000)": [(p, 1) for p in ints(1, 4000, 128)],
        "prefills (16 × 1–1,024)": [(0, q) for q in ints(1, 1024, 16)],
        "chunked prefills and decodes": [(p, q) for p, q in zip(ints(0, 3000, 32), ints(1, 256, 32))]
                                        + [(p, 1) for p in ints(1, 3000, 64)],
    }
    kernel = varlen.packed_kernel()
    rows = []
    for window in (-1, 127):
        for name, pairs in steps.items():
            q, k, v, cu_q, cu_k, max_q, max_k = packed(pairs, 32, 8, 64, device, g)
            scale = 64 ** -0.5
            exact = varlen.reference(q.float(), k.float(), v.float(), cu_q, cu_k, max_q, max_k, scale, window)
            half = [t.to(torch.bfloat16) for t in (q, k, v)]
            fast = kernel(*half, cu_q, cu_k, max_q, max_k, scale, window).float()
            # K/V as a step with nothing cached hands them over: strided, token-major views of [Hkv, T, D]
            strided = [t.to(torch.bfloat16).transpose(0, 1).contiguous().transpose(0, 1) for t in (k, v)]
            raw = kernel(half[0], *strided, cu_q, cu_k, max_q, max_k, scale, window).float()
            sdpa = varlen.reference(*half, cu_q, cu_k, max_q, max_k, scale, window).float()
            rows.append({"step": name, "window": window, "tokens": q.shape[0],
                         "varlen_max_abs": (fast - exact).abs().max().item(),
                         "sdpa_bf16_max_abs": (sdpa - exact).abs().max().item(),
                         "varlen_vs_sdpa_max_abs": (fast - sdpa).abs().max().item(),
                         "strided_kv_max_abs": (raw - exact).abs().max().item(),
                         "reference_abs_mean": exact.abs().mean().item()})
    return rows


def sharpen(model: torch.nn.Module) -> None:
    """Logits that are not flat: the final norm ×30 (logits' spread per row from about 1 to about 27). The
    attention is left as the random weights make it: sharpened too (queries and keys ×4), the 16 layers amplified
    bf16's rounding until paged sdpa itself agreed with plain generate() on 48 % of first tokens (H100)."""
    with torch.no_grad():
        model.model.norm.weight.mul_(30)


def model_check(requests: int, new_tokens: int, model_ref: str = "llama-3.2-1b", device: str = "cuda",
                only: list[str] | None = None) -> dict:
    """The same prompts through plain generate() (the model's own sdpa over each prompt, unpaged: the reference)
    and through benchd's continuous-batching engine under each paged attention: the first token's logits of each
    prompt alone (a chunked prefill: 256 tokens a step), then every prompt at once, greedy, new_tokens each."""
    loaded = load_model(model_ref, "bfloat16" if device == "cuda" else "float32", device, 0)
    sharpen(loaded.model)
    model = loaded.model
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(3, loaded.vocab_size, (int(n),), generator=g).tolist()
               for n in torch.randint(16, 1500, (requests,), generator=g)]
    with torch.no_grad():
        first = torch.stack([model(torch.tensor([p], device=device)).logits[0, -1].float() for p in prompts])
        greedy = [model.generate(torch.tensor([p], device=device), do_sample=False, max_new_tokens=new_tokens,
                                 eos_token_id=[], pad_token_id=0)[0, len(p):].tolist() for p in prompts]
    top2 = first.topk(2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1]) > 1.0
    result = {"prompts": len(prompts), "logit_std": first.std(dim=-1).mean().item(), "clear_prompts": int(clear.sum())}
    cuda = device == "cuda"
    packed_kernel = varlen.packed_kernel() if cuda else varlen.reference
    variants = {"paged|sdpa": ("paged|sdpa", {}),
                "paged|torch_varlen": ("paged|torch_varlen", {varlen.VARLEN: packed_kernel}),
                # the glue with the reference in the kernel's place: what is the kernel's and what the glue's
                "paged|torch_varlen, reference kernel": ("paged|torch_varlen", {varlen.VARLEN: varlen.reference}),
                # benchd's in-place kernels (issue 50): Triton's on a GPU, the reference on a CPU
                "paged|triton_paged": ("paged|triton_paged", {})}
    paged.KERNEL[paged.PAGED] = paged.attend if cuda else paged.reference
    if only:
        variants = {label: variants[label] for label in ["paged|sdpa", *only] if label in variants}
    logits_of = {}
    for label, (implementation, kernels) in variants.items():
        varlen.KERNEL.clear()
        varlen.KERNEL.update(kernels)
        rows: list[torch.Tensor] = []
        hook = model.lm_head.register_forward_hook(lambda m, i, out: rows.append(out.detach().float()[0, -1]))
        alone = make_engine(loaded, implementation, 1, device)
        last = []
        for prompt in prompts:  # a chunked prefill calls the head at each chunk: the prompt's last call is its token
            generate(alone, [prompt], 1)
            last.append(rows[-1])
        alone.stop()
        hook.remove()
        logits = torch.stack(last)
        logits_of[label] = logits
        agree = logits.argmax(-1) == first.argmax(-1)
        against_sdpa = logits_of["paged|sdpa"]
        batched = make_engine(loaded, implementation, new_tokens, device)
        tokens = generate(batched, prompts, new_tokens)
        kernel = batched.settings()["attention"]["kernel"]
        batched.stop()
        if device == "cuda":
            torch.cuda.empty_cache()
        result[label] = {
            "kernel": kernel, "first_token_logits_max_abs": (logits - first).abs().max().item(),
            "vs_paged_sdpa_max_abs": (logits - against_sdpa).abs().max().item(),
            "vs_paged_sdpa_top1_clear": (logits.argmax(-1) == against_sdpa.argmax(-1))[clear].float().mean().item()
                                        if clear.any() else None,
            "top1_agreement": agree.float().mean().item(),
            "top1_agreement_clear": agree[clear].float().mean().item() if clear.any() else None,
            "greedy_requests_equal": sum(tokens[i] == greedy[i] for i in range(len(prompts))) / len(prompts),
            "greedy_tokens_equal": sum(a == b for i in range(len(prompts)) for a, b in zip(tokens[i], greedy[i]))
                                   / (len(prompts) * new_tokens)}
    return result


def make_engine(loaded, implementation: str, new_tokens: int, device: str) -> TransformersEngine:
    # synchronous, so that the head's last call is the prompt's last chunk (async batching runs the next step's
    # forward before the last one's tokens are read)
    options = {"use_cuda_graph": False, "use_async_batching": False, "max_batch_tokens": 256} if device == "cuda" else \
        {"block_size": 16, "num_blocks": 1024, "max_batch_tokens": 64}
    spec = validate_spec({"name": "check", "model": loaded.ref, "device": device, "transformers": options,
                          "workload": {"ignore_eos": True, "output_tokens": {"dist": "fixed", "value": new_tokens}}})
    engine = TransformersEngine(loaded, spec.transformers, spec.workload, implementation)
    engine.start()
    return engine


def generate(engine: TransformersEngine, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    done, tokens = threading.Event(), {}
    ends: dict[str, str | None] = {}

    class Sink:
        def admitted(self, request_id, t): pass
        def stamped_tokens(self, request_id, stamps, ids): tokens.setdefault(request_id, []).extend(ids)

        def finished(self, request_id, t, error=None):
            ends[request_id] = error
            if len(ends) == len(prompts):
                done.set()

    for i, prompt in enumerate(prompts):
        engine.submit(GenerationRequest(f"r{i}", prompt, new_tokens), Sink())
    if not done.wait(600) or any(ends.values()):
        raise SystemExit(f"the engine did not finish: {[e for e in ends.values() if e][:1]}")
    return [tokens.get(f"r{i}", []) for i in range(len(prompts))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=8)
    parser.add_argument("--smoke", action="store_true", help="the tiny model on the CPU, the reference as kernel")
    parser.add_argument("--model-only", nargs="*", metavar="VARIANT",
                        help="only the model's check, of these variants beside paged|sdpa (all when none named)")
    parser.add_argument("--model", default="llama-3.2-1b")
    args = parser.parse_args()
    if args.smoke:
        from benchd.engines import attention
        attention.runs_here = lambda base, model, device: None  # the CPU has no FlashAttention: the glue alone
        print(json.dumps(model_check(8, 4, "tiny", "cpu", args.model_only), indent=1))
        return
    print(environment())
    if args.model_only is not None:
        model = model_check(args.requests, args.new_tokens, args.model, only=args.model_only)
        print(json.dumps(model, indent=1))
        out = Path(os.environ.get("OUT", "."))
        (out / f"attention_model_{args.model}.json").write_text(json.dumps({"environment": environment(),
                                                                            "model": model}, indent=1))
        return
    import inspect

    from torch.nn.attention.varlen import varlen_attn
    print("varlen_attn", inspect.signature(varlen_attn))
    print(torch.ops.aten._flash_attention_forward.default._schema)
    kernel = kernel_check("cuda")
    print(f"{'step':<34} {'window':>6} {'tokens':>7} {'varlen err':>11} {'sdpa bf16 err':>13} {'varlen-sdpa':>11} "
          f"{'strided K/V':>11}")
    for row in kernel:
        print(f"{row['step']:<34} {row['window']:>6} {row['tokens']:>7} {row['varlen_max_abs']:>11.2e} "
              f"{row['sdpa_bf16_max_abs']:>13.2e} {row['varlen_vs_sdpa_max_abs']:>11.2e} "
              f"{row['strided_kv_max_abs']:>11.2e}")
    model = model_check(args.requests, args.new_tokens)
    print(json.dumps(model, indent=1))
    out = Path(os.environ.get("OUT", "."))
    (out / "attention.json").write_text(json.dumps({"environment": environment(), "kernel": kernel, "model": model},
                                                   indent=1))


if __name__ == "__main__":
    main()
