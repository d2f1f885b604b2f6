"""RunSpec: what to run and how to load it, validated at the edge."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from benchd.spec.documents import DocumentError, load_yaml
from benchd.spec.fields import (
    INT_MAX,
    LABEL_MAX,
    MODEL_MAX,
    NAME_MAX,
    PATH_MAX,
    FreeFormMapping,
    Name,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
)
from benchd.spec.fields import Strict as _Strict
from benchd.spec.profiles import ArrivalProfile, Arrivals, Capacity, Sweep, Synchronous, Trace
from benchd.spec.slo import SLO
from benchd.spec.stack import AttnImplementation, CompileMode, Quantization, stack_problems
from benchd.spec.timed import KernelOptions, RunKind, TrainStepOptions
from benchd.spec.validity import ValidityRules

# ---- length distributions (token counts) ------------------------------------------------------


class FixedLength(_Strict):
    dist: Literal["fixed"]
    value: PositiveInt


class UniformLength(_Strict):
    dist: Literal["uniform"]
    min: PositiveInt
    max: PositiveInt

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self


class NormalLength(_Strict):
    """A normal distribution rounded to integers and clipped to [min, max]."""

    dist: Literal["normal"]
    mean: PositiveFloat
    std: NonNegativeFloat
    min: PositiveInt = 1
    max: PositiveInt

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
    values: Annotated[list[PositiveInt], Field(min_length=1)]


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


class Stop(_Strict):
    """When a stage stops: after this many measured requests and/or this many measured seconds."""

    requests: PositiveInt | None = None
    duration_s: PositiveFloat | None = None

    @model_validator(mode="after")
    def _bounded(self) -> Stop:
        if self.requests is None and self.duration_s is None:
            raise ValueError("set requests, duration_s or both: a run must end")
        return self


class Warmup(_Strict):
    """Requests run before measuring, cut by their scheduled time; they never enter any figure."""

    requests: NonNegativeInt = 0
    seconds: NonNegativeFloat = 0.0

    @model_validator(mode="after")
    def _one_kind(self) -> Warmup:
        if self.requests and self.seconds:
            raise ValueError("give warm-up as requests or as seconds, not both")
        return self


class SharedPrefix(_Strict):
    """The first fraction of each prompt is the same token ids as every other prompt of its group (a system prompt, a
    shared document): what a server's prefix cache can reuse. Groups are assigned to requests in turn."""

    fraction: Annotated[float, Field(gt=0, le=1)]
    groups: PositiveInt = 1


class Conversation(_Strict):
    """Multi-turn conversations: each request is the next turn of one of `conversations` conversations taken in turn,
    and its prompt holds the conversation so far (every earlier turn's prompt, and a stand-in of each earlier answer's
    length: contents are made before answers exist) followed by a new prompt_tokens-long message."""

    turns: Annotated[int, Field(ge=2, le=64)]
    conversations: PositiveInt = 8


class Workload(_Strict):
    arrivals: Arrivals = Field(default_factory=lambda: Synchronous(profile="synchronous"))
    stop: Stop = Field(default_factory=lambda: Stop(requests=16))
    warmup: Warmup = Field(default_factory=Warmup)
    prompt_tokens: LengthDist = Field(default_factory=lambda: FixedLength(dist="fixed", value=128))
    output_tokens: LengthDist = Field(default_factory=lambda: FixedLength(dist="fixed", value=128))
    ignore_eos: bool = True
    slo: SLO | None = None
    dataset: TextDataset | None = None  # text prompts for the openai engine instead of synthetic ones
    prefix: SharedPrefix | None = None
    conversation: Conversation | None = None
    validity: ValidityRules = Field(default_factory=ValidityRules)

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


# ---- engines -----------------------------------------------------------------------------------


class TransformersOptions(_Strict):
    """Continuous batching settings. None means: benchd's default for the device (see engines)."""

    block_size: Annotated[int, Field(ge=4, le=INT_MAX)] | None = None  # transformers' paged cache minimum
    num_blocks: PositiveInt | None = None
    max_batch_tokens: PositiveInt | None = None
    max_requests_per_batch: PositiveInt | None = None
    use_cuda_graph: bool | None = None
    use_async_batching: bool | None = None
    compile_level: Annotated[int, Field(ge=0, le=3)] | None = None
    # torch's intra-op CPU threads while the engine runs (the paged sdpa path builds each step's attention mask with
    # CPU tensor ops on the generation thread); not a transformers setting
    cpu_threads: PositiveInt | None = None
    library_defaults: bool = False  # pass nothing benchd would choose: transformers' own defaults


