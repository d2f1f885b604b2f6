"""RunSpec: what to run and how to load it, validated at the edge."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from benchd.spec.documents import DocumentError, load_yaml
from benchd.spec.engines import EngineName, OpenAIOptions, StaticOptions, TransformersOptions
from benchd.spec.fields import LABEL_MAX, MODEL_MAX, Name
from benchd.spec.fields import Strict as _Strict
from benchd.spec.stack import AttnImplementation, CompileMode, Quantization, stack_problems
from benchd.spec.timed import KernelOptions, RunKind, TrainStepOptions
from benchd.spec.workload import Workload


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
