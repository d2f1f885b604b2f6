"""Quality beside speed: what a run generated, set against a baseline's on the same requests (exact match, where the
first divergence falls, the log-probabilities of the shared prefix) and the quality probe teacher-forced under each
stack (mean per-token log-likelihood difference and KL), and a verdict that weighs the drift against the noise
measured between repeats of the baseline itself (docs/figures.md, quality)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from benchd.measure.drift import Outputs, outputs_drift, probe_drift
from benchd.protocol.probe import Probe
from benchd.spec.fields import Documented

# A drift is called different when it exceeds NOISE_FACTOR × the noise measured between the baseline's repeats and
# its own probe arrangements, and the floor below which no stack is called different (a stack whose noise measures
# zero, float32 on a CPU, would otherwise flag every other float32 kernel's last-bit differences). Chosen on the
# real model: float32 sdpa against eager moves the probe by KL ~1e-9 a token, bfloat16 against float32 by ~1e-3
# (docs/benchmarks/quality.md), a wrong attention scale by > 0.1.
NOISE_FACTOR = 4.0
KL_FLOOR = 2e-3  # nats a token
LOGPROB_FLOOR = 0.02  # nats a token, |mean Δ log-likelihood|
# Without a probe (a server's engine), the outputs alone: different when the share of identical requests falls this
# far below the lowest share between the baseline's repeats.
EXACT_MATCH_MARGIN = 0.25

QualityVerdict = Literal["same", "different", "unknown"]


# ---- one run ----------------------------------------------------------------------------------------------------


class QualitySummary(Documented):
    """What a run generated, as measured (its first stage's measured, successful requests), and its probe's figures
    (protocol/probe.py) without the probe's positions."""

    prompts: str | None
    """real (bundled texts and user turns through the chat template) or random (token ids)."""
    requests: int
    """Requests whose outputs are summarized."""
    output_tokens_mean: float | None
    """Mean generated tokens a request."""
    ended_at_eos: int
    """Requests that ended before their output_tokens cap (the model's EOS: ignore_eos false)."""
    eos_share: float | None
    """ended_at_eos / requests."""
    logprob_mean: float | None
    """Mean log-probability of a generated token, where the engine gave them."""
    perplexity: float | None = None
    """The probe: the reference text's perplexity under the run's stack."""
    answer_logprob: float | None = None
    """The probe: mean log-probability a token of the written answers."""
    probe_noise_kl: float | None = None
    """The probe's KL between its two batch arrangements (the stack's own noise)."""
    probe_s: float | None = None
    """What the probe cost after the run (s)."""
    probe_tokens: int | None = None
    """Positions the probe scored."""
    probe_error: str | None = None
    """Why the probe could not be scored, where it failed (the run's figures stand)."""

    @classmethod
    def of(cls, records: Iterable, prompts: str | None, probe: Probe | None,
           probe_error: str | None = None) -> QualitySummary:
        good = [r for r in records if not r.warmup and r.ok]
        ended = sum(r.output_tokens < r.max_new_tokens for r in good)
        logprobs = [x for r in good for x in r.logprobs if x is not None and math.isfinite(x)]
        return cls(prompts=prompts, requests=len(good),
                   output_tokens_mean=float(np.mean([r.output_tokens for r in good])) if good else None,
                   ended_at_eos=ended, eos_share=ended / len(good) if good else None,
                   logprob_mean=float(np.mean(logprobs)) if logprobs else None, probe_error=probe_error,
                   **({} if probe is None else {
                       "perplexity": probe.perplexity, "answer_logprob": probe.answer_logprob,
                       "probe_noise_kl": probe.noise_kl, "probe_s": probe.seconds, "probe_tokens": probe.tokens}))


# ---- a variant against the baseline ------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class RunQuality:
    """What a comparison needs of one run: its outputs (first stage, measured, successful) and its probe."""

    run_id: str
    outputs: Outputs
    probe: Probe | None


def run_quality(run_id: str, records: Iterable, probe: Probe | None) -> RunQuality:
    """A run's first stage's records (its measured, successful requests' tokens and log-probabilities) and probe."""
    good = [r for r in records if not r.warmup and r.ok]
    return RunQuality(run_id, Outputs({r.index: list(r.token_ids) for r in good if r.token_ids},
                                      {r.index: list(r.logprobs) for r in good if r.logprobs}), probe)


class QualityNoise(Documented):
    """How far the baseline drifts from itself: between its repeats (run against run, as a variant is compared) and
    within each of its runs (the probe scored alone and in a batch of copies)."""

    pairs: int
    """Pairs of the baseline's runs compared."""
    exact_match: float | None
    """The lowest share of identical requests between two of its runs."""
    kl: float | None
    """The largest mean KL a token, between its runs' probes or its probe's arrangements."""
    logprob: float | None
    """The largest mean |Δ log-likelihood| a token, likewise."""


class QualityComparison(Documented):
    """A variant's outputs and probe against the baseline's, its repeats paired by round, and the verdict."""

    requests: int
    """Requests paired by index over its rounds."""
    identical_requests: int
    """Those whose every generated token is the baseline's."""
    exact_match: float | None
    """identical_requests / requests."""
    first_divergence_p50: float | None
    """Median position (0: the first generated token) of the first token that differs, over the requests that
    differ."""
    prefix_logprob_abs: float | None
    """Mean |Δ log-probability| of the tokens before each first divergence (same context on both sides: the timed
    requests teacher-forced for free), where both engines gave log-probabilities."""
    logprob_diff: float | None
    """The probe: mean per-token log-likelihood of the fixed texts, variant − baseline (nats; negative: less likely
    under the variant)."""
    kl: float | None
    """The probe: mean KL(baseline‖variant) a token over the answers' positions (nats)."""
    perplexity: float | None
    """The variant's perplexity of the reference text."""
    baseline_perplexity: float | None
    """The baseline's."""
    nonfinite: int = 0
    """The variant's probe positions whose log-probability was not finite (NaN, an infinity) where the baseline's
    was: a stack whose arithmetic broke (float16 overflowing), different whatever the rest says."""
    noise: QualityNoise
    """The baseline's own drift, which the variant's must exceed."""
    verdict: QualityVerdict
    """same, different (beyond the noise), or unknown (nothing to judge by)."""
    reason: str
    """What the verdict rests on."""


def _noise(baseline: list[RunQuality]) -> QualityNoise:
    matches, kls, logprobs = [], [], []
    pairs = 0
    for i, a in enumerate(baseline):
        if a.probe is not None:
            kls.append(a.probe.noise_kl)
            logprobs.append(a.probe.noise_logprob)
        for b in baseline[i + 1:]:
            pairs += 1
            if (outputs := outputs_drift(a.outputs, b.outputs)) is not None:
                matches.append(outputs.exact_match)
            if (drift := probe_drift(a.probe, b.probe)) is not None:
                if drift.logprob_diff is not None:
                    logprobs.append(abs(drift.logprob_diff))
                if drift.kl is not None:
                    kls.append(drift.kl)
    return QualityNoise(pairs=pairs, exact_match=min(matches) if matches else None, kl=max(kls) if kls else None,
                        logprob=max(logprobs) if logprobs else None)


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def compare_quality(baseline: Sequence[RunQuality | None], variant: Sequence[RunQuality | None]) -> QualityComparison:
    """Runs paired by round (a variant's round r against the baseline's); the noise from every pair of the
    baseline's runs. Outputs compared by request index."""
    base = [r for r in baseline if r is not None]
    noise = _noise(base)
    requests = identical = 0
    divergence: list[int] = []
    prefix_abs, prefix_n = 0.0, 0
    diffs, kls, perplexities = [], [], []
    nonfinite = 0
    for a, b in zip(baseline, variant):
        if a is None or b is None:
            continue
        if (outputs := outputs_drift(a.outputs, b.outputs)) is not None:
            requests += outputs.requests
            identical += outputs.identical
            divergence += outputs.divergence
            if outputs.prefix_logprob_abs is not None:
                prefix_abs += outputs.prefix_logprob_abs * outputs.prefix_tokens
                prefix_n += outputs.prefix_tokens
        if (drift := probe_drift(a.probe, b.probe)) is not None:
            diffs.append(drift.logprob_diff)
            nonfinite += drift.nonfinite
            if drift.kl is not None:
                kls.append(drift.kl)
        if b.probe is not None:
            perplexities.append(b.probe.perplexity)
    exact = identical / requests if requests else None
    kl, diff = _mean(kls), _mean(diffs)
    verdict, reason = judge(exact, kl, diff, noise, nonfinite)
    return QualityComparison(
        requests=requests, identical_requests=identical, exact_match=exact,
        first_divergence_p50=float(np.median(divergence)) if divergence else None,
        prefix_logprob_abs=prefix_abs / prefix_n if prefix_n else None, logprob_diff=diff, kl=kl,
        perplexity=_mean(perplexities),
        baseline_perplexity=_mean([r.probe.perplexity for r in base if r.probe is not None]), nonfinite=nonfinite,
        noise=noise, verdict=verdict, reason=reason)


def judge(exact: float | None, kl: float | None, diff: float | None, noise: QualityNoise,
          nonfinite: int = 0) -> tuple[QualityVerdict, str]:
    """The probe decides where both sides have one: different when the variant's log-probabilities are not finite
    where the baseline's are, or when its KL or its log-likelihood difference exceeds NOISE_FACTOR × the baseline's
    noise and the floor; else the outputs against the baseline's repeats."""
    if nonfinite:
        return "different", (f"the probe's log-probabilities are not finite (NaN or infinite) at {nonfinite} "
                             "positions where the baseline's are: the stack's arithmetic broke")
    if kl is not None or diff is not None:
        kl_bound = max(NOISE_FACTOR * (noise.kl or 0.0), KL_FLOOR)
        diff_bound = max(NOISE_FACTOR * (noise.logprob or 0.0), LOGPROB_FLOOR)
        beyond = []
        if kl is not None and kl > kl_bound:
            beyond.append(f"probe KL {kl:.2g} > {kl_bound:.2g} a token")
        if diff is not None and abs(diff) > diff_bound:
            beyond.append(f"probe log-likelihood {diff:+.3g} beyond ±{diff_bound:.2g} a token")
        if beyond:
            return "different", "; ".join(beyond)
        return "same", f"probe within its noise (KL ≤ {kl_bound:.2g}, |Δ log-likelihood| ≤ {diff_bound:.2g} a token)"
    if exact is None:
        return "unknown", "no outputs paired with the baseline's, and no probe"
    if noise.exact_match is None:
        return "unknown", (f"no probe, and no repeats of the baseline to measure its outputs' noise against "
                           f"(exact match {exact:.0%})")
    if exact < noise.exact_match - EXACT_MATCH_MARGIN:
        return "different", (f"exact match {exact:.0%}, below the baseline's own {noise.exact_match:.0%} by more than "
                             f"{EXACT_MATCH_MARGIN:.0%}")
    return "same", f"exact match {exact:.0%} against the baseline's own {noise.exact_match:.0%} (no probe)"
