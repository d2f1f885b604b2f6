"""The specs of a run, each holding only the options it uses: what every run has (SpecBase), a generation's (each
engine's spec extends GenerateSpec in its own folder: spec/engines.py), a training step's and a kernel run's; the
union of them all is spec/union.py's RunSpec."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, model_validator

from benchd.spec.decide import Decide
from benchd.spec.engines import engine_record, engines
from benchd.spec.fields import LABEL_MAX, MODEL_MAX, Name
from benchd.spec.fields import Strict as _Strict
from benchd.spec.profiles import Trace
from benchd.spec.requirements import Requirements, environment_name
from benchd.spec.stack import AttnImplementation, CompileMode, Quantization, stack_problems
from benchd.spec.timed import KernelOptions, RunKind, TrainStepOptions
from benchd.spec.workload import Workload

if TYPE_CHECKING:
    from pydantic import BaseModel

    from benchd.spec.engines import EngineRecord


class Commit(_Strict):
    """The source a run measured, when its caller says (a CI job's checkout of transformers, say): stored with the
    run's metadata, so that the history can be plotted by commit as well as by the versions its worker resolved."""

    repository: Annotated[str, Field(min_length=1, max_length=MODEL_MAX)] | None = None
    """The repository measured (a URL or a name)."""
    branch: Annotated[str, Field(min_length=1, max_length=LABEL_MAX)] | None = None
    """Its branch."""
    commit: Annotated[str, Field(pattern=r"^[0-9a-fA-F]{7,64}$")] | None = None
    """The commit's hash (7 to 64 hexadecimal digits)."""
    message: Annotated[str, Field(max_length=2000)] | None = None
    """The commit's message."""


class Quality(_Strict):
    """What a generation keeps of its outputs and scores beside its speed (measure/quality.py). Unset: on for real
    requests (workload.prompts) to a model loaded in benchd's worker, off for random ids, whose outputs say little,
    and for a server's model."""

    logprobs: bool | None = None
    """Keep each generated token's log-probability (the transformers and static engines); it costs the engine a
    softmax over the vocabulary a token."""
    probe: bool | None = None
    """After the stages, score the probe set teacher-forced under the run's stack (an in-process engine with a
    tokenizer): the reference text's perplexity and what a comparison's KL and log-likelihood difference read. Outside
    every measured window; its seconds are reported."""


class SpecBase(_Strict):
    """What every run has: its name, the model and where it runs, the seed, and the stack the model loads with."""

    kind: RunKind = "generate"
    """What the run is: generation (a workload sent to an engine), a training step, or single kernels."""
    name: Name = "default"
    """The workload's name: runs of one name are compared, form one history and share one baseline."""
    model: Annotated[str, Field(min_length=1, max_length=MODEL_MAX)] = "tiny"
    """A preset (tiny, …), a local directory holding a transformers model, or a Hugging Face hub id (org/name); over
    HTTP, a preset or a directory under BENCHD_MODEL_ROOTS. A served model's name for the openai engine."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """The weights' type; auto: bfloat16 on CUDA, float32 on a CPU."""
    device: Annotated[str, Field(pattern=r"^(auto|cpu(:\d+)?|cuda(:\d+)?)$")] = "auto"
    """Where it runs: auto (the first GPU, else the CPU), cpu, cpu:N (a CPU worker), cuda or cuda:N."""
    placement: Literal["one", "every_gpu"] = "one"
    """one: on the device named; every_gpu: the same spec on every worker at once (each GPU, or each CPU worker), each
    with its own arrivals from the same seed: a summary per GPU, the whole, and the slow GPU found."""
    tensor_parallel: Annotated[int, Field(ge=1, le=64, strict=True)] = 1
    """N > 1: the model sharded over a worker group of N consecutive devices (transformers' tp_plan="auto", NCCL on
    CUDA, gloo on CPU workers), the group holding the device named; with every_gpu, every group at once."""
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0
    """Seeds the arrivals, the lengths and the prompts' tokens (and a model's random weights)."""
    environment: Name = "current"
    """The Python environment its worker runs in: the daemon's own (current), or one BENCHD_ENVIRONMENTS declares (its
    torch and transformers: a matrix over environments compares releases of the stack, interleaved)."""
    requirements: Requirements | None = None
    """Or the requirements its worker's environment is built from (pip's, PEP 508: transformers==5.24.0, or a name @ a
    git URL at a commit), built once into a venv over the daemon's packages and reused; over HTTP only where
    BENCHD_ENVIRONMENTS_FROM_SPECS allows it."""
    commit: Commit | None = None
    """The source measured (repository, branch, commit, message), when given: stored with the run's metadata, so the
    history can be plotted by commit."""
    label: Annotated[str, Field(max_length=LABEL_MAX)] | None = None
    """A free label stored with the run (a CI job's name, say); default: the daemon's BENCHD_LABEL."""
    trust_remote_code: bool = False
    """Run a model's own code from the hub; refused over HTTP."""
    # ---- the stack (benchd.spec.stack): what a matrix varies beside dtype and the engine's options ----
    quantization: Quantization = "none"
    """Quantize the weights as they load (torchao's int8 and int4 weight-only, int8 dynamic, float8; bitsandbytes' 8-bit
    and 4-bit)."""
    attn_implementation: AttnImplementation | None = None
    """The attention the model runs (transformers' names; paged|… for continuous batching); none: sdpa (continuous
    batching may pick a faster one itself)."""
    compile: CompileMode = "off"
    """torch.compile of the model's forward (the static engine)."""

    @property
    def worker_environment(self) -> str:
        """The Python environment its worker runs in: the one named, or the one its requirements build."""
        return environment_name(self.requirements) if self.requirements is not None else self.environment

    @model_validator(mode="after")
    def _stack(self) -> SpecBase:
        problems = stack_problems(self.quantization, self.attn_implementation, self.compile, self.engine_record,
                                  self.kind)
        if problems:
            raise ValueError("; ".join(f"{field}: {why}" for field, why in problems))
        if self.requirements is not None and self.environment != "current":
            raise ValueError(f"requirements: a run names an environment ({self.environment!r}) or brings the "
                             "requirements of its own, not both")
        if self.tensor_parallel > 1 and not (self.engine_record and self.engine_record.tensor_parallel):
            sharding = " or ".join(r.name for r in engines().values() if r.tensor_parallel)
            raise ValueError(f"tensor_parallel: shards a model over a worker group (kind generate, engine "
                             f"{sharding}), not {self.runner}")
        if self.tensor_parallel > 1 and self.quantization != "none":
            raise ValueError("tensor_parallel: shards the model's weights unquantized; quantization must be none")
        return self

    @property
    def runner(self) -> str:
        """What carries the run out: the generation engine, or the timed kind."""
        return self.kind

    @property
    def engine_record(self) -> EngineRecord | None:
        """What its engine is (spec/engines.py); None for a timed run."""
        return None

    @property
    def subject(self) -> str:
        """What the run measures: the model, or the kernel's op."""
        return self.model


# ---- generation: the workload, and one engine's options ------------------------------------------


class GenerateSpec(SpecBase):
    """A generation run: the workload sent to the engine. Each engine's spec (in its folder of benchd/engines) holds
    that engine's options, and says what a run of it reads, where it sends requests and what it holds, for
    admission and the worker to check (the methods below: nothing, unless the engine's spec says otherwise)."""

    kind: Literal["generate"] = "generate"
    """A generation run: the workload sent to the engine."""
    engine: str  # each engine's spec: Literal[its name]
    workload: Workload = Field(default_factory=Workload)
    """What is sent and how: arrivals, lengths, when each stage stops, warm-up, the SLO and validity's rules."""
    decide: Decide | None = None
    """placement every_gpu: how its GPUs' verdicts decide (the effect, the confidence, the most rounds and the time
    budget); unset: the defaults (rounds until each GPU is decided, up to 200 rounds or 600 s)."""
    quality: Quality = Field(default_factory=Quality)
    """What it keeps of its outputs (log-probabilities) and whether it scores the quality probe."""

    @model_validator(mode="after")
    def _dataset(self) -> GenerateSpec:
        if self.workload.dataset is not None and self.engine_record.loads_model:
            readers = " or ".join(r.name for r in engines().values() if not r.loads_model)
            raise ValueError(f"workload.dataset: text datasets are read by the {readers} engine only")
        if self.decide is not None and self.placement != "every_gpu":
            raise ValueError("decide: decides a run on every GPU (placement every_gpu): each GPU against its "
                             "siblings")
        return self

    def rounds(self) -> Decide | None:
        """How its GPUs' verdicts decide, round after round (placement every_gpu); None: one round."""
        if self.placement != "every_gpu":
            return None
        rule = self.decide or Decide()
        return rule if rule.max_rounds > 1 else None

    @property
    def runner(self) -> str:
        return self.engine

    @property
    def engine_record(self) -> EngineRecord:
        return engine_record(self.engine)

    @property
    def options(self) -> BaseModel:
        """The engine's options: the one section of the spec named after its engine."""
        return getattr(self, self.engine)

    def paths(self) -> dict[str, str]:
        """The files the run reads on its submitter's behalf, by dotted field: admission holds each under the roots,
        and the worker opens each again as it loads (models/confinement.py)."""
        paths = {}
        if isinstance(self.workload.arrivals, Trace):
            paths["workload.arrivals.path"] = self.workload.arrivals.path
        if self.workload.dataset is not None:
            paths["workload.dataset.path"] = self.workload.dataset.path
        return paths

    def urls(self) -> dict[str, str]:
        """Where the run sends requests or reads a page, by dotted field: hosts the daemon's settings allow."""
        return {}

    def key_envs(self) -> dict[str, str]:
        """Variables whose values the run sends (as a key), by dotted field: those the daemon's settings allow."""
        return {}

    def cpu_threads(self) -> tuple[tuple, int] | None:
        """(field, n): the CPU threads the engine runs with, at most the cores its worker may use."""
        return None

    def host_bytes(self) -> tuple[tuple, int, str] | None:
        """(field, bytes, what holds them): host RAM the engine holds beside the worker (its client processes)."""
        return None

    def tokenizer(self) -> str | None:
        """Where the tokenizer that sizes a text prompt is (a server's model): a local directory."""
        return None

    def server(self) -> str | None:
        """The server a served model is reached at (its base URL); None: the model is benchd's."""
        return None

    def served_model(self) -> str:
        """The model's name in its requests and telemetry (gen_ai.request.model)."""
        return self.model

    def operation(self) -> str:
        """What a request is (gen_ai.operation.name): a completion of the prompt, or a chat."""
        return "text_completion"

    def metrics_page(self) -> tuple[str, float] | None:
        """(URL, seconds between reads) of its server's Prometheus page, read by the daemon during the run."""
        return None

    def load_problem(self, first: str) -> str | None:
        """One line for `benchd run` when what the run prepares failed (first: the error's first line); None: the
        model's own message (cli/run.py)."""
        return None


# ---- timed runs: a training step, single kernels ---------------------------------------------------


class TrainStepSpec(SpecBase):
    """A training step of the spec's model, each phase timed on its own."""

    kind: Literal["train_step"]
    """A training step of the spec's model, each phase timed on its own."""
    train_step: TrainStepOptions = Field(default_factory=TrainStepOptions)
    """The step's batch, context, phases, warm-up and steps."""

    @model_validator(mode="after")
    def _autocast(self) -> TrainStepSpec:
        if self.train_step.autocast and self.dtype not in ("auto", "float32"):
            raise ValueError(f"train_step.autocast: needs float32 weights (dtype auto or float32), not {self.dtype}")
        return self


class KernelSpec(SpecBase):
    """Single kernels at given shapes, each implementation timed on the device."""

    kind: Literal["kernel"]
    """Single kernels at given shapes, each implementation timed on the device."""
    kernel: KernelOptions
    """The op, its shapes and implementations, warm-up and repeats."""

    @model_validator(mode="before")
    @classmethod
    def _required(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("kernel") is None:
            raise ValueError("kernel: required when kind is kernel (op, shapes, …)")
        return data

    @property
    def subject(self) -> str:
        return self.kernel.op
