"""Request contents: prompts (token ids, or text for servers) and output lengths, a pure function of the workload
and seed."""

from __future__ import annotations

import random
from collections.abc import Iterator
import json
from dataclasses import dataclass
from pathlib import Path

from benchd.spec import FixedLength, ListLength, NormalLength, SpecError, TextDataset, UniformLength, Workload


@dataclass(slots=True, frozen=True)
class RequestContent:
    prompt_ids: list[int]
    max_new_tokens: int
    prompt_text: str | None = None  # for servers: the prompt as text
    text_tokens: int | None = None  # the text's length in the tokenizer's tokens, when a tokenizer is known

    @property
    def prompt_tokens(self) -> int:
        return (self.text_tokens or 0) if self.prompt_text is not None else len(self.prompt_ids)


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


# ---- text, for OpenAI-compatible servers -------------------------------------------------------


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as error:
        raise SpecError(f"openai.tokenizer: cannot load a tokenizer from {path!r}: {error}") from None


def sized_text(tokenizer, rng: random.Random, allowed: list[int], n: int) -> tuple[str, int]:
    """Text that the tokenizer encodes to exactly n tokens (without special tokens), made from random ids: decoding
    and re-encoding can merge or split tokens, so the ids are re-encoded, cut or topped up until it holds. Returns
    the text and its length (n, or the closest reached in a few rounds for a tokenizer that never settles)."""
    ids = rng.choices(allowed, k=n)
    best: tuple[str, int] | None = None
    # A fast tokenizer's Rust core directly: the wrapper costs ~4x more a call, and prompts are made while an open
    # loop runs (800 requests/s need ~0.3 of a core through the wrapper).
    backend = getattr(tokenizer, "backend_tokenizer", None)
    for _ in range(10):
        if backend is not None:
            text = backend.decode(ids, skip_special_tokens=True)
            encoded = backend.encode(text, add_special_tokens=False).ids
        else:
            text = tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
            encoded = tokenizer.encode(text, add_special_tokens=False)
        if best is None or abs(len(encoded) - n) < abs(best[1] - n):
            best = (text, len(encoded))
        if len(encoded) == n:
            return text, n
        ids = encoded[:n] if len(encoded) > n else encoded + rng.choices(allowed, k=n - len(encoded))
    return best


def clean_ids(tokenizer) -> list[int]:
    """Token ids that stand alone as text: not special, decoding to no partial character, and re-encoding to
    themselves. Prompts made of them reach an exact length in a round or two."""
    special = set(tokenizer.all_special_ids)
    clean = []
    for i in range(len(tokenizer)):
        if i in special:
            continue
        text = tokenizer.decode([i], clean_up_tokenization_spaces=False)
        if text and "\ufffd" not in text and tokenizer.encode(text, add_special_tokens=False) == [i]:
            clean.append(i)
    return clean or [i for i in range(len(tokenizer)) if i not in special]


def read_dataset(dataset: TextDataset) -> list[str]:
    """JSONL (one object per line with the prompt under `field`, or a bare string) or ShareGPT (a JSON list of
    conversations; the prompt is each conversation's first human turn)."""
    path = Path(dataset.path)
    try:
        text = path.read_text()
    except OSError as error:
        raise SpecError(f"workload.dataset.path: {path}: {error.strerror}") from None
    prompts: list[str] = []
    if dataset.format == "jsonl":
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                raise SpecError(f"workload.dataset.path: {path} line {number} is not JSON") from None
            prompt = item if isinstance(item, str) else item.get(dataset.field) if isinstance(item, dict) else None
            if not isinstance(prompt, str):
                raise SpecError(f"workload.dataset.field: {path} line {number} has no string {dataset.field!r}")
            prompts.append(prompt)
    else:
        try:
            conversations = json.loads(text)
        except json.JSONDecodeError:
            raise SpecError(f"workload.dataset.path: {path} is not a JSON list (ShareGPT format)") from None
        for item in conversations if isinstance(conversations, list) else []:
            turns = item.get("conversations", []) if isinstance(item, dict) else []
            human = next((t.get("value") for t in turns if isinstance(t, dict) and t.get("from") == "human"), None)
            if isinstance(human, str) and human:
                prompts.append(human)
    if not prompts:
        raise SpecError(f"workload.dataset.path: {path} holds no prompts")
    return prompts


def text_contents(workload: Workload, seed: int, tokenizer=None) -> Iterator[RequestContent]:
    """Endless text prompts: synthetic ones of exactly the sampled length in tokenizer tokens, or a dataset's,
    shuffled with the seed and each used once before any repeats."""
    lengths = random.Random(f"benchd-lengths-{seed}")
    tokens = random.Random(f"benchd-tokens-{seed}")
    if workload.dataset is not None:
        prompts = read_dataset(workload.dataset)
        while True:
            order = list(prompts)
            tokens.shuffle(order)
            for prompt in order:
                count = len(tokenizer.encode(prompt, add_special_tokens=False)) if tokenizer is not None else None
                yield RequestContent([], sample_length(workload.output_tokens, lengths), prompt, count)
    allowed = clean_ids(tokenizer)
    while True:
        prompt_len = sample_length(workload.prompt_tokens, lengths)
        output_len = sample_length(workload.output_tokens, lengths)
        text, count = sized_text(tokenizer, tokens, allowed, prompt_len)
        yield RequestContent([], output_len, text, count)
