"""Tokens per stream chunk when the server did not say: from the request's whole text, once, in linear time."""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate


def chunk_counts(texts: list[str], exact: list[int | None], total: int | None, tokenizer=None) -> list[int]:
    """Each chunk's tokens: the server's count where it gave one, else the text's (the tokenizer's, or characters
    as weights), scaled so that they add up to total (the final usage count, less what was delivered live), at
    least one each. Without a total and a tokenizer every content chunk holds one token."""
    if total is not None and total == len(texts):
        return [1] * total  # a token a chunk, whatever the text: the common case needs no tokenizer
    if all(e is not None for e in exact):
        estimates = exact
    elif tokenizer is not None:
        estimates = [e if e is not None else n for e, n in zip(exact, text_counts(tokenizer, texts))]
    elif total is None:
        return [e or 1 for e in exact]
    else:
        estimates = [e if e is not None else len(t) for e, t in zip(exact, texts)]  # weights only
    if total is None or total < len(texts):
        return [max(1, e) for e in estimates]  # no total to honour: every content chunk holds a token
    return apportion(estimates, total)


def text_counts(tokenizer, texts: list[str]) -> list[int]:
    """Tokens completed by each chunk: the whole text encoded once, each token counted in the chunk where its last
    character arrived. A tokenizer without offsets (a slow one) encodes each chunk on its own."""
    whole = "".join(texts)
    backend = getattr(tokenizer, "backend_tokenizer", None)  # a fast tokenizer's Rust core: no wrapper per call
    if backend is None:
        return [len(tokenizer.encode(text, add_special_tokens=False)) for text in texts]
    ends = sorted(end for _, end in backend.encode(whole, add_special_tokens=False).offsets)
    counts, seen = [], 0
    for boundary in accumulate(len(text) for text in texts):
        upto = bisect_right(ends, boundary)
        counts.append(upto - seen)
        seen = upto
    counts[-1] += len(ends) - seen  # offsets past the text (none in practice): the last chunk
    return counts


def apportion(weights: list[int], total: int) -> list[int]:
    """total split over the chunks, each at least 1, the rest in proportion to weight − 1 (largest remainder)."""
    counts = [1] * len(weights)
    rest = total - len(weights)
    extra = [max(w - 1, 0) for w in weights]
    if rest <= 0:
        return counts
    if not sum(extra):
        extra = [1] * len(weights)
    shares = [rest * e / sum(extra) for e in extra]
    floors = [int(s) for s in shares]
    left = rest - sum(floors)
    for i in sorted(range(len(shares)), key=lambda i: shares[i] - floors[i], reverse=True)[:left]:
        floors[i] += 1
    return [c + f for c, f in zip(counts, floors)]
