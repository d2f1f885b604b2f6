"""Request contents: prompts (token ids, or text for servers) and output lengths, a pure function of the workload
and seed (and, for a trace, of its file). Prompts are composed of pieces: fresh random tokens (or, for real
requests, windows of real text), a group's shared prefix, a trace's hash-id blocks, and for a conversation its
earlier turns."""

from __future__ import annotations

import itertools
import random
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from benchd.models.texts import ChatText, encode
from benchd.spec import (
    FixedLength,
    ListLength,
    NormalLength,
    SpecError,
    TextDataset,
    Trace,
    UniformLength,
    Workload,
    length_upper_bound,
    traces,
)
from benchd.spec.documents import DocumentError, open_file, parse_json

SHARED_CACHE = 8192  # shared pieces (prefix groups, trace blocks) kept made; one not kept is made again, the same


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


# ---- composing prompts from pieces -----------------------------------------------------------------

Piece = TypeVar("Piece")


class Pieces(Generic[Piece]):
    """How prompts are made of one kind of piece (token ids, or text). fresh() draws from the workload's one token
    stream in request order; shared() is a pure function of (seed, source, key), so equal keys are equal tokens in
    every request that uses them."""

    def __init__(self, seed: int, make: Callable[[random.Random, int], Piece],
                 cut: Callable[[Piece, int], Piece]) -> None:
        self.seed, self.make, self.cut = seed, make, cut
        self.tokens = random.Random(f"benchd-tokens-{seed}")
        self._shared: OrderedDict[tuple[str, int], Piece] = OrderedDict()

    def fresh(self, n: int) -> Piece:
        return self.make(self.tokens, n)

    def shared(self, source: str, key: int, full: int, n: int) -> Piece:
        """The first n tokens of the piece `full` tokens long that (source, key) names."""
        piece = self._shared.get((source, key))
        if piece is None:
            piece = self.make(random.Random(f"benchd-{source}-{self.seed}-{key}"), full)
            self._shared[(source, key)] = piece
            if len(self._shared) > SHARED_CACHE:
                self._shared.popitem(last=False)
        else:
            self._shared.move_to_end((source, key))
        return piece if n >= full else self.cut(piece, n)


