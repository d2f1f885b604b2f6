"""A model's tokenizer, loaded from a local directory: it sizes synthetic prompts and counts tokens in text."""

from __future__ import annotations

from benchd.spec import SpecError


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as error:
        raise SpecError(f"openai.tokenizer: cannot load a tokenizer from {path!r}: {error}") from None
