"""RunSpec: a union on the run's kind (and a generation's engine), each holding only the options it uses; read from a
document, validated at the edge."""

from __future__ import annotations

import difflib

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from benchd.spec.documents import DocumentError, load_yaml
from benchd.spec.engines import EngineName, OpenAIOptions, StaticOptions, TransformersOptions
from benchd.spec.fields import LABEL_MAX, MODEL_MAX, Name
from benchd.spec.fields import Strict as _Strict
from benchd.spec.requirements import Requirements, environment_name
from benchd.spec.stack import AttnImplementation, CompileMode, Quantization, stack_problems
from benchd.spec.timed import KernelOptions, RunKind, TrainStepOptions
from benchd.spec.workload import Workload


class Commit(_Strict):
    """The source a run measured, when its caller says (a CI job's checkout of transformers, say): stored with the
    run's metadata, so that the history can be plotted by commit as well as by the versions its worker resolved."""

    repository: Annotated[str, Field(min_length=1, max_length=MODEL_MAX)] | None = None
    branch: Annotated[str, Field(min_length=1, max_length=LABEL_MAX)] | None = None
    commit: Annotated[str, Field(pattern=r"^[0-9a-fA-F]{7,64}$")] | None = None
    message: Annotated[str, Field(max_length=2000)] | None = None


class SpecBase(_Strict):
    """What every run has: its name, the model and where it runs, the seed, and the stack the model loads with."""

    kind: RunKind = "generate"  # generation (the workload), a training step, or single kernels
    name: Name = "default"
    model: Annotated[str, Field(min_length=1, max_length=MODEL_MAX)] = "tiny"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    device: Annotated[str, Field(pattern=r"^(auto|cpu(:\d+)?|cuda(:\d+)?)$")] = "auto"
    # one: on the device named; every_gpu: the same spec on every worker at once (each GPU, or each CPU worker),
    # each with its own arrivals from the same seed: a summary per GPU, the whole, and the slow GPU found.
    placement: Literal["one", "every_gpu"] = "one"
    # N > 1: the model sharded over a worker group of N consecutive devices (transformers' tp_plan="auto", NCCL on
    # CUDA, gloo on CPU workers), the group holding the device named; with every_gpu, every group at once.
    tensor_parallel: Annotated[int, Field(ge=1, le=64, strict=True)] = 1
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0
    # The Python environment its worker runs in: the daemon's own (current), or one BENCHD_ENVIRONMENTS declares (its
    # torch and transformers: a matrix over environments compares releases of the stack, interleaved).
    environment: Name = "current"
    # Or the requirements its worker's environment is built from (pip's, PEP 508: transformers==5.24.0, or a name @
    # a git URL at a commit), built once into a venv over the daemon's packages and reused (requirements-<hash>);
    # over HTTP only where BENCHD_ENVIRONMENTS_FROM_SPECS allows it.
    requirements: Requirements | None = None
    commit: Commit | None = None  # the source measured (repository, branch, commit, message), when given
    label: Annotated[str, Field(max_length=LABEL_MAX)] | None = None
    trust_remote_code: bool = False
    # ---- the stack (benchd.spec.stack): what a matrix varies beside dtype and the engine's options ----
    quantization: Quantization = "none"
    attn_implementation: AttnImplementation | None = None  # None: sdpa (continuous batching may pick flash itself)
    compile: CompileMode = "off"

    @property
    def worker_environment(self) -> str:
        """The Python environment its worker runs in: the one named, or the one its requirements build."""
        return environment_name(self.requirements) if self.requirements is not None else self.environment

    @model_validator(mode="after")
    def _stack(self) -> SpecBase:
        problems = stack_problems(self.quantization, self.attn_implementation, self.compile, self.runner, self.kind)
        if problems:
            raise ValueError("; ".join(f"{field}: {why}" for field, why in problems))
        if self.requirements is not None and self.environment != "current":
            raise ValueError(f"requirements: a run names an environment ({self.environment!r}) or brings the "
                             "requirements of its own, not both")
        if self.tensor_parallel > 1 and self.runner != "transformers":
            raise ValueError("tensor_parallel: shards a model for transformers' continuous batching (kind generate, "
                             f"engine transformers), not {self.runner}")
        if self.tensor_parallel > 1 and self.quantization != "none":
            raise ValueError("tensor_parallel: shards the model's weights unquantized; quantization must be none")
        return self

    @property
    def runner(self) -> str:
        """What carries the run out: the generation engine, or the timed kind."""
        return self.kind

    @property
    def subject(self) -> str:
        """What the run measures: the model, or the kernel's op."""
        return self.model


# ---- generation: the workload, and one engine's options ------------------------------------------


