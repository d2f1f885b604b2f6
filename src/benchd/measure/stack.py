"""A run's stack: every field of its spec and of its metadata that can change a figure, as flat named values. The
one definition that comparisons (the stack each side ran on, and what differs), a matrix's variants, the history
(what moved between two segments) and a run's report read (docs/figures.md, "The stack")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

# The named fields, in the order a reader scans them (what it ran on first), with the name a reader sees. Then the
# engine's settings in effect (engine_settings.*: its options as the engine resolved them) and the workload's own
# fields (workload.*), each flattened to its path.
FIELDS: dict[str, str] = {
    "model": "model", "device": "device", "gpu_uuids": "GPU UUIDs", "node": "node", "dtype": "dtype",
    "engine": "engine", "attn_implementation": "attention", "attention_kernel": "attention kernel",
    "quantization": "quantization", "quantization_method": "quantization method", "compile": "compile",
    "torch_threads": "torch threads", "tensor_parallel": "tensor parallel", "placement": "placement",
    "environment": "environment", "benchd_version": "benchd", "python_version": "Python", "torch_version": "torch",
    "transformers_version": "transformers", "cuda_version": "CUDA", "driver_version": "NVIDIA driver",
    "vbios_version": "firmware (VBIOS)", "fault": "injected fault",
    "commit": "commit", "label": "label", "seed": "seed",
}
# What the metadata holds about the engine or the workload that is derived, not set (a memory plan's figures follow
# from the settings), or judges figures without changing them (the SLO, the validity rules).
DERIVED = ("engine_settings.memory_plan",)
JUDGES = ("workload.slo", "workload.validity")


def name(key: str) -> str:
    """The name a reader sees: transformers_version → transformers; a flattened path as it is."""
    return FIELDS.get(key, key)


def device(metadata: Mapping[str, Any]) -> str | None:
    """The device a run ran on, by the name that says most: a GPU's model (cuda:0), or cpu (x86_64)."""
    where, model = metadata.get("device"), metadata.get("device_name")
    if where is None or not model or model == where:
        return where or model
    return f"{model} ({where})" if where.startswith("cuda") else f"{where} ({model})"


def _flat(prefix: str, value: Any) -> list[tuple[str, str]]:
    if isinstance(value, Mapping):
        return [item for k, v in value.items() for item in _flat(f"{prefix}.{k}", v)]
    return [] if value is None else [(prefix, str(value))]


def stack_of(spec: Mapping[str, Any] | None, metadata: Mapping[str, Any] | None,
             hardware: Mapping[str, Any] | None = None, node: str | None = None) -> dict[str, str]:
    """A run's stack, each field's value as a string (a field with no value is absent): what its metadata says was
    in effect (versions, device, dtype, attention, threads, the engine's settings), where the metadata is silent
    what its spec asked, its GPUs by UUID (another card of the same model is another GPU) and its node (the
    store's, else the host the worker saw)."""
    spec, meta = spec or {}, metadata or {}
    commit = meta.get("commit") or spec.get("commit")
    values: dict[str, Any] = {
        **{key: meta.get(key) if meta.get(key) is not None else spec.get(key) for key in FIELDS},
        "device": device(meta) or spec.get("device"),
        "gpu_uuids": ",".join(g.get("uuid") or "" for g in (hardware or {}).get("gpus") or []) or None,
        "node": node or meta.get("host"),
        # the loaded weights' type (auto resolved), as the worker recorded it; older runs: their model cost's
        "dtype": meta.get("dtype") or (meta.get("model_cost") or {}).get("dtype") or spec.get("dtype"),
        "commit": (commit.get("commit") or commit.get("branch")) if isinstance(commit, Mapping) else commit,
    }
    out = {key: str(value) for key, value in values.items() if value is not None}
    nested = [*_flat("engine_settings", meta.get("engine_settings") or {}),
              *_flat("workload", spec.get("workload") or {})]
    out.update((key, value) for key, value in nested if not key.startswith(DERIVED + JUDGES))
    return out


def order(keys: set[str] | Sequence[str]) -> list[str]:
    """The named fields first, in their order, then the flattened paths, sorted."""
    return [k for k in FIELDS if k in keys] + sorted(k for k in keys if k not in FIELDS)


def most_common(stacks: Sequence[Mapping[str, str]], key: str) -> tuple[str | None, bool]:
    """A field's most common value over runs' stacks, and whether some run had another."""
    counts = Counter(s.get(key) for s in stacks)
    value, count = counts.most_common(1)[0]
    return value, count < len(stacks)
