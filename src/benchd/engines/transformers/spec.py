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

    block_size: Annotated[int, Field(ge=4, le=INT_MAX)] | None = None  # transformers' paged cache minimum
    num_blocks: PositiveInt | None = None
    max_batch_tokens: PositiveInt | None = None
    max_requests_per_batch: PositiveInt | None = None
    use_cuda_graph: bool | None = None
    use_async_batching: bool | None = None
    compile_level: Annotated[int, Field(ge=0, le=3)] | None = None
    # torch's intra-op CPU threads while the engine runs (the paged sdpa path builds each step's attention mask with
    # CPU tensor ops on the generation thread); not a transformers setting
    cpu_threads: Annotated[int, Field(ge=1, le=THREADS_MAX)] | None = None
    library_defaults: bool = False  # pass nothing benchd would choose: transformers' own defaults


class TransformersSpec(GenerateSpec):
    """Generation by transformers' continuous batching, in the worker (the default engine)."""

    engine: Literal["transformers"] = "transformers"
    transformers: TransformersOptions = Field(default_factory=TransformersOptions)

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
