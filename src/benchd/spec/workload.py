"""What a generation run sends: its arrivals, stop and warm-up, the lengths of prompts and outputs, and where prompts
come from."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from benchd.spec.fields import (
    LIST_MAX,
    NAME_MAX,
    PATH_MAX,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
)
from benchd.spec.fields import Strict as _Strict
from benchd.spec.profiles import ArrivalProfile, Arrivals, Capacity, Sweep, Synchronous, Trace
from benchd.spec.slo import SLO
from benchd.spec.validity import ValidityRules

# ---- length distributions (token counts) ------------------------------------------------------


class FixedLength(_Strict):
    dist: Literal["fixed"]
    """Every request the same length."""
    value: PositiveInt
    """Tokens."""


class UniformLength(_Strict):
    dist: Literal["uniform"]
    """Uniform between min and max, both included."""
    min: PositiveInt
    """Fewest tokens."""
    max: PositiveInt
    """Most tokens."""

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self


class NormalLength(_Strict):
    """A normal distribution rounded to integers and clipped to [min, max]."""

    dist: Literal["normal"]
    """Normal, rounded and clipped to [min, max]."""
    mean: PositiveFloat
    """Mean tokens."""
    std: NonNegativeFloat
    """Standard deviation, in tokens."""
    min: PositiveInt = 1
    """Fewest tokens."""
    max: PositiveInt
    """Most tokens."""

    @model_validator(mode="after")
    def _ordered(self) -> NormalLength:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        if not self.min <= self.mean <= self.max:
            raise ValueError(f"mean ({self.mean}) must lie within [min, max] = [{self.min}, {self.max}]")
        return self


class ListLength(_Strict):
    """Lengths drawn uniformly at random from a list."""

    dist: Literal["list"]
    """Drawn from the list, each value equally likely."""
    values: Annotated[list[PositiveInt], Field(min_length=1, max_length=LIST_MAX)]
    """Lengths in tokens."""


LengthDist = Annotated[
    FixedLength | UniformLength | NormalLength | ListLength, Field(discriminator="dist")
]


def length_upper_bound(dist: FixedLength | UniformLength | NormalLength | ListLength) -> int:
    match dist:
        case FixedLength():
            return dist.value
        case ListLength():
            return max(dist.values)
        case _:
            return dist.max


# ---- workload ----------------------------------------------------------------------------------


# A stage's drain, unless stop.drain_s says: DRAIN_SHARE of its sending time, at least DRAIN_MIN_S. A healthy stage's
# last requests end within about one request's length, which a stage several requests long dwarfs; the floor is for
# stages shorter than their longest requests (docs/figures.md, warm-up and the measured window).
DRAIN_MIN_S = 30.0
DRAIN_SHARE = 0.5
# Once a stage cuts (or aborts) its requests, each engine's end of them is waited for this long: it brings the tokens
# produced up to the cancel (an openai client's last chunks, transformers' since its last poll).
CANCEL_GRACE_S = 2.0


class Stop(_Strict):
    """When a stage stops sending: after this many measured requests and/or this many measured seconds. It then waits
    for the requests in flight at most drain_s (unset: DRAIN_SHARE of its sending time, at least DRAIN_MIN_S; 0: not
    at all); those still in flight then are cut (cancelled, and counted apart from the failed ones)."""

    requests: PositiveInt | None = None
    """The stage stops sending after this many measured requests."""
    duration_s: PositiveFloat | None = None
    """Or after this many measured seconds (whichever comes first)."""
    drain_s: NonNegativeFloat | None = None
    """How long the stage waits for its requests in flight once it stops sending; those still in flight then are cut
    (cancelled, counted apart from the failed ones). Unset: a share of its sending time; 0: not at all."""

    @model_validator(mode="after")
    def _bounded(self) -> Stop:
        if self.requests is None and self.duration_s is None:
            raise ValueError("set requests, duration_s or both: a run must end")
        return self

    def drain_for(self, sending_s: float) -> float:
        """The longest the stage waits for its requests in flight once it has sent for sending_s (its start to its
        stop, warm-up included)."""
        return self.drain_s if self.drain_s is not None else max(DRAIN_MIN_S, DRAIN_SHARE * sending_s)


class Warmup(_Strict):
    """Requests run before measuring, cut by their scheduled time; they never enter any figure."""

    requests: NonNegativeInt = 0
    """Requests run before measuring."""
    seconds: NonNegativeFloat = 0.0
    """Or seconds of requests run before measuring (by their scheduled time)."""

    @model_validator(mode="after")
    def _one_kind(self) -> Warmup:
        if self.requests and self.seconds:
            raise ValueError("give warm-up as requests or as seconds, not both")
        return self


class SharedPrefix(_Strict):
    """The first fraction of each prompt is the same token ids as every other prompt of its group (a system prompt, a
    shared document): what a server's prefix cache can reuse. Groups are assigned to requests in turn."""

    fraction: Annotated[float, Field(gt=0, le=1)]
    """The share of each prompt that is its group's shared prefix."""
    groups: PositiveInt = 1
    """Groups of requests, each with a prefix of its own, assigned in turn."""