def compose(workload: Workload, seed: int, pieces: Pieces[Piece]) -> Iterator[tuple[list[Piece], int]]:
    """Each request's prompt pieces and output length, in request order: endless, or a trace's requests."""
    lengths = random.Random(f"benchd-lengths-{seed}")
    prefix = workload.prefix
    longest = length_upper_bound(workload.prompt_tokens)

    def prompt(n: int, index: int, full: int) -> list[Piece]:
        if prefix is None:
            return [pieces.fresh(n)]
        shared = min(n, round(prefix.fraction * n))
        made = [pieces.shared("prefix", index % prefix.groups, full, shared)] if shared else []
        return made + ([pieces.fresh(n - shared)] if n > shared else [])

    arrivals = workload.arrivals
    if isinstance(arrivals, Trace):
        for index, item in enumerate(traces.read(arrivals)):
            if item.hash_ids:
                yield _blocks(pieces, item, arrivals.block_tokens), item.output_tokens
            else:
                yield prompt(item.prompt_tokens, index, item.prompt_tokens), item.output_tokens
        return
    conversation = workload.conversation
    history: dict[int, list[Piece]] = {}
    for index in itertools.count():
        prompt_len = sample_length(workload.prompt_tokens, lengths)
        output_len = sample_length(workload.output_tokens, lengths)
        if conversation is None:
            yield prompt(prompt_len, index, longest), output_len
            continue
        # Request i is turn (i // C) mod T of conversation i mod C: C conversations interleaved, a new set after T.
        slot, turn = index % conversation.conversations, (index // conversation.conversations) % conversation.turns
        made = (prompt(prompt_len, index, longest) if turn == 0
                else [*history[slot], pieces.fresh(prompt_len)])
        history[slot] = [*made, pieces.fresh(output_len)]  # the answer's stand-in, of the answer's length
        yield made, output_len


def _blocks(pieces: Pieces[Piece], item: traces.TraceItem, block: int) -> list[Piece]:
    """A Mooncake request's prompt: block after block by hash id (the last one cut to the prompt's length)."""
    made, left = [], item.prompt_tokens
    for hash_id in item.hash_ids:
        if left <= 0:
            break
        made.append(pieces.shared("block", hash_id, block, min(block, left)))
        left -= block
    if left > 0:
        made.append(pieces.fresh(left))
    return made


def contents(workload: Workload, seed: int, vocab_size: int,
             avoid_ids: frozenset[int] = frozenset()) -> Iterator[RequestContent]:
    """Request contents as token ids, uniform over the vocabulary, skipping special ids."""
    allowed = [i for i in range(vocab_size) if i not in avoid_ids]
    pieces: Pieces[list[int]] = Pieces(seed, lambda rng, n: rng.choices(allowed, k=n), lambda ids, n: ids[:n])
    for made, output_len in compose(workload, seed, pieces):
        ids = made[0] if len(made) == 1 else [i for piece in made for i in piece]
        yield RequestContent(prompt_ids=ids, max_new_tokens=output_len)


def real_contents(workload: Workload, seed: int, chat: ChatText) -> Iterator[RequestContent]:
    """Real requests as token ids: each prompt composed as random ones are (a shared prefix's piece shared), its
    pieces windows of the bundled passages at seeded offsets, then rendered with the chat template around a bundled
    user turn (drawn with the seed) to exactly the sampled length (models/texts.py, ChatText.prompt)."""
    pieces: Pieces[list[int]] = Pieces(seed, lambda rng, n: chat.window(rng.randrange(len(chat.corpus)), n),
                                       lambda ids, n: ids[:n])
    turns = random.Random(f"benchd-turns-{seed}")
    for made, output_len in compose(workload, seed, pieces):
        body = made[0] if len(made) == 1 else [i for piece in made for i in piece]
        yield RequestContent(prompt_ids=chat.prompt(len(body), body, turns.randrange(len(chat.chats))),
                             max_new_tokens=output_len)


def real_text_contents(workload: Workload, seed: int, chat: ChatText) -> Iterator[RequestContent]:
    """Real requests as text for a server: each user turn composed and drawn as real_contents' are, without the
    chat template (a server renders its own), decoded; its length counted again in the tokenizer's tokens (decoding
    and encoding again can merge a token or two where the pieces meet)."""
    backend = getattr(chat.tokenizer, "backend_tokenizer", None)
    pieces: Pieces[list[int]] = Pieces(seed, lambda rng, n: chat.window(rng.randrange(len(chat.corpus)), n),
                                       lambda ids, n: ids[:n])
    turns = random.Random(f"benchd-turns-{seed}")
    for made, output_len in compose(workload, seed, pieces):
        body = made[0] if len(made) == 1 else [i for piece in made for i in piece]
        ids = chat.message(len(body), body, turns.randrange(len(chat.chats)))
        text = backend.decode(ids) if backend is not None else chat.tokenizer.decode(ids)
        yield RequestContent([], output_len, text, len(encode(chat.tokenizer, text)))


# ---- text, for OpenAI-compatible servers -------------------------------------------------------


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
    assert best is not None  # the first of the ten rounds set it
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
        with open_file(path) as handle:  # a regular file only: a FIFO would hold the worker
            text = handle.read().decode()
    except OSError as error:
        raise SpecError(f"workload.dataset.path: {path}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise SpecError(f"workload.dataset.path: {path} is not UTF-8 ({error.reason} at byte {error.start})") from None
    prompts: list[str] = []
    if dataset.format == "jsonl":
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = parse_json(line, nodes_max=None)
            except DocumentError as error:
                raise SpecError(f"workload.dataset.path: {path} line {number} is not JSON ({error})") from None
            prompt = item if isinstance(item, str) else item.get(dataset.field) if isinstance(item, dict) else None
            if not isinstance(prompt, str):
                raise SpecError(f"workload.dataset.field: {path} line {number} has no string {dataset.field!r}")
            prompts.append(prompt)
    else:
        try:
            conversations = parse_json(text, nodes_max=None)
        except DocumentError as error:
            raise SpecError(f"workload.dataset.path: {path} is not a JSON list (ShareGPT format): {error}") from None
        for item in conversations if isinstance(conversations, list) else []:
            turns = item.get("conversations", []) if isinstance(item, dict) else []
            human = next((t.get("value") for t in turns if isinstance(t, dict) and t.get("from") == "human"), None)
            if isinstance(human, str) and human:
                prompts.append(human)
    if not prompts:
        raise SpecError(f"workload.dataset.path: {path} holds no prompts")
    return prompts


def token_counts(tokenizer, texts: list[str]) -> list[int]:
    """Each text's length in tokens (no special tokens), a fast tokenizer's batch in one call."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return [len(e.ids) for e in backend.encode_batch(texts, add_special_tokens=False)]
    return [len(encode(tokenizer, text)) for text in texts]


def text_contents(workload: Workload, seed: int, tokenizer=None) -> Iterator[RequestContent]:
    """Text prompts: synthetic ones of exactly the sampled length in tokenizer tokens (composed pieces: counted again
    as a whole, since pieces can merge where they meet), or a dataset's, shuffled with the seed and each used once
    before any repeats."""
    if workload.dataset is not None:
        lengths = random.Random(f"benchd-lengths-{seed}")
        tokens = random.Random(f"benchd-tokens-{seed}")
        prompts = read_dataset(workload.dataset)
        # Counted once, all together, before the stage's first request (the runner draws it ahead of the stage's
        # start): one encode a request on the dispatching thread cost ~200 µs, most of a client core at 4,500/s.
        counts = token_counts(tokenizer, prompts) if tokenizer is not None else [None] * len(prompts)
        while True:
            order = list(range(len(prompts)))
            tokens.shuffle(order)
            for i in order:
                yield RequestContent([], sample_length(workload.output_tokens, lengths), prompts[i], counts[i])
    allowed = clean_ids(tokenizer)
    backend = getattr(tokenizer, "backend_tokenizer", None)

    def cut(piece: tuple[str, int], n: int) -> tuple[str, int]:
        # A prefix of the text: the decoded first n tokens of its encoding, so shorter cuts prefix longer ones.
        ids = encode(tokenizer, piece[0])
        text = backend.decode(ids[:n]) if backend is not None else tokenizer.decode(ids[:n])
        return text, n

    pieces: Pieces[tuple[str, int]] = Pieces(seed, lambda rng, n: sized_text(tokenizer, rng, allowed, n), cut)
    for made, output_len in compose(workload, seed, pieces):
        if len(made) == 1:
            text, n = made[0]
        else:
            text = "".join(piece[0] for piece in made)
            n = len(encode(tokenizer, text))
        yield RequestContent([], output_len, text, n)