class StaticOptions(_Strict):
    batch_size: PositiveInt = 8


class OpenAIOptions(_Strict):
    """An OpenAI-compatible server (vLLM, TGI, SGLang, `transformers serve`, …), driven with streaming requests."""

    base_url: Annotated[str, Field(max_length=2048, pattern=r"^https?://")] = "http://127.0.0.1:8000/v1"
    model: Annotated[str, Field(min_length=1, max_length=MODEL_MAX)] | None = None  # the served model's name; default: RunSpec.model
    api: Literal["completions", "chat"] = "completions"
    # The output limit's field: max_tokens is read by vLLM, TGI, SGLang and transformers serve on both APIs;
    # OpenAI's own chat API wants max_completion_tokens.
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    api_key_env: Annotated[str, Field(max_length=NAME_MAX, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] | None = None  # read at run time
    extra_body: FreeFormMapping = Field(default_factory=dict)  # merged into every request (ignore_eos, …)
    # include_usage gives the final count; continuous_usage_stats (vLLM) a running count on every chunk.
    stream_options: FreeFormMapping | None = Field(default_factory=lambda: {"include_usage": True})
    tokenizer: Annotated[str, Field(max_length=PATH_MAX)] | None = None  # a local directory: sizes synthetic prompts and counts tokens in text
    # default: the workload's concurrency, or 1,024 a client process in open loop
    max_connections: PositiveInt | None = None
    # Client processes sharing the arrival schedule (round robin), each an event loop on a core of its own:
    # one holds about 800 requests/s on time (docs/benchmarks/load-generators.md); more for higher rates on more cores.
    client_processes: Annotated[int, Field(ge=1, le=64)] = 1
    connect_timeout_s: PositiveFloat = 10.0
    stall_timeout_s: PositiveFloat = 60.0  # no byte for this long: the request fails as a timeout
    request_timeout_s: PositiveFloat | None = None  # whole request, first byte to last
    # The server's Prometheus page (vLLM, SGLang, TGI): read by the daemon every metrics_interval_s during the run
    # into the run's server timeline and benchd_server_* gauges (benchd.measure.server_metrics). None: not read.
    metrics_url: Annotated[str, Field(max_length=2048, pattern=r"^https?://")] | None = None
    metrics_interval_s: Annotated[float, Field(ge=0.1, le=60.0)] = 1.0

    @field_validator("api_key_env")
    @classmethod
    def _not_the_daemons(cls, name: str | None) -> str | None:
        if name is not None and name.upper().startswith("BENCHD_"):
            raise ValueError("a BENCHD_* variable holds benchd's own settings and secrets: never sent as a key")
        return name

    @model_validator(mode="after")
    def _reserved(self) -> OpenAIOptions:
        reserved = {"model", "prompt", "messages", "stream", "max_tokens", "max_completion_tokens",
                    "stream_options"} & set(self.extra_body)
        if reserved:
            raise ValueError(f"extra_body: {', '.join(sorted(reserved))} set by benchd itself")
        return self


class TextDataset(_Strict):
    """Prompts from a file, sampled with the workload's seed (each is used once before any repeats)."""

    format: Literal["jsonl", "sharegpt"]
    path: Annotated[str, Field(min_length=1, max_length=PATH_MAX)]
    field: Annotated[str, Field(min_length=1, max_length=NAME_MAX)] = "prompt"  # jsonl: the key holding the prompt (a line may also be a bare JSON string)


EngineName = Literal["transformers", "static", "openai"]


# ---- timed runs: training steps and single kernels (their options in timed_options) --------------------




class RunSpec(_Strict):
    name: Name = "default"
    model: Annotated[str, Field(min_length=1, max_length=MODEL_MAX)] = "tiny"
    engine: EngineName = "transformers"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    device: Annotated[str, Field(pattern=r"^(auto|cpu(:\d+)?|cuda(:\d+)?)$")] = "auto"
    # one: on the device named; every_gpu: the same spec on every worker at once (each GPU, or each CPU worker),
    # each with its own arrivals from the same seed: a summary per GPU, the whole, and the slow GPU found.
    placement: Literal["one", "every_gpu"] = "one"
    # N > 1: the model sharded over a worker group of N consecutive devices (transformers' tp_plan="auto", NCCL on
    # CUDA, gloo on CPU workers), the group holding the device named; with every_gpu, every group at once.
    tensor_parallel: Annotated[int, Field(ge=1, le=64, strict=True)] = 1
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0
    label: Annotated[str, Field(max_length=LABEL_MAX)] | None = None
    trust_remote_code: bool = False
    workload: Workload = Field(default_factory=Workload)
    transformers: TransformersOptions = Field(default_factory=TransformersOptions)
    static: StaticOptions = Field(default_factory=StaticOptions)
    openai: OpenAIOptions = Field(default_factory=OpenAIOptions)
    kind: RunKind = "generate"  # generation (the workload), a training step, or single kernels
    train_step: TrainStepOptions = Field(default_factory=TrainStepOptions)
    kernel: KernelOptions | None = None
    # ---- the stack (benchd.spec.stack): what a matrix varies beside dtype and the engine's options ----
    quantization: Quantization = "none"
    attn_implementation: AttnImplementation | None = None  # None: sdpa (continuous batching may pick flash itself)
    compile: CompileMode = "off"

    @model_validator(mode="after")
    def _stack(self) -> RunSpec:
        problems = stack_problems(self.quantization, self.attn_implementation, self.compile, self.engine, self.kind)
        if problems:
            raise ValueError("; ".join(f"{field}: {why}" for field, why in problems))
        return self

    @model_validator(mode="after")
    def _kind_options(self) -> RunSpec:
        if self.kind == "kernel" and self.kernel is None:
            raise ValueError("kernel: required when kind is kernel (op, shapes, …)")
        if self.workload.dataset is not None and self.engine != "openai":
            raise ValueError("workload.dataset: text datasets are read by the openai engine only")
        if self.engine == "openai" and self.workload.dataset is None and self.openai.tokenizer is None:
            raise ValueError("openai.tokenizer: synthetic prompts are sized in tokens, which needs the served "
                             "model's tokenizer (a local directory); or give workload.dataset")
        if self.tensor_parallel > 1 and (self.kind != "generate" or self.engine != "transformers"):
            raise ValueError("tensor_parallel: shards a model for transformers' continuous batching (kind generate, "
                             f"engine transformers), not {self.runner}")
        if self.tensor_parallel > 1 and self.quantization != "none":
            raise ValueError("tensor_parallel: shards the model's weights unquantized; quantization must be none")
        if self.kind == "train_step" and self.train_step.autocast and self.dtype not in ("auto", "float32"):
            raise ValueError("train_step.autocast: needs float32 weights (dtype auto or float32), "
                             f"not {self.dtype}")
        return self

    @property
    def runner(self) -> str:
        """What carries the run out: the generation engine, or the timed kind."""
        return self.engine if self.kind == "generate" else self.kind

    @property
    def subject(self) -> str:
        """What the run measures: the model, or the kernel's op."""
        return self.kernel.op if self.kind == "kernel" and self.kernel is not None else self.model


# ---- loading and error messages ----------------------------------------------------------------


class SpecError(ValueError):
    """A spec that cannot run; the message names each bad field and why."""


def format_validation_error(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "spec"
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{where}: {message}")
    return "\n".join(lines)


def parse_spec(data: Any) -> RunSpec:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(f"spec: expected a mapping of fields, got {type(data).__name__}")
    try:
        return RunSpec.model_validate(data)
    except ValidationError as error:
        raise SpecError(format_validation_error(error)) from None


def read_document(path: str | Path) -> Any:
    """A spec file's document, YAML or JSON (YAML is a superset: one loader for both), parsed within
    documents.DEPTH_MAX; SpecError naming the place."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise SpecError(f"spec file {path}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise SpecError(f"spec file {path}: not UTF-8 ({error.reason} at byte {error.start})") from None
    try:
        return load_yaml(text)
    except DocumentError as error:
        raise SpecError(str(error) if error.loc else f"spec file {path}: {error.reason}") from None
    except yaml.YAMLError as error:
        raise SpecError(f"spec file {path}: not valid YAML or JSON: {error}") from None


def load_spec(path: str | Path) -> RunSpec:
    return parse_spec(read_document(path))