class Conversation(_Strict):
    """Multi-turn conversations: each request is the next turn of one of `conversations` conversations taken in turn,
    and its prompt holds the conversation so far (every earlier turn's prompt, and a stand-in of each earlier answer's
    length: contents are made before answers exist) followed by a new prompt_tokens-long message."""

    turns: Annotated[int, Field(ge=2, le=64)]
    """Turns a conversation has."""
    conversations: PositiveInt = 8
    """Conversations taken in turn."""


class TextDataset(_Strict):
    """Prompts from a file, sampled with the workload's seed (each is used once before any repeats)."""

    format: Literal["jsonl", "sharegpt"]
    """jsonl (an object a line, or a bare string) or ShareGPT (a JSON list of conversations: the first human turn)."""
    path: Annotated[str, Field(min_length=1, max_length=PATH_MAX)]
    """The file; over HTTP, under BENCHD_MODEL_ROOTS."""
    field: Annotated[str, Field(min_length=1, max_length=NAME_MAX)] = "prompt"
    """jsonl: the key holding the prompt (a line may also be a bare JSON string)."""



class Workload(_Strict):
    arrivals: Arrivals = Field(default_factory=lambda: Synchronous(profile="synchronous"))
    """When requests are scheduled: a closed loop, an open loop at a rate, a trace, a sweep of levels, or a capacity
    search."""
    stop: Stop = Field(default_factory=lambda: Stop(requests=16))
    """When each stage stops sending, and how long it drains."""
    warmup: Warmup = Field(default_factory=Warmup)
    """Requests run before measuring, in no figure."""
    prompt_tokens: LengthDist = Field(default_factory=lambda: FixedLength(dist="fixed", value=128))
    """Each prompt's length in tokens."""
    output_tokens: LengthDist = Field(default_factory=lambda: FixedLength(dist="fixed", value=128))
    """Each request's output length in tokens (its max_new_tokens)."""
    ignore_eos: bool | None = None
    """Generate every request's output_tokens, ending-of-sequence tokens or not (false: output_tokens is a cap and a
    request may end at its model's EOS, its length as measured). Unset: false for real requests (prompts), true for
    random ids."""
    prompts: Literal["auto", "random", "real"] = "auto"
    """What prompts are made of: random token ids; or real requests, the bundled real texts and user turns rendered
    with the model's chat template and cut or padded to each sampled length (a server's: the user turn's text);
    auto: real for a real preset's model (smollm2-135m), random otherwise."""
    slo: SLO | None = None
    """Service-level objectives: what makes a request good and a stage meet its SLO (goodput, a capacity search)."""
    dataset: TextDataset | None = None
    """Text prompts from a file instead of synthetic ones (engines that talk to a server)."""
    prefix: SharedPrefix | None = None
    """A prefix shared by each group's prompts, for a server's prefix cache."""
    conversation: Conversation | None = None
    """Multi-turn conversations, each prompt holding the conversation so far."""
    validity: ValidityRules = Field(default_factory=ValidityRules)
    """The rules a stage's figures must meet to be trusted; what they leave unset comes from the daemon's
    BENCHD_VALIDITY__*."""

    @model_validator(mode="after")
    def _consistent(self) -> Workload:
        arrivals = self.arrivals
        if isinstance(arrivals, Capacity):
            if self.slo is None or not self.slo.per_stage:
                raise ValueError("slo: a capacity search needs stage objectives (ttft_p99_s, tpot_p99_s, itl_p99_s, "
                                 "e2e_p99_s or max_error_rate) to tell a rate that passes from one that fails")
            if self.stop.duration_s is None:
                raise ValueError("stop.duration_s: a capacity search's probes run at changing rates and need a "
                                 "length in seconds")
        if self.dataset is not None and (self.prefix is not None or self.conversation is not None):
            raise ValueError("prefix, conversation: shape synthetic prompts, not a dataset's")
        if isinstance(arrivals, Trace) and self.dataset is not None:
            raise ValueError("dataset: a trace gives each request's lengths; its prompts are made to them")
        if isinstance(arrivals, Trace) and self.conversation is not None:
            raise ValueError("conversation: a trace gives each request's lengths itself")
        if isinstance(arrivals, Trace) and arrivals.format == "mooncake" and self.prefix is not None:
            raise ValueError("prefix: a Mooncake trace says which prompts share blocks (hash_ids)")
        return self

    def stages(self) -> list[ArrivalProfile]:
        """The load levels in order; a capacity search's first probe only (the next are decided as it goes)."""
        arrivals = self.arrivals
        if isinstance(arrivals, Sweep):
            return arrivals.stages()
        if isinstance(arrivals, Capacity):
            return [arrivals.probe(arrivals.start_rate)]
        return [arrivals]

    def stage_count(self) -> int:
        """Stages the run will have at most."""
        arrivals = self.arrivals
        return arrivals.max_probes if isinstance(arrivals, Capacity) else len(self.stages())

    def max_prompt_tokens(self) -> int:
        """The longest prompt the synthetic workload makes (a trace's are in its file)."""
        prompt = length_upper_bound(self.prompt_tokens)
        if self.conversation is None:
            return prompt
        turns = self.conversation.turns
        return turns * prompt + (turns - 1) * length_upper_bound(self.output_tokens)

    def max_sequence_tokens(self) -> int:
        return self.max_prompt_tokens() + length_upper_bound(self.output_tokens)
