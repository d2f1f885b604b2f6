"""What differs between two runs' outputs: the quality probe's positions (mean log-likelihood difference and KL) and
the generated tokens of the requests both timed (exact match, first divergence, the log-probabilities of the shared
prefix); measure/quality.py judges them against the baseline's noise."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from benchd.protocol.probe import Probe, ProbeSequence

# ---- the probe ---------------------------------------------------------------------------------------------------


def kl_top(p_ids: Sequence[int], p_logprobs: Sequence[float | None], q_ids: Sequence[int],
           q_logprobs: Sequence[float | None]) -> float | None:
    """KL(p‖q) at one position, over p's likeliest tokens and the rest as one bin, each side known by its own
    likeliest (a token of p's not among q's takes q's least listed probability, an upper bound of its own): a
    lower-bound estimate of the full KL (merging bins never raises it) that two runs' stored probes can make. None
    where either side holds a value that is not finite."""
    p_known = [x for x in p_logprobs if x is not None]
    q_known = [x for x in q_logprobs if x is not None]
    if len(p_known) < len(p_logprobs) or len(q_known) < len(q_logprobs):
        return None
    q_of = dict(zip(q_ids, q_known))
    floor = math.exp(min(q_known)) if q_known else 0.0
    p = [math.exp(x) for x in p_known]
    q = [math.exp(q_of[i]) if i in q_of else floor for i in p_ids]
    p_rest, q_rest = max(0.0, 1.0 - sum(p)), max(0.0, 1.0 - sum(q))
    total = sum(pi * (math.log(pi) - math.log(max(qi, 1e-30))) for pi, qi in zip(p, q) if pi > 0)
    if p_rest > 1e-12:
        total += p_rest * (math.log(p_rest) - math.log(max(q_rest, 1e-30)))
    return max(0.0, total)


@dataclass(slots=True, frozen=True)
class Drift:
    """b against a over the positions both scored finite values at: mean log-probability difference (b − a), mean
    |difference|, mean KL(a‖b) where both have the likeliest tokens, the positions each mean is over, and those
    where b's values were not finite (where a's were: the baseline itself is broken there, and they are left out)."""

    logprob_diff: float | None
    logprob_abs: float | None
    kl: float | None
    positions: int
    kl_positions: int
    nonfinite: int = 0


def sequences_drift(a: Iterable[ProbeSequence], b: Iterable[ProbeSequence]) -> Drift | None:
    """Sequences paired by name (those of equal length); None when none pair."""
    theirs = {s.name: s for s in b}
    diff = absolute = kl = 0.0
    positions = kl_positions = nonfinite = paired = 0
    for ours in a:
        other = theirs.get(ours.name)
        if other is None or len(other.logprobs) != len(ours.logprobs):
            continue
        paired += 1
        for x, y in zip(ours.logprobs, other.logprobs):
            if y is None and x is not None:
                nonfinite += 1
            elif x is not None and y is not None:
                diff += y - x
                absolute += abs(y - x)
                positions += 1
        for pi, pl, qi, ql in zip(ours.top_ids, ours.top_logprobs, other.top_ids, other.top_logprobs):
            if (at := kl_top(pi, pl, qi, ql)) is not None:
                kl += at
                kl_positions += 1
    if not paired:
        return None
    return Drift(diff / positions if positions else None, absolute / positions if positions else None,
                 kl / kl_positions if kl_positions else None, positions, kl_positions, nonfinite)


def probe_drift(a: Probe | None, b: Probe | None) -> Drift | None:
    """b's probe against a's; None unless both scored the same probe set."""
    if a is None or b is None or a.set != b.set:
        return None
    return sequences_drift(a.sequences, b.sequences)


# ---- what was timed ----------------------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class Outputs:
    """One run's generated tokens by request index, and their log-probabilities where the engine gave them."""

    tokens: dict[int, list[int]] = field(default_factory=dict)
    logprobs: dict[int, list[float | None]] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class OutputsDrift:
    requests: int  # paired by index
    identical: int
    divergence: list[int]  # each differing request's first differing position (0: its first token)
    prefix_logprob_abs: float | None  # mean |Δ log-probability| over tokens before each first divergence
    prefix_tokens: int

    @property
    def exact_match(self) -> float | None:
        return self.identical / self.requests if self.requests else None


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first position where they differ (one ending first counts: it ended at EOS there); None: identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def outputs_drift(a: Outputs, b: Outputs) -> OutputsDrift | None:
    requests = identical = prefix = 0
    absolute = 0.0
    divergence = []
    for index, ours in a.tokens.items():
        theirs = b.tokens.get(index)
        if theirs is None:
            continue
        requests += 1
        first = first_divergence(ours, theirs)
        if first is None:
            identical += 1
        else:
            divergence.append(first)
        shared = len(ours) if first is None else first
        la, lb = a.logprobs.get(index, []), b.logprobs.get(index, [])
        pairs = [(x, y) for x, y in zip(la[:shared], lb[:shared])
                 if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)]
        absolute += sum(abs(x - y) for x, y in pairs)
        prefix += len(pairs)
    if not requests:
        return None
    return OutputsDrift(requests, identical, divergence, absolute / prefix if prefix else None, prefix)
