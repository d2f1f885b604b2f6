"""One definition of a run's stack (measure/stack.py): a change to any field that can change a figure shows in a
comparison's stack difference, a matrix variant's against its baseline, the history's stack between two segments,
and the run's report page."""

import copy

import pytest

from benchd.measure.compare import compare
from benchd.measure.context import RunFacts
from benchd.measure.history import stack_difference
from benchd.measure.matrix import compare_matrix, run_figures
from benchd.measure.sides import RunData, side_of
from benchd.measure.stack import stack_of
from benchd.report.pages import run_page

SPEC = {"kind": "generate", "name": "w", "model": "tiny", "dtype": "auto", "device": "cuda", "engine": "transformers",
        "seed": 0, "label": "nightly", "tensor_parallel": 1, "environment": "current",
        "workload": {"stop": {"requests": 16}, "prompt_tokens": {"dist": "fixed", "value": 128},
                     "slo": {"ttft_p99_s": 1.0}}}
METADATA = {"benchd_version": "0.1.0", "python_version": "3.11.7", "torch_version": "2.11.0",
            "transformers_version": "5.17.0", "cuda_version": "12.8", "driver_version": "570.1", "device": "cuda:0",
            "device_name": "NVIDIA H100 80GB HBM3", "torch_threads": 4, "host": "pod-1", "model": "tiny",
            "dtype": "bfloat16", "environment": "current", "label": "nightly", "commit": {"commit": "abc1234"},
            "attn_implementation": "paged|sdpa", "attention_kernel": "torch 2.11.0", "quantization": "none",
            "compile": "off", "engine_settings": {"continuous_batching": {"max_batch_tokens": 128},
                                                  "memory_plan": {"kv_bytes": 1}},
            "started_at": "2026-11-20T14:00:00+00:00"}
HARDWARE = {"samples": 10, "window_s": 1.0, "gpus": [{"gpu": "0", "uuid": "GPU-1111", "name": "NVIDIA H100"}]}

# (field, where it lives, its path there, its other value): every field the issue names, and the spec's own.
CHANGES = [
    ("dtype", "metadata", ("dtype",), "float16"),
    ("engine_settings.continuous_batching.max_batch_tokens", "metadata",
     ("engine_settings", "continuous_batching", "max_batch_tokens"), 16),
    ("attn_implementation", "metadata", ("attn_implementation",), "paged|eager"),
    ("attention_kernel", "metadata", ("attention_kernel",), "flash-attn 2.8.3"),
    ("quantization", "metadata", ("quantization",), "int8_weight_only"),
    ("compile", "metadata", ("compile",), "max-autotune"),
    ("torch_threads", "metadata", ("torch_threads",), 2),
    ("transformers_version", "metadata", ("transformers_version",), "5.18.0"),
    ("torch_version", "metadata", ("torch_version",), "2.12.0"),
    ("python_version", "metadata", ("python_version",), "3.12.1"),
    ("cuda_version", "metadata", ("cuda_version",), "13.0"),
    ("benchd_version", "metadata", ("benchd_version",), "0.2.0"),
    ("commit", "metadata", ("commit", "commit"), "def5678"),
    ("driver_version", "metadata", ("driver_version",), "580.2"),
    ("device", "metadata", ("device_name",), "NVIDIA H200"),
    ("gpu_uuids", "hardware", ("gpus", 0, "uuid"), "GPU-2222"),
    ("node", "node", (), "node-2"),
    ("environment", "metadata", ("environment",), "next"),
    ("label", "metadata", ("label",), "patched"),
    ("model", "metadata", ("model",), "small"),
    ("seed", "spec", ("seed",), 7),
    ("tensor_parallel", "spec", ("tensor_parallel",), 2),
    ("workload.stop.requests", "spec", ("workload", "stop", "requests"), 32),
]


def run(change=None) -> dict:
    """A stored run's columns: its spec, metadata, hardware and node, with one field changed."""
    row = {"spec": copy.deepcopy(SPEC), "metadata": copy.deepcopy(METADATA), "hardware": copy.deepcopy(HARDWARE),
           "node": "node-1"}
    if change is not None:
        _, where, path, value = change
        if where == "node":
            row["node"] = value
        else:
            target = row[where]
            for step in path[:-1]:
                target = target[step]
            target[path[-1]] = value
    return row


def facts(row: dict) -> RunFacts:
    return RunFacts("w", row["metadata"]["label"], None, None, row["spec"], row["metadata"], "", row["hardware"],
                    row["node"])


@pytest.mark.parametrize("change", CHANGES, ids=[c[0] for c in CHANGES])
def test_a_change_to_any_field_shows_in_comparisons_matrices_the_history_and_the_report(change):
    field, value = change[0], change[3]
    before, after = run(), run(change)
    # A comparison of the two runs: the field, and only it, differs.
    sides = [side_of([name], [RunData([], 100.0, None, True, None, facts(row), [])])
             for name, row in (("a", before), ("b", after))]
    assert [c.what for c in compare(*sides).stack_difference] == [field]
    # A matrix whose variant is the changed run: its stack against the baseline's.
    figures = {i: [run_figures(f"r{i}", "succeeded", [], {"output_tokens_per_s": 100.0}, row["metadata"],
                               row["hardware"], row["spec"], row["node"])] for i, row in enumerate((before, after))}
    variants = [{"index": i, "label": f"v{i}", "values": {}} for i in (0, 1)]
    matrix = compare_matrix(variants, figures, baseline=0)
    assert [c.what for c in matrix.variants[1].stack_difference] == [field]
    # The history: three runs before a change point, two after.
    stacks = [stack_of(r["spec"], r["metadata"], r["hardware"], r["node"]) for r in (before, after)]
    shifts = stack_difference([stacks[0]] * 3, [stacks[1]] * 2)
    assert [s.field for s in shifts] == [field] and str(value) in shifts[0].after
    # The report: the changed run's page shows the value.
    page = run_page({"id": "r", "status": "succeeded", "spec": after["spec"], "run_metadata": after["metadata"],
                     "hardware": after["hardware"], "node": after["node"], "summary": []}, [])
    assert str(value) in page.split("<section id=stack>")[1]


def test_what_judges_or_is_derived_is_not_the_stack():
    """The SLO and validity rules judge figures without changing them; the memory plan follows from the settings."""
    stack = stack_of(SPEC, METADATA, HARDWARE, "node-1")
    assert "workload.stop.requests" in stack and "engine_settings.continuous_batching.max_batch_tokens" in stack
    assert not [k for k in stack if k.startswith(("workload.slo", "workload.validity", "engine_settings.memory"))]
    assert (stack["dtype"], stack["device"], stack["commit"]) == ("bfloat16", "NVIDIA H100 80GB HBM3 (cuda:0)",
                                                                  "abc1234")
    # An older run's metadata has no dtype: its model cost's, else the spec's.
    older = {k: v for k, v in METADATA.items() if k != "dtype"}
    assert stack_of(SPEC, {**older, "model_cost": {"dtype": "float32"}})["dtype"] == "float32"
    assert stack_of(SPEC, older)["dtype"] == "auto"
