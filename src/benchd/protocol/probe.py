"""What a run's stack made of the quality probe (engines/probe.py scores it in the worker, after the run's stages):
each fixed sequence scored teacher-forced, position by position, and the noise of scoring it again in another batch
arrangement. It crosses in the run's metadata (protocol/metadata.py); measure/quality.py reads it."""

from __future__ import annotations

from pydantic import BaseModel

from benchd.spec.fields import Documented

TOP_K = 8  # likeliest tokens kept at each scored position of an answer: the KL between two runs' probes reads them
VERSION = 1  # of the probe set and how it is scored (models/texts.py, engines/probe.py)


class ProbeSequence(BaseModel):
    """One sequence of the probe set, scored after its first position (or its prompt)."""

    name: str  # answer-0 … (an answer after its question, chat template and all), text (the reference text)
    logprobs: list[float | None]  # natural log of the probability of each scored token given those before it (None:
    # not finite, NaN or an infinity: the stack's arithmetic broke there)
    top_ids: list[list[int]] = []  # each scored position's likeliest tokens (TOP_K), likeliest first: answers only
    top_logprobs: list[list[float | None]] = []  # their log-probabilities


class Probe(Documented):
    """The probe set teacher-forced under the run's stack: its model, dtype, quantization and attention kernel (the
    unpaged form of continuous batching's paged one) in a plain forward pass."""

    set: str
    """The probe set: its version and the tokenizer's size (runs compare only probes of one set)."""
    attention: str | None
    """The attention implementation it ran (the unpaged form of the engine's)."""
    seconds: float
    """What it cost: wall time after the run's stages, outside every measured window."""
    tokens: int
    """Positions scored."""
    sequences: list[ProbeSequence]
    """Each sequence, scored alone (a batch of one)."""
    nonfinite: int = 0
    """Positions whose log-probability was not finite (NaN, an infinity): a stack that computes garbage."""
    perplexity: float | None
    """exp(−mean log-probability) of the reference text: reference-free, a broken kernel's shows with no baseline
    (null: not finite)."""
    answer_logprob: float | None
    """Mean log-probability a token of the written answers (null: not finite)."""
    noise_logprob: float
    """Mean |Δ log-probability| a token between scoring the first answers alone and in a batch of copies: the stack's
    own numerical noise (other kernels' tilings, reduction orders)."""
    noise_kl: float
    """Mean KL a token between those two arrangements, the same estimate a comparison makes (measure/quality.py)."""
