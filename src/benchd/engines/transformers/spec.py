"""transformers' continuous batching in benchd's worker, the default engine: its options, its spec and its record
(no torch here; the engine itself is engines/transformers/engine.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from benchd.engines.transformers.memory import TransformersMemory
from benchd.spec.engines import EngineRecord
from benchd.spec.fields import INT_MAX, PositiveInt, Strict
from benchd.spec.run import GenerateSpec

THREADS_MAX = 4096  # torch's CPU threads: admission holds a spec to the cores its worker may use


class TransformersOptions(Strict):
    """Continuous batching settings. None means: benchd's default for the device (see engines)."""

    block_size: Annotated[int, Field(ge=4, le=INT_MAX)] | None = None
    """Tokens a cache block holds (at least 4: transformers' paged cache minimum); default: 32 on a CPU, 256 on a GPU.
    """
    num_blocks: PositiveInt | None = None
    """Blocks of the KV cache; default: 256 on a CPU, on a GPU as many as benchd's plan fits in the memory a run may
    use."""
    max_batch_tokens: PositiveInt | None = None
    """Tokens a step may carry, prefill chunks and decodes together; default: 256 on a CPU, 2,048 on a GPU (fewer where
    a step's attention mask would pass 2³¹ elements)."""
    max_requests_per_batch: PositiveInt | None = None
    """Requests a step may carry; default: transformers' (1,024)."""
    scheduler: Literal["fifo", "prefill_first", "split"] | None = None
    """How a step is filled: transformers' `fifo` (decodes first, then prefill chunks in the same step) or
    `prefill_first`, or benchd's `split` (a step of decodes alone or of prefills alone, alternating while both wait:
    engines/transformers/scheduling.py); default: split on a GPU, fifo on a CPU."""
    use_cuda_graph: bool | None = None
    """Capture each step shape's CUDA graph; default: on a GPU, yes."""
    use_async_batching: bool | None = None
    """Prepare the next step on the host while the device runs the last (two IO pairs); default: on a GPU, for an
    attention with no step mask."""
    compile_level: Annotated[int, Field(ge=0, le=3)] | None = None
    """transformers' compile level of the forward (0: none, to 3)."""
    cpu_threads: Annotated[int, Field(ge=1, le=THREADS_MAX)] | None = None
    """torch's intra-op CPU threads while the engine runs (the paged sdpa path builds each step's attention mask with
    CPU tensor ops on the generation thread); at most the cores its worker may use."""
    library_defaults: bool = False
    """Pass nothing benchd would choose: transformers' own defaults, and its own sizing of the cache."""


class TransformersSpec(GenerateSpec):
    """Generation by transformers' continuous batching, in the worker (the default engine)."""

    engine: Literal["transformers"] = "transformers"
    """transformers' continuous batching in benchd's worker (the default engine)."""
    transformers: TransformersOptions = Field(default_factory=TransformersOptions)
    """Continuous batching's settings."""

    @property
    def options(self) -> TransformersOptions:
        return self.transformers

    def cpu_threads(self) -> tuple[tuple, int] | None:
        threads = self.transformers.cpu_threads
        return (("transformers", "cpu_threads"), threads) if threads is not None else None


ENGINE = EngineRecord(
    name="transformers", spec=TransformersSpec, create="benchd.engines.transformers.engine:create",
    loads_model=True, stamps="engine", genai_provider="transformers", tensor_parallel=True, paged_attention=True,
    memory=TransformersMemory(), default=True)
