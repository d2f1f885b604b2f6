"""What to run: a RunSpec and its parts (spec.run), validated at the edge; no torch. The names below are the
package's API, wherever each is defined."""

from __future__ import annotations

from benchd.spec.engines import OpenAIOptions, StaticOptions, TransformersOptions
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
from benchd.spec.run import RunSpec, SpecError, format_validation_error, load_spec, parse_spec, read_document
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
           "FixedLength", "Gamma", "LABEL_MAX", "ListLength", "MODEL_MAX", "MatmulKernel", "MatmulShape",
           "NAME_MAX", "Name", "NormalLength", "OpenAIOptions", "Poisson", "Ramp", "RunSpec", "SLO",
           "SpecError", "StaticOptions", "Sweep", "Synchronous", "TextDataset", "Trace",
           "TransformersOptions", "UniformLength", "Workload", "describe_profile", "format_validation_error",
           "length_upper_bound", "load_spec", "parse_spec", "read_document"]
