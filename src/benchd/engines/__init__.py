"""Generation backends behind one small interface (engines.base), chosen by name from a plain dict; each
implementation is imported when chosen (those that run a model import torch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from benchd.engines.base import Engine, EngineFailure, EngineLoad, GenerationRequest, TokenSink

if TYPE_CHECKING:
    from benchd.models.loading import LoadedModel
    from benchd.spec import GenerateSpec, OpenAISpec, StaticSpec, TransformersSpec

__all__ = ["ENGINES", "Engine", "EngineFailure", "EngineLoad", "GenerationRequest", "TokenSink", "create_engine"]


def _transformers(loaded: LoadedModel, spec: TransformersSpec) -> Engine:
    from benchd.engines.transformers import TransformersEngine

    return TransformersEngine(loaded, spec.transformers, spec.workload, spec.attn_implementation)


def _static(loaded: LoadedModel, spec: StaticSpec) -> Engine:
    from benchd.engines.static import StaticEngine

    return StaticEngine(loaded, spec.static, spec.workload, spec.compile)


def _openai(loaded: LoadedModel | None, spec: OpenAISpec) -> Engine:
    from benchd.engines.openai.engine import OpenAIEngine

    return OpenAIEngine(spec.openai, spec.workload, spec.model)


ENGINES: dict[str, Callable[[LoadedModel, Any], Engine]] = {  # by GenerateSpec.engine, each taking its spec
    "transformers": _transformers,
    "static": _static,
    "openai": _openai,
}


def create_engine(loaded: LoadedModel, spec: GenerateSpec) -> Engine:
    return ENGINES[spec.engine](loaded, spec)
