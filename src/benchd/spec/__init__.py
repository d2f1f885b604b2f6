"""What to run: a RunSpec (spec.run), a union on its kind, and its parts, validated at the edge; no torch. The names
below are the package's API, wherever each is defined."""

from __future__ import annotations

from benchd.spec.engines import EngineName, OpenAIOptions, StaticOptions, TransformersOptions
from benchd.spec.fields import LABEL_MAX, MODEL_MAX, NAME_MAX, Name
from benchd.spec.profiles import (
    ArrivalProfile,
    Capacity,
    Concurrent,
    Constant,
    Gamma,
    Poisson,
    Ramp,
    Sweep,
    Synchronous,
    Trace,
    describe_profile,
)
from benchd.spec.run import (
    SPEC_FIELDS,
    GenerateSpec,
    KernelSpec,
    OpenAISpec,
    RunSpec,
    SpecBase,
    SpecError,
    StaticSpec,
    TrainStepSpec,
    TransformersSpec,
    format_validation_error,
    load_spec,
    parse_spec,
    read_document,
    validate_spec,
)
from benchd.spec.slo import SLO
from benchd.spec.timed import AttentionKernel, AttentionShape, MatmulKernel, MatmulShape
from benchd.spec.workload import (
    FixedLength,
    ListLength,
    NormalLength,
    TextDataset,
    UniformLength,
    Workload,
    length_upper_bound,
)

__all__ = ["ArrivalProfile", "AttentionKernel", "AttentionShape", "Capacity", "Concurrent", "Constant",
           "EngineName", "FixedLength", "Gamma", "GenerateSpec", "KernelSpec", "LABEL_MAX", "ListLength", "MODEL_MAX",
           "MatmulKernel", "MatmulShape", "NAME_MAX", "Name", "NormalLength", "OpenAIOptions", "OpenAISpec",
           "Poisson", "Ramp", "RunSpec", "SLO", "SPEC_FIELDS", "SpecBase", "SpecError", "StaticOptions",
           "StaticSpec", "Sweep", "Synchronous", "TextDataset", "Trace", "TrainStepSpec", "TransformersOptions",
           "TransformersSpec", "UniformLength", "Workload", "describe_profile", "format_validation_error",
           "length_upper_bound", "load_spec", "parse_spec", "read_document", "validate_spec"]
