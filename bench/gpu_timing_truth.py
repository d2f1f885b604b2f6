"""How true benchd's per-token timestamps are: each continuous-batching step is bracketed by CUDA events, and
every token's host stamp (record_timestamps, what benchd records) is compared with the GPU completion time of
the step that produced it.

    python bench/gpu_timing_truth.py

The GPU clock is put on the host's perf_counter() through a reference event that is synchronized right
before reading the host clock. Offset = token stamp − its step's end on the GPU (host processing, the
device-to-host copy and the sync); spread = how much that varies. Runs without async batching, so that
each step's tokens are stamped in the update that follows it.
"""

from __future__ import annotations

import json
import os
import statistics
import time

import numpy as np
import torch
from common import environment
from transformers.generation.continuous_batching.continuous_api import ContinuousBatchProcessor

from benchd.models.loading import load_model
from benchd.daemon.inprocess import run_local as run
from benchd.spec import parse_spec

SPEC = {
    "name": "timing-truth", "model": "llama-3.2-1b", "dtype": "bfloat16", "device": "cuda", "seed": 0,
    "transformers": {"use_cuda_graph": True, "use_async_batching": False},
    "workload": {"arrivals": {"profile": "concurrent", "concurrency": 8}, "stop": {"requests": 16},
                 "prompt_tokens": {"dist": "fixed", "value": 128}, "output_tokens": {"dist": "fixed", "value": 128}},
}


def main() -> None:
    print(environment(), flush=True)
    steps: list[dict] = []  # per step: the GPU end event, host times around the update that stamps its tokens
    original_step, original_update = ContinuousBatchProcessor._generation_step, ContinuousBatchProcessor.update_batch

    def generation_step(self, model):
        original_step(self, model)
        end = torch.cuda.Event(enable_timing=True)
        end.record(self.inputs_and_outputs.compute_stream or torch.cuda.current_stream())
        steps.append({"end": end})

    def update_batch(self):
        steps[-1]["update_start"] = time.perf_counter()
        original_update(self)
        steps[-1]["update_end"] = time.perf_counter()

    ContinuousBatchProcessor._generation_step = generation_step
    ContinuousBatchProcessor.update_batch = update_batch
    try:
        loaded = load_model(SPEC["model"], SPEC["dtype"], SPEC["device"], seed=0)
        torch.cuda.synchronize()
        reference = torch.cuda.Event(enable_timing=True)
        reference.record()
        reference.synchronize()
        reference_host = time.perf_counter()  # the reference event's completion, on the host clock (≈ ±10 µs)
        outcome = run(parse_spec(SPEC), loaded=loaded)
    finally:
        ContinuousBatchProcessor._generation_step, ContinuousBatchProcessor.update_batch = original_step, original_update
    torch.cuda.synchronize()
    gpu_end = [reference_host + reference.elapsed_time(s["end"]) / 1e3 for s in steps if "update_start" in s]
    windows = [(s["update_start"], s["update_end"]) for s in steps if "update_start" in s]
    offsets, itl_host, itl_gpu = [], [], []
    for record in outcome.stages[0].records:
        step_of = []
        for stamp in record.arrival_s:
            k = next(i for i, (a, b) in enumerate(windows) if a <= stamp <= b)
            step_of.append(k)
            offsets.append(stamp - gpu_end[k])
        for (a, ka), (b, kb) in zip(zip(record.arrival_s, step_of), zip(record.arrival_s[1:], step_of[1:])):
            itl_host.append(b - a)
            itl_gpu.append(gpu_end[kb] - gpu_end[ka])
    offsets_us = np.array(offsets) * 1e6
    itl_error_us = (np.array(itl_host) - np.array(itl_gpu)) * 1e6
    result = {
        "environment": environment(), "steps": len(gpu_end), "tokens": len(offsets),
        "offset_us": {"mean": float(offsets_us.mean()), "std": float(offsets_us.std()),
                      "p50": float(np.percentile(offsets_us, 50)), "p99": float(np.percentile(offsets_us, 99)),
                      "min": float(offsets_us.min()), "max": float(offsets_us.max())},
        "itl_error_us": {"mean": float(itl_error_us.mean()), "std": float(itl_error_us.std()),
                         "p99_abs": float(np.percentile(np.abs(itl_error_us), 99))},
        "itl_gpu_p50_ms": statistics.median(itl_gpu) * 1e3,
        "itl_host_p50_ms": statistics.median(itl_host) * 1e3,
    }
    with open(os.path.join(os.environ.get("OUT", "."), "timing_truth.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
