"""RunSpec: what to run and how to load it, validated at the edge."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from benchd.stack import AttnImplementation, CompileMode, Quantization, stack_problems

# Bounds of what a spec may hold, whoever sends it: numbers stay far inside what arithmetic, torch and the
# databases take, and strings fit the store's columns on SQLite and PostgreSQL alike.
INT_MAX = 2**31 - 1
FLOAT_MAX = 1e12
NAME_MAX = 100  # workload and schedule names
LABEL_MAX = 200
MODEL_MAX = 500
PATH_MAX = 4096

PositiveInt = Annotated[int, Field(ge=1, le=INT_MAX)]
PositiveFloat = Annotated[float, Field(gt=0, le=FLOAT_MAX)]
NonNegativeInt = Annotated[int, Field(ge=0, le=INT_MAX)]
NonNegativeFloat = Annotated[float, Field(ge=0, le=FLOAT_MAX)]
Name = Annotated[str, Field(min_length=1, max_length=NAME_MAX, pattern=r"^[A-Za-z0-9_.:\-]+$")]


class _Strict(BaseModel):
    # strict: true is not 1 and "5" is not 5; every float finite (NaN and infinities refused, 1e309 included).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


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


# ---- arrival profiles (guidellm's strategies) --------------------------------------------------

# Gamma's shape: 1 is Poisson, < 1 burstier. Its scale is 1 / (rate · burstiness), which must stay finite.
Burstiness = Annotated[float, Field(ge=0.001, le=1000)]


class Synchronous(_Strict):
    """One request at a time: the next is scheduled when the previous finishes."""

    profile: Literal["synchronous"]


class Concurrent(_Strict):
    """Closed loop: N requests in flight; a new one is scheduled whenever one finishes."""

    profile: Literal["concurrent"]
    concurrency: PositiveInt


class Constant(_Strict):
    """Open loop: one request every 1/rate seconds."""

    profile: Literal["constant"]
    rate: PositiveFloat


class Poisson(_Strict):
    """Open loop: exponential inter-arrival times with mean 1/rate."""

    profile: Literal["poisson"]
    rate: PositiveFloat


class Gamma(_Strict):
    """Open loop: gamma inter-arrival times with mean 1/rate (vLLM's burstiness: 1 is Poisson, <1 burstier)."""

    profile: Literal["gamma"]
    rate: PositiveFloat
    burstiness: Burstiness = 1.0


class Sweep(_Strict):
    """Several load levels run in turn, each with the workload's stop and warm-up rules."""

    profile: Literal["sweep"]
    over: Literal["concurrent", "constant", "poisson", "gamma"]
    values: Annotated[list[PositiveFloat], Field(min_length=1)]
    burstiness: Burstiness = 1.0

    @model_validator(mode="after")
    def _integral_concurrency(self) -> Sweep:
        if self.over == "concurrent" and any(v != int(v) for v in self.values):
            raise ValueError("values must be whole numbers when sweeping concurrency")
        return self

    def stages(self) -> list[ArrivalProfile]:
        match self.over:
            case "concurrent":
                return [Concurrent(profile="concurrent", concurrency=int(v)) for v in self.values]
            case "gamma":
                return [Gamma(profile="gamma", rate=v, burstiness=self.burstiness) for v in self.values]
            case "constant":
                return [Constant(profile="constant", rate=v) for v in self.values]
            case _:
                return [Poisson(profile="poisson", rate=v) for v in self.values]


ArrivalProfile = Synchronous | Concurrent | Constant | Poisson | Gamma
Arrivals = Annotated[ArrivalProfile | Sweep, Field(discriminator="profile")]


def describe_profile(profile: ArrivalProfile) -> str:
    match profile:
        case Synchronous():
            return "synchronous"
        case Concurrent():
            return f"concurrent={profile.concurrency}"
        case Gamma():
            return f"gamma@{profile.rate:g}/s(b={profile.burstiness:g})"
        case _:
            return f"{profile.profile}@{profile.rate:g}/s"


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


class SLO(_Strict):
    """Service-level objectives: a request is good when it meets every one that is set."""

    ttft_s: PositiveFloat | None = None
    tpot_s: PositiveFloat | None = None

    @model_validator(mode="after")
    def _any(self) -> SLO:
        if self.ttft_s is None and self.tpot_s is None:
            raise ValueError("set ttft_s, tpot_s or both")
        return self


class Workload(_Strict):
    arrivals: Arrivals = Field(default_factory=lambda: Synchronous(profile="synchronous"))
    stop: Stop = Field(default_factory=lambda: Stop(requests=16))
    warmup: Warmup = Field(default_factory=Warmup)
    prompt_tokens: LengthDist = Field(default_factory=lambda: FixedLength(dist="fixed", value=128))
    output_tokens: LengthDist = Field(default_factory=lambda: FixedLength(dist="fixed", value=128))
    ignore_eos: bool = True
    slo: SLO | None = None
    dataset: TextDataset | None = None  # text prompts for the openai engine instead of synthetic ones

    def stages(self) -> list[ArrivalProfile]:
        arrivals = self.arrivals
        return arrivals.stages() if isinstance(arrivals, Sweep) else [arrivals]

    def max_sequence_tokens(self) -> int:
        return length_upper_bound(self.prompt_tokens) + length_upper_bound(self.output_tokens)


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
    extra_body: dict[str, Any] = Field(default_factory=dict)  # merged into every request (ignore_eos, …)
    # include_usage gives the final count; continuous_usage_stats (vLLM) a running count on every chunk.
    stream_options: dict[str, Any] | None = Field(default_factory=lambda: {"include_usage": True})
    tokenizer: Annotated[str, Field(max_length=PATH_MAX)] | None = None  # a local directory: sizes synthetic prompts and counts tokens in text
    # default: the workload's concurrency, or 1,024 a client process in open loop
    max_connections: PositiveInt | None = None
    # Client processes sharing the arrival schedule (round robin), each an event loop on a core of its own:
    # one holds about 800 requests/s on time (docs/benchmarks.md); more for higher rates on more cores.
    client_processes: Annotated[int, Field(ge=1, le=64)] = 1
    connect_timeout_s: PositiveFloat = 10.0
    stall_timeout_s: PositiveFloat = 60.0  # no byte for this long: the request fails as a timeout
    request_timeout_s: PositiveFloat | None = None  # whole request, first byte to last

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


# ---- timed runs: training steps and single kernels ----------------------------------------------


class TrainStepOptions(_Strict):
    """A training step of the spec's model on random tokens, each phase timed on its own.

    dtype "auto" means float32 for a training step; autocast runs the step under torch.autocast in that
    type (mixed precision: float32 weights, low-precision matmuls)."""

    batch_size: PositiveInt = 4
    context_length: PositiveInt = 512
    mode: Literal["forward", "forward_backward", "train"] = "forward_backward"  # train adds an AdamW step
    autocast: Literal["bfloat16", "float16"] | None = None
    warmup_steps: NonNegativeInt = 5
    steps: PositiveInt = 10
    # Repeat the run once per warm-up count (a fresh model each time) to show what warm-up does to the figures.
    warmup_study: Annotated[list[NonNegativeInt], Field(min_length=1)] | None = None
    peak_tflops: PositiveFloat | None = None  # the device's peak for MFU; default: benchd's table by device name


class MatmulShape(_Strict):
    m: PositiveInt
    n: PositiveInt
    k: PositiveInt

    def label(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"


class AttentionShape(_Strict):
    batch: PositiveInt = 1
    heads: PositiveInt
    seq_len: PositiveInt
    head_dim: PositiveInt
    causal: bool = True

    def label(self) -> str:
        return f"b{self.batch}h{self.heads}s{self.seq_len}d{self.head_dim}" + ("c" if self.causal else "")


class _Kernel(_Strict):
    warmup: NonNegativeInt = 10
    repeats: PositiveInt = 100
    flush_l2: bool = True  # overwrite a buffer larger than the last-level cache before every repeat
    flush_bytes: PositiveInt = 256 * 2**20
    implementations: Annotated[list[Annotated[str, Field(max_length=NAME_MAX)]], Field(min_length=1)] | None = None
    reference: Annotated[str, Field(max_length=NAME_MAX)] | None = None  # the implementation others are compared with; default: the first

    IMPLEMENTATIONS: ClassVar[tuple[str, ...]] = ()
    DEFAULT: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="after")
    def _known(self) -> _Kernel:
        for name in self.implementations or ():
            if name not in self.IMPLEMENTATIONS:
                raise ValueError(f"implementations: unknown {name!r}; known: {', '.join(self.IMPLEMENTATIONS)}")
        if len(set(self.chosen())) != len(self.chosen()):
            raise ValueError("implementations: each may appear once")
        if self.reference is not None and self.reference not in self.chosen():
            raise ValueError(f"reference: {self.reference!r} is not among the implementations run")
        return self

    def chosen(self) -> list[str]:
        return list(self.implementations or self.DEFAULT)

    def reference_name(self) -> str:
        return self.reference or self.chosen()[0]


class MatmulKernel(_Kernel):
    """C = A @ B with A (m, k) and B (k, n): 2·m·n·k FLOPs."""

    op: Literal["matmul"]
    shapes: Annotated[list[MatmulShape], Field(min_length=1)]
    # torch: torch.matmul at full float32 precision; tf32: float32 on TF32 tensor cores (CUDA);
    # compiled: torch.compile with max-autotune.
    IMPLEMENTATIONS: ClassVar[tuple[str, ...]] = ("torch", "tf32", "compiled")
    DEFAULT: ClassVar[tuple[str, ...]] = ("torch",)


class AttentionKernel(_Kernel):
    """softmax(Q Kᵀ / √d) V, forward: 4·b·h·s²·d FLOPs, half that when causal (FlashAttention's convention)."""

    op: Literal["attention"]
    shapes: Annotated[list[AttentionShape], Field(min_length=1)]
    # sdpa: PyTorch's dispatcher picks; flash / efficient / cudnn / math: that SDPA backend forced;
    # eager: the textbook composition of matmul, mask and softmax.
    IMPLEMENTATIONS: ClassVar[tuple[str, ...]] = ("sdpa", "flash", "efficient", "cudnn", "math", "eager")
    DEFAULT: ClassVar[tuple[str, ...]] = ("eager", "sdpa")


KernelOptions = Annotated[MatmulKernel | AttentionKernel, Field(discriminator="op")]
RunKind = Literal["generate", "train_step", "kernel"]


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
    # ---- the stack (benchd.stack): what a matrix varies beside dtype and the engine's options ----
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


def load_spec(path: str | Path) -> RunSpec:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise SpecError(f"spec file {path}: {error.strerror}") from None
    try:
        data = yaml.safe_load(text)  # YAML is a superset of JSON: one loader for both
    except yaml.YAMLError as error:
        raise SpecError(f"spec file {path}: not valid YAML or JSON: {error}") from None
    return parse_spec(data)