class GenerateSpec(SpecBase):
    """A generation run: the workload sent to the engine. Each engine's spec below holds that engine's options."""

    kind: Literal["generate"] = "generate"
    engine: EngineName = "transformers"
    workload: Workload = Field(default_factory=Workload)

    @model_validator(mode="after")
    def _dataset(self) -> GenerateSpec:
        if self.workload.dataset is not None and self.engine != "openai":
            raise ValueError("workload.dataset: text datasets are read by the openai engine only")
        return self

    @property
    def runner(self) -> str:
        return self.engine

    @property
    def options(self) -> TransformersOptions | StaticOptions | OpenAIOptions:
        """The engine's options: the one section of the spec named after its engine."""
        raise NotImplementedError  # each engine's spec below


class TransformersSpec(GenerateSpec):
    """Generation by transformers' continuous batching, in the worker (the default engine)."""

    engine: Literal["transformers"] = "transformers"
    transformers: TransformersOptions = Field(default_factory=TransformersOptions)

    @property
    def options(self) -> TransformersOptions:
        return self.transformers


class StaticSpec(GenerateSpec):
    """Generation by static batches of generate(), in the worker."""

    engine: Literal["static"]
    static: StaticOptions = Field(default_factory=StaticOptions)

    @property
    def options(self) -> StaticOptions:
        return self.static


class OpenAISpec(GenerateSpec):
    """Generation by an OpenAI-compatible server, driven with streaming requests."""

    engine: Literal["openai"]
    openai: OpenAIOptions = Field(default_factory=OpenAIOptions)

    @property
    def options(self) -> OpenAIOptions:
        return self.openai

    @model_validator(mode="after")
    def _tokenizer(self) -> OpenAISpec:
        if self.workload.dataset is None and self.openai.tokenizer is None:
            raise ValueError("openai.tokenizer: synthetic prompts are sized in tokens, which needs the served "
                             "model's tokenizer (a local directory); or give workload.dataset")
        return self


# ---- timed runs: a training step, single kernels ---------------------------------------------------


class TrainStepSpec(SpecBase):
    """A training step of the spec's model, each phase timed on its own."""

    kind: Literal["train_step"]
    train_step: TrainStepOptions = Field(default_factory=TrainStepOptions)

    @model_validator(mode="after")
    def _autocast(self) -> TrainStepSpec:
        if self.train_step.autocast and self.dtype not in ("auto", "float32"):
            raise ValueError(f"train_step.autocast: needs float32 weights (dtype auto or float32), not {self.dtype}")
        return self


