"""The quality probe, scored under a loaded model's stack after a run's stages: each fixed sequence of the probe set
(models/texts.py) teacher-forced in a plain forward pass with the model's weights, dtype, quantization and the
unpaged form of the engine's attention (torch's varlen kernel through a small adapter), and scored again in a batch
of copies to measure the stack's own noise."""

from __future__ import annotations

import hashlib
import math
import time

import torch
from transformers import AttentionInterface

from benchd.engines import varlen
from benchd.measure.drift import sequences_drift
from benchd.models.loading import LoadedModel
from benchd.models.texts import has_chat_template, probe_sequences
from benchd.protocol.probe import TOP_K, VERSION, Probe, ProbeSequence
from benchd.spec.stack import base_attention

# The noise's arrangement: the first NOISE_ANSWERS answers again, each in a batch of COPIES copies (other matrix
# shapes, no padding). Two of them keep the probe's cost at about 950 token-forwards (6 s of a busy CPU core for the
# real preset, milliseconds on a GPU).
COPIES = 2
NOISE_ANSWERS = 2
UNPAGED_VARLEN = f"benchd_{varlen.VARLEN}"


def varlen_unpaged(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                   **kwargs) -> tuple[torch.Tensor, None]:
    """torch's varlen kernel (engines/varlen.py, the one paged|torch_varlen calls) on a plain forward's batch of rows
    of one length, no padding (the probe's): query [B, H, T, D], key and value [B, Hkv, T, D] → [B, T, H, D]."""
    batch, heads, length, dim = query.shape

    def packed(x: torch.Tensor) -> torch.Tensor:  # [B, h, T, D] → [B·T, h, D]
        return x.transpose(1, 2).reshape(batch * length, x.shape[1], dim).contiguous()

    starts = torch.arange(0, (batch + 1) * length, length, dtype=torch.int32, device=query.device)
    window = getattr(module, "sliding_window", None)
    out = varlen.KERNEL[varlen.VARLEN](packed(query), packed(key), packed(value), starts, starts, length, length,
                                       scaling if scaling is not None else module.scaling,
                                       window - 1 if window else -1)
    return out.reshape(batch, length, heads, dim), None


def unpaged(implementation: str) -> str:
    """The plain forward's form of an attention implementation (continuous batching's paged|x is x, torch's varlen
    kernel through the adapter above); one that only runs paged (a kernel that reads the paged cache in place) has
    none, and the probe runs sdpa: its figures then speak for the weights, dtype and quantization, and the outputs'
    exact match and first divergence for the kernel."""
    base = base_attention(implementation)
    if base == varlen.VARLEN:
        varlen.register()
        AttentionInterface.register(UNPAGED_VARLEN, varlen_unpaged)
        return UNPAGED_VARLEN
    return base if base == "eager" or base in AttentionInterface().valid_keys() else "sdpa"


def _scores(model: torch.nn.Module, ids: list[int], copies: int = 1) -> torch.Tensor:
    """Log-probabilities [T − 1, V] (float32) of each next token, from the first row of a batch of copies."""
    device = next(model.parameters()).device
    batch = torch.tensor([ids] * copies, dtype=torch.long, device=device)
    logits = model(input_ids=batch).logits[0, :-1].float()
    return torch.log_softmax(logits, dim=-1)


def finite(x: float) -> float | None:
    """A log-probability as stored: rounded, and None where the stack's arithmetic gave NaN or an infinity (float16
    overflowing, say), which JSON cannot hold and every comparison counts apart."""
    return round(x, 5) if math.isfinite(x) else None


def _sequence(name: str, scores: torch.Tensor, ids: list[int], first: int, top: bool) -> ProbeSequence:
    targets = torch.tensor(ids[first:], device=scores.device)
    rows = scores[first - 1:]  # the row before each scored token predicts it
    picked = rows.gather(1, targets[:, None])[:, 0]
    out = ProbeSequence(name=name, logprobs=[finite(x) for x in picked.tolist()])
    if top:
        values, indices = rows.topk(TOP_K, dim=-1)
        out.top_ids = indices.tolist()
        out.top_logprobs = [[finite(x) for x in row] for row in values.tolist()]
    return out


def _mean(values: list[float | None]) -> float | None:
    """Of finite values only; None when any is not finite (a broken stack has no such figure)."""
    known = [v for v in values if v is not None]
    return None if not values or len(known) < len(values) else sum(known) / len(values)


@torch.inference_mode()
def score(loaded: LoadedModel, attention: str | None) -> Probe | None:
    """The probe under the loaded model with the engine's attention (None: the model's own); None for a model
    without a tokenizer that has a chat template (random weights)."""
    tokenizer = loaded.tokenizer
    if not has_chat_template(tokenizer):
        return None
    begun = time.perf_counter()
    sequences = probe_sequences(tokenizer)
    model = loaded.model
    before = model.config._attn_implementation
    implementation = unpaged(attention or before)
    if implementation != before:
        model.set_attn_implementation(implementation)
    try:
        alone = [_sequence(name, _scores(model, ids), ids, first, name != "text") for name, ids, first in sequences]
        copies = [_sequence(name, _scores(model, ids, COPIES), ids, first, True)
                  for name, ids, first in sequences[:NOISE_ANSWERS]]
    finally:
        if implementation != before:
            model.set_attn_implementation(before)
    if loaded.device.type == "cuda":
        torch.cuda.synchronize(loaded.device)
    noise = sequences_drift(alone[:NOISE_ANSWERS], copies)
    text = _mean(next(s for s in alone if s.name == "text").logprobs)
    digest = hashlib.sha1(repr([ids for _, ids, _ in sequences]).encode()).hexdigest()[:12]
    return Probe(set=f"v{VERSION}-{digest}", attention=implementation, seconds=time.perf_counter() - begun,
                 tokens=sum(len(s.logprobs) for s in alone), sequences=alone,
                 nonfinite=sum(x is None for s in alone for x in s.logprobs),
                 perplexity=None if text is None else math.exp(-text),
                 answer_logprob=_mean([x for s in alone if s.name != "text" for x in s.logprobs]),
                 noise_logprob=noise.logprob_abs if noise else 0.0, noise_kl=(noise.kl or 0.0) if noise else 0.0)
