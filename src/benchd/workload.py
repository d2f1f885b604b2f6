"""Request contents: prompt token ids and output lengths, a pure function of the workload and seed."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from benchd.spec import FixedLength, ListLength, NormalLength, UniformLength, Workload


@dataclass(slots=True, frozen=True)
class RequestContent:
    prompt_ids: list[int]
    max_new_tokens: int


def sample_length(dist: FixedLength | UniformLength | NormalLength | ListLength, rng: random.Random) -> int:
    match dist:
        case FixedLength(value=value):
            return value
        case UniformLength(min=low, max=high):
            return rng.randint(low, high)
        case NormalLength(mean=mean, std=std, min=low, max=high):
            return min(high, max(low, round(rng.gauss(mean, std))))
        case ListLength(values=values):
            return rng.choice(values)
    raise TypeError(f"unknown length distribution {dist!r}")


def contents(workload: Workload, seed: int, vocab_size: int, avoid_ids: frozenset[int] = frozenset()) -> Iterator[RequestContent]:
    """Endless request contents. Token ids are uniform over the vocabulary, skipping special ids."""
    lengths = random.Random(f"benchd-lengths-{seed}")
    tokens = random.Random(f"benchd-tokens-{seed}")
    allowed = [i for i in range(vocab_size) if i not in avoid_ids]
    while True:
        prompt_len = sample_length(workload.prompt_tokens, lengths)
        output_len = sample_length(workload.output_tokens, lengths)
        yield RequestContent(prompt_ids=tokens.choices(allowed, k=prompt_len), max_new_tokens=output_len)
