"""What to run: a RunSpec (spec/union.py), a union on its kind and engine, and its parts, validated at the edge; no
torch. The names below are the package's API, wherever each is defined; each engine's options and spec are in its
folder of benchd/engines (spec/engines.py finds them)."""

from __future__ import annotations

from benchd.spec.engines import EngineRecord, engine_record, engines
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
from benchd.spec.run import GenerateSpec, KernelSpec, SpecBase, TrainStepSpec
from benchd.spec.slo import SLO
from benchd.spec.timed import AttentionKernel, AttentionShape, MatmulKernel, MatmulShape
from benchd.spec.union import (
    RunSpec,
    SpecError,
    format_validation_error,
    load_spec,
    parse_spec,
    read_document,
    spec_fields,
    validate_spec,
)
from benchd.spec.workload import (
    FixedLength,
    ListLength,
    NormalLength,
    TextDataset,
    UniformLength,
    Workload,
    length_upper_bound,
)

__all__ = ["LABEL_MAX", "MODEL_MAX", "NAME_MAX", "SLO", "ArrivalProfile", "AttentionKernel", "AttentionShape",
           "Capacity", "Concurrent", "Constant", "EngineRecord", "FixedLength", "Gamma", "GenerateSpec",
           "KernelSpec", "ListLength", "MatmulKernel", "MatmulShape", "Name", "NormalLength", "Poisson", "Ramp",
           "RunSpec", "SpecBase", "SpecError", "Sweep", "Synchronous", "TextDataset", "Trace", "TrainStepSpec",
           "UniformLength", "Workload", "describe_profile", "engine_record", "engines", "format_validation_error",
           "length_upper_bound", "load_spec", "parse_spec", "read_document", "spec_fields", "validate_spec"]
