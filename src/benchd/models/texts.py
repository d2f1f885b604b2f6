"""Real text for a real model: the bundled user turns and passages (models/data/texts.json) that real requests are
made of, a request rendered with the model's chat template to an exact length in tokens, and the quality probe's
sequences (a prompt and the text scored after it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

from benchd.models.presets import real
from benchd.spec import GenerateSpec

MARK = "\u2063benchd-message\u2063"  # stands for the user's message while the chat template is rendered
SEPARATOR = "\n\n"  # between a request's passage and its question


@dataclass(frozen=True, slots=True)
class Bundle:
    chats: tuple[str, ...]  # user turns: questions and instructions
    passages: tuple[str, ...]  # text a long prompt carries before its question
    answers: tuple[tuple[str, str], ...]  # the probe's (question, answer written for it)
    text: str  # the probe's reference-free text (its perplexity)


@cache
def bundle() -> Bundle:
    data = json.loads(resources.files("benchd.models").joinpath("data/texts.json").read_text(encoding="utf-8"))
    probe = data["probe"]
    return Bundle(tuple(data["chats"]), tuple(data["passages"]), tuple(tuple(a) for a in probe["answers"]),
                  probe["text"])


def encode(tokenizer, text: str) -> list[int]:
    """The text's ids, no special tokens added (a chat template writes its own): through a fast tokenizer's backend
    when it has one (less Python a call)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return (backend.encode(text, add_special_tokens=False).ids if backend is not None
            else tokenizer.encode(text, add_special_tokens=False))


def has_chat_template(tokenizer) -> bool:
    return tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))


class ChatText:
    """One tokenizer's view of the bundle, encoded once: the chat template around a user message (its head and tail
    in tokens), the passages as one stream of tokens, each user turn's tokens."""

    def __init__(self, tokenizer) -> None:
        if not has_chat_template(tokenizer):
            raise ValueError("real requests need a tokenizer with a chat template")
        self.tokenizer = tokenizer
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": MARK}], add_generation_prompt=True,
                                                 tokenize=False)
        head, tail = rendered.split(MARK)
        self.head, self.tail = encode(tokenizer, head), encode(tokenizer, tail)
        self.separator = encode(tokenizer, SEPARATOR)
        texts = bundle()
        self.corpus = encode(tokenizer, SEPARATOR.join(texts.passages) + SEPARATOR)
        self.chats = [encode(tokenizer, chat) for chat in texts.chats]

    def window(self, start: int, n: int) -> list[int]:
        """n tokens of the passages' stream from start on, wrapping around its end."""
        corpus = self.corpus
        out: list[int] = []
        start %= len(corpus)
        while len(out) < n:
            out.extend(corpus[start:start + n - len(out)])
            start = 0
        return out

    def prompt(self, n: int, body: list[int], chat: int) -> list[int]:
        """A chat prompt of exactly n tokens: the template's head, the body (passages, a shared prefix first) cut to
        what is left and a blank line, the user turn, the template's tail (the assistant's turn begins). Too short
        for the whole turn: the turn loses its first tokens; shorter than the template itself: its last n tokens."""
        question = self.chats[chat % len(self.chats)]
        room = n - len(self.head) - len(self.tail)
        if room <= 0:
            return [*self.head, *question, *self.tail][-n:]
        if room < len(question):
            return [*self.head, *question[-room:], *self.tail]
        return [*self.head, *self._filler(body, room - len(question)), *question, *self.tail]

    def message(self, n: int, body: list[int], chat: int) -> list[int]:
        """A user turn of n tokens without the template (a server's chat API renders it): the body cut to what the
        turn leaves, a blank line, the turn; too short for the whole turn, its last n tokens."""
        question = self.chats[chat % len(self.chats)]
        if n <= len(question):
            return question[-n:]
        return [*self._filler(body, n - len(question)), *question]

    def _filler(self, body: list[int], pad: int) -> list[int]:
        """pad tokens before the turn: the body's first tokens and a blank line (too little room: the blank line's
        tokens alone, so that no word runs into the turn)."""
        if pad <= len(self.separator):
            return self.separator[:pad]
        return [*body[:pad - len(self.separator)], *self.separator]

    def chat_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """A conversation rendered with the template, the assistant's turn begun: what a server's chat API counts."""
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return encode(self.tokenizer, text)


def probe_sequences(tokenizer) -> list[tuple[str, list[int], int]]:
    """The probe set as (name, ids, first scored position): each answer as the assistant's turn after its question,
    the whole conversation rendered with the chat template (the answer and its turn's end are scored), and the
    reference text on its own (all of it but its first token)."""
    chat = ChatText(tokenizer)
    out = []
    for index, (question, answer) in enumerate(bundle().answers):
        prompt = [*chat.head, *encode(tokenizer, question), *chat.tail]
        whole = encode(tokenizer, tokenizer.apply_chat_template(
            [{"role": "user", "content": question}, {"role": "assistant", "content": answer}], tokenize=False))
        if whole[:len(prompt)] != prompt:  # a template that renders an answered turn otherwise: the answer appended
            whole = [*prompt, *encode(tokenizer, answer)]
        out.append((f"answer-{index}", whole, len(prompt)))
    out.append(("text", encode(tokenizer, bundle().text), 1))
    return out


def real_requests(spec: GenerateSpec) -> bool:
    """Whether the run sends real requests (workload.prompts; auto: a real preset loaded in-process)."""
    prompts = spec.workload.prompts
    return prompts == "real" or (prompts == "auto" and spec.engine_record.loads_model and real(spec.model) is not None)


def resolved(spec: GenerateSpec) -> GenerateSpec:
    """The spec with what it left to the model decided: real requests or random ids, and from that whether EOS ends
    a request and whether log-probabilities are kept and the probe scored (each unless the spec says)."""
    sent_real = real_requests(spec)
    workload = spec.workload.model_copy(update={
        "prompts": "real" if sent_real else "random",
        "ignore_eos": (not sent_real) if spec.workload.ignore_eos is None else spec.workload.ignore_eos})
    # A server's tokens' log-probabilities are not asked for (not every server answers them), nor can a server's stack
    # be probed: both are for a model loaded here.
    scored = sent_real and spec.engine_record.loads_model
    quality = spec.quality.model_copy(update={name: scored for name in ("logprobs", "probe")
                                              if getattr(spec.quality, name) is None})
    return spec.model_copy(update={"workload": workload, "quality": quality})
