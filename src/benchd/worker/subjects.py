"""What a generation run's requests are made for and measured on, as its engine's record says (spec/engines.py,
loads_model): a model this worker loaded (token prompts from its vocabulary, its device's memory, its stack and
roofline, the quality probe), or one a server holds (text prompts, sized by the tokenizer its spec names; no device
of the worker's is the run's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from benchd.loadgen.contents import RequestContent, contents, real_contents, real_text_contents, text_contents
from benchd.measure.roofline import ModelCost
from benchd.models.flops import Shape
from benchd.models.memory import check_fits
from benchd.models.quantize import streamed_weight_bytes
from benchd.models.texts import ChatText, has_chat_template
from benchd.models.tokenizer import load_tokenizer
from benchd.protocol.metadata import RunMetadata
from benchd.spec import GenerateSpec, SpecError
from benchd.worker.provenance import record_stack, torch_threads

if TYPE_CHECKING:
    import torch

    from benchd.engines import Engine
    from benchd.models.loading import LoadedModel

Streams = Callable[[], Callable[[], RequestContent]]  # a fresh stream of request contents, a stage each


class Subject(Protocol):
    """What worker/core.py asks of a run's model: its device (None: none of the worker's is the run's), the model
    loaded here (None: a server's, which nothing of the worker's probes, faults or measures), its load's seconds,
    its requests' contents, and what it adds to the run's metadata once the engine started."""

    device: torch.device | None
    loaded: LoadedModel | None
    load_s: float | None
    streams: Streams

    def describe(self, metadata: RunMetadata, spec: GenerateSpec, engine: Engine) -> None: ...


class Served:
    """A model a server holds: text prompts, real or sized by the spec's tokenizer (a served model's)."""

    device: torch.device | None = None  # nothing of the worker's device is the run's
    loaded: LoadedModel | None = None
    load_s: float | None = None

    def __init__(self, spec: GenerateSpec) -> None:
        name = spec.tokenizer()
        tokenizer = load_tokenizer(name) if name else None
        if spec.workload.prompts == "real":
            chat = ChatText(chat_tokenizer(tokenizer, name or "its server's model"))
            self.streams: Streams = lambda: real_text_contents(spec.workload, spec.seed, chat).__next__
        else:
            self.streams = lambda: text_contents(spec.workload, spec.seed, tokenizer).__next__

    def describe(self, metadata: RunMetadata, spec: GenerateSpec, engine: Engine) -> None:
        metadata.device_name = spec.server()


class Loaded:
    """A model this worker loaded, kept across runs: token prompts from its vocabulary (or real ones through its
    chat template), held to its positions; its stack, its attention's kernel and its roofline's inputs recorded.
    ranks: the tensor-parallel group's size (1 alone), each rank running its share of every step; limits: the
    device's measured limits by its type (None: the device cannot run the probe)."""

    def __init__(self, spec: GenerateSpec, loaded: LoadedModel, load_s: float | None, ranks: int,
                 limits: Callable[[str], dict | None]) -> None:
        check_fits(spec, loaded.max_positions)
        self.loaded: LoadedModel | None = loaded
        self.model, self.load_s, self.ranks, self.limits = loaded, load_s, ranks, limits
        self.device: torch.device | None = loaded.device
        if spec.workload.prompts == "real":
            chat = ChatText(chat_tokenizer(loaded.tokenizer, spec.model))
            self.streams: Streams = lambda: real_contents(spec.workload, spec.seed, chat).__next__
        else:
            self.streams = lambda: contents(spec.workload, spec.seed, loaded.vocab_size, loaded.special_ids).__next__

    def describe(self, metadata: RunMetadata, spec: GenerateSpec, engine: Engine) -> None:
        """After the engine started: the threads as it set them, the attention it switched to."""
        metadata.torch_threads = torch_threads()
        record_stack(metadata, spec, self.model)
        metadata.attention_kernel = engine.attention.kernel if engine.attention is not None else None
        metadata.device_limits, metadata.model_cost = self.limits(self.model.device.type), self.cost()

    def cost(self) -> dict[str, Any]:
        """What a step of the model costs (benchd.measure.roofline): in a tensor-parallel group, each rank's share
        (its heads, its part of the MLP and of the weights), as each rank's device runs its share of every step."""
        model = self.model
        cost = ModelCost.of(Shape.of(model.model.config).sharded(self.ranks),
                            streamed_weight_bytes(model.model) // self.ranks, model.dtype.itemsize)
        return {**cost.as_dict(), "dtype": str(model.dtype)[6:]}


def chat_tokenizer(tokenizer: Any, model: str) -> Any:
    """The tokenizer real requests are made with: one that has a chat template."""
    if not has_chat_template(tokenizer):
        raise SpecError(f"workload.prompts: real requests are made with a tokenizer that has a chat template, and "
                        f"{model} has none")
    return tokenizer
