"""Static batches of generate() in benchd's worker, the baseline: its options, its spec, its memory and its record
(no torch here; the engine itself is engines/static/engine.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from benchd.models.flops import Shape
from benchd.models.memory import LOGIT_BYTES, EngineMemory, Footprint
from benchd.spec import traces
from benchd.spec.engines import EngineRecord
from benchd.spec.fields import PositiveInt, Strict
from benchd.spec.run import GenerateSpec


class StaticOptions(Strict):
    batch_size: PositiveInt = 8
    """Requests a generate() call takes at once: waiting requests are batched up to it."""


class StaticSpec(GenerateSpec):
    """Generation by static batches of generate(), in the worker."""

    engine: Literal["static"]
    """Static batches of generate() in benchd's worker."""
    static: StaticOptions = Field(default_factory=StaticOptions)
    """The static engine's settings."""

    @property
    def options(self) -> StaticOptions:
        return self.static


class StaticMemory(EngineMemory[StaticSpec]):
    def footprint(self, spec: StaticSpec, device_type: str, shape: Shape, weights: int, element: int) -> Footprint:
        """A batch's prefill: its mask, K/V repeated for every query head, the logits."""
        kv_per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * element
        sequence = sum(traces.longest(spec.workload))  # a conversation's last turn, or a trace's longest request
        batch = spec.static.batch_size
        step = batch * sequence * (sequence * element + 2 * shape.heads * shape.head_dim * element)
        if device_type == "cpu":  # float32 scores per KV-head group, as continuous batching's (cache_figures)
            step += batch * shape.kv_heads * sequence * sequence * LOGIT_BYTES
        return Footprint(weights=weights, kv_cache=batch * sequence * kv_per_token,
                         activations=batch * shape.vocab * LOGIT_BYTES * 2 + step)


ENGINE = EngineRecord(
    name="static", spec=StaticSpec, create="benchd.engines.static.engine:create", loads_model=True, stamps="engine",
    genai_provider="transformers", compiles=True, memory=StaticMemory())
