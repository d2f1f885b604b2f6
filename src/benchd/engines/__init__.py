"""Generation engines, each a folder of its own that declares itself (spec/engines.py finds them): its torch-free
`spec.py` holds its options, its spec and its record; what runs it is imported in the worker only, through the
record's `create`. Beside them, the small interface they implement (engines.base) and what they share."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from benchd.engines.base import Engine, EngineFailure, EngineLoad, GenerationRequest, TokenSink
from benchd.models.texts import resolved

if TYPE_CHECKING:
    from benchd.models.loading import LoadedModel
    from benchd.spec import GenerateSpec

__all__ = ["Engine", "EngineFailure", "EngineLoad", "GenerationRequest", "TokenSink", "create_engine"]


def create_engine(loaded: LoadedModel | None, spec: GenerateSpec) -> Engine:
    """The spec's engine, made by its record's `create` (loaded: None where the engine loads no model), from the
    spec with what it left to the model decided (models/texts.py: EOS, log-probabilities)."""
    module, function = spec.engine_record.create.split(":")
    return getattr(importlib.import_module(module), function)(loaded, resolved(spec))
