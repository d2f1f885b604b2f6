"""What to run: RunSpec and its parts, validated at the edge (no torch)."""

from benchd.spec.run import (
    ArrivalProfile, AttentionKernel, AttentionShape, Capacity, Concurrent, Constant, FixedLength, Gamma,
    LABEL_MAX, ListLength, MODEL_MAX, MatmulKernel, MatmulShape, NAME_MAX, Name, NormalLength, OpenAIOptions,
    Poisson, Ramp, RunSpec, SLO, SpecError, StaticOptions, Sweep, Synchronous, TextDataset, Trace,
    TransformersOptions, UniformLength, Workload, describe_profile, format_validation_error,
    length_upper_bound, load_spec, parse_spec,
)

__all__ = ["ArrivalProfile", "AttentionKernel", "AttentionShape", "Capacity", "Concurrent", "Constant", "FixedLength", "Gamma", "LABEL_MAX", "ListLength", "MODEL_MAX", "MatmulKernel", "MatmulShape", "NAME_MAX", "Name", "NormalLength", "OpenAIOptions", "Poisson", "Ramp", "RunSpec", "SLO", "SpecError", "StaticOptions", "Sweep", "Synchronous", "TextDataset", "Trace", "TransformersOptions", "UniformLength", "Workload", "describe_profile", "format_validation_error", "length_upper_bound", "load_spec", "parse_spec"]
