"""Specs and helpers shared by the tests."""

from benchd.spec import parse_spec


def make_spec(**overrides):
    """A small CPU spec; keyword arguments replace top-level fields or, with a workload dict, the workload."""
    data = {
        "name": "test",
        "model": "tiny",
        "device": "cpu",
        "dtype": "float32",
        "transformers": {"block_size": 16, "num_blocks": 64, "max_batch_tokens": 128},
        "static": {"batch_size": 4},
        "workload": {
            "arrivals": {"profile": "concurrent", "concurrency": 4},
            "stop": {"requests": 12},
            "prompt_tokens": {"dist": "uniform", "min": 4, "max": 24},
            "output_tokens": {"dist": "uniform", "min": 2, "max": 12},
        },
    }
    workload = overrides.pop("workload", None)
    if workload:
        data["workload"].update(workload)
    data.update(overrides)
    return parse_spec(data)