class KernelSpec(SpecBase):
    """Single kernels at given shapes, each implementation timed on the device."""

    kind: Literal["kernel"]
    kernel: KernelOptions

    @model_validator(mode="before")
    @classmethod
    def _required(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("kernel") is None:
            raise ValueError("kernel: required when kind is kernel (op, shapes, …)")
        return data

    @property
    def subject(self) -> str:
        return self.kernel.op


# ---- RunSpec: the union, read from a document -------------------------------------------------------

GENERATE_SPECS: dict[str, type[GenerateSpec]] = {"transformers": TransformersSpec, "static": StaticSpec,
                                                 "openai": OpenAISpec}  # by engine
SPECS: dict[str, type[SpecBase]] = {**GENERATE_SPECS, "train_step": TrainStepSpec, "kernel": KernelSpec}  # by runner
_STRICT = ConfigDict(strict=True)
# Sections a document may hold for another kind or engine than its own: a spec dumped before RunSpec was a union
# holds every one, and a matrix over engines gives each variant the others' options. Each is checked as that kind or
# engine would check it (a bad one is refused, as before), then left out.
UNUSED: dict[str, TypeAdapter] = {
    "engine": TypeAdapter(EngineName, config=_STRICT), "workload": TypeAdapter(Workload),
    "transformers": TypeAdapter(TransformersOptions), "static": TypeAdapter(StaticOptions),
    "openai": TypeAdapter(OpenAIOptions), "train_step": TypeAdapter(TrainStepOptions),
    "kernel": TypeAdapter(KernelOptions | None)}
SPEC_FIELDS = frozenset(name for spec in SPECS.values() for name in spec.model_fields)  # a document's keys
_KIND = TypeAdapter(RunKind, config=_STRICT)


def _located(error: ValidationError, *loc: str | int) -> list[InitErrorDetails]:
    return [InitErrorDetails(type=item["type"], loc=(*loc, *item["loc"]), input=item["input"],
                             **({"ctx": item["ctx"]} if "ctx" in item else {}))
            for item in error.errors(include_url=False)]


def _runner(data: dict) -> str:
    """The runner a document names: its kind, or a generation's engine; ValidationError naming the field when it is
    not one benchd knows."""
    kind = data.get("kind", "generate")
    field, value, adapter = (("engine", data.get("engine", "transformers"), UNUSED["engine"]) if kind == "generate"
                             else ("kind", kind, _KIND))
    if isinstance(value, str) and value in SPECS and (field == "engine") == (value in GENERATE_SPECS):
        return value
    try:
        return adapter.validate_python(value)  # refused: the line above took every name benchd knows
    except ValidationError as error:
        raise ValidationError.from_exception_data("RunSpec", _located(error, field)) from None


def _tag(value: Any) -> str | None:
    """The runner (SPECS' key) a spec or a document names, None when it names none: how pydantic tells the union's
    members apart when it serializes a spec, and in the JSON schema (a oneOf)."""
    if isinstance(value, SpecBase):
        return value.runner
    try:
        return _runner(value) if isinstance(value, dict) else None
    except ValidationError:
        return None


def _read(data: Any, handler: ValidatorFunctionWrapHandler) -> SpecBase:
    """The spec of a document's kind (and engine); what another kind or engine would use is checked and left out.
    The union itself (handler) is never asked: its errors' places would start with the member's tag."""
    if isinstance(data, SpecBase):
        return data
    if not isinstance(data, dict):
        raise ValidationError.from_exception_data("RunSpec", [InitErrorDetails(
            type="model_type", loc=(), input=data, ctx={"class_name": "RunSpec"})])
    spec = SPECS[_runner(data)]
    errors: list[InitErrorDetails] = []
    own = {}
    for key, value in data.items():
        if key in spec.model_fields or key not in UNUSED:  # unknown keys go on, to be refused by name
            own[key] = value
            continue
        try:
            UNUSED[key].validate_python(value)
        except ValidationError as error:
            errors.extend(_located(error, key))
    try:
        found = spec.model_validate(own)
    except ValidationError as error:
        errors[:0] = _located(error)
    if errors:
        raise ValidationError.from_exception_data("RunSpec", errors)
    return found


RunSpec = Annotated[
    Annotated[TransformersSpec, Tag("transformers")] | Annotated[StaticSpec, Tag("static")]
    | Annotated[OpenAISpec, Tag("openai")] | Annotated[TrainStepSpec, Tag("train_step")]
    | Annotated[KernelSpec, Tag("kernel")],
    Discriminator(_tag), WrapValidator(_read)]
_RUN_SPEC: TypeAdapter[RunSpec] = TypeAdapter(RunSpec)


# ---- loading and error messages ----------------------------------------------------------------


class SpecError(ValueError):
    """A spec that cannot run; the message names each bad field and why."""


def format_validation_error(error: ValidationError) -> str:
    """A line per problem, naming the field; an unknown field gets the spec's nearest field names beside it."""
    lines = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "spec"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden" and item["loc"]:
            nearest = difflib.get_close_matches(str(item["loc"][-1]), _fields(item["loc"][:-1]), n=3, cutoff=0.6)
            message += f"; did you mean {' or '.join(map(repr, nearest))}?" if nearest else ""
        lines.append(f"{where}: {message}")
    return "\n".join(lines)


def _fields(loc: tuple) -> list[str]:
    """The field names a RunSpec has at loc (a union's tag in loc picks its member; a union the loc does not name
    gives every member's), from its JSON schema."""
    root = _RUN_SPEC.json_schema()
    defs = root.get("$defs", {})

    def members(node: dict) -> list[dict]:
        if "$ref" in node:
            return members(defs[node["$ref"].rsplit("/", 1)[-1]])
        alternatives = node.get("oneOf") or node.get("anyOf") or node.get("allOf")
        return [m for a in alternatives for m in members(a)] if alternatives else [node]

    nodes = members(root)
    for part in loc:
        if isinstance(part, int):
            nodes = [m for n in nodes for m in members(n.get("items", {}))]
        elif any(part in n.get("properties", {}) for n in nodes):
            nodes = [m for n in nodes for m in members(n.get("properties", {}).get(part, {}))]
        else:  # a union's tag (arrivals.poisson, kernel.matmul): the member it names
            nodes = [m for m in nodes if any(p.get("const") == part for p in m.get("properties", {}).values())]
    return sorted({name for n in nodes for name in n.get("properties", {})})


def validate_spec(data: Any) -> RunSpec:
    """The spec a document (or a stored spec, of any benchd since 0005) means; pydantic's ValidationError naming each
    bad field."""
    return _RUN_SPEC.validate_python(data)


def parse_spec(data: Any) -> RunSpec:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(f"spec: expected a mapping of fields, got {type(data).__name__}")
    try:
        return validate_spec(data)
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
