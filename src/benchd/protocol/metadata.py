"""What identifies the stack a run measured: versions, device, host and the user's label. The worker collects it
(worker/provenance.py) and sends it in its Done; the daemon stores it with the run."""

from __future__ import annotations

from pydantic import BaseModel

from benchd.protocol.probe import Probe


class RunMetadata(BaseModel):
    run_id: str | None = None
    trace_id: str | None = None  # the run's trace (its span and every request's), when traced
    benchd_version: str
    python_version: str
    torch_version: str
    transformers_version: str
    cuda_version: str | None = None
    driver_version: str | None = None
    vbios_version: str | None = None  # the GPU's firmware (NVML's VBIOS version), of the worker's first GPU
    device: str
    device_name: str
    torch_threads: int | None = None  # torch's intra-op CPU threads for the run (a CUDA engine sets its own)
    host: str
    label: str | None = None
    environment: str | None = None  # the Python environment its worker ran in (the spec's), its versions above
    commit: dict | None = None  # the spec's commit (repository, branch, commit, message), when it gave one
    model: str
    model_load_s: float | None = None
    engine_settings: dict = {}
    # This run's place among its engine's runs: 1, the first after the engine started (with its model loaded or
    # kept), ran cold: its figures hold the engine's own warm-up (measure/compare.py, measure/history.py leave it
    # out beside warm runs).
    engine_run: int | None = None
    dtype: str | None = None  # the loaded weights' element type (the spec's auto resolved)
    # The stack in effect (benchd.spec.stack), read off the loaded model: a matrix's variants differ here.
    quantization: str | None = None
    quantization_method: str | None = None  # library, version and configuration
    quantized_layers: int | None = None
    quantize_s: float | None = None  # part of model_load_s
    weight_bytes: int | None = None  # parameters and buffers as stored on the device
    attn_implementation: str | None = None  # as the engine runs it (continuous batching's paged| variant)
    attention_kernel: str | None = None  # where that attention's kernel comes from: package and version
    compile: str | None = None
    # How far from the hardware (benchd.measure.roofline): the device's limits as its worker measured them
    # (hardware/speed.py: DeviceSpeed's fields), and what a step costs by the model's shape (ModelCost's fields).
    device_limits: dict | None = None
    model_cost: dict | None = None
    peak_memory_bytes: int | None = None  # torch's allocator peak over the run (CUDA only)
    peak_reserved_bytes: int | None = None  # what torch's allocator held at most (CUDA graph pools included)
    # A fault the settings injected into this run (BENCHD_FAULTS__*: tests and bench scripts): what it did, so that
    # no figure it bent passes for the stack's.
    fault: str | None = None
    # What the run's requests were (the spec's workload.prompts and ignore_eos as its worker resolved them), whether
    # its tokens' log-probabilities were kept, and its stack's quality probe (protocol/probe.py; the store keeps it
    # apart from the metadata: store/operations.py).
    prompts: str | None = None  # real | random
    ignore_eos: bool | None = None
    logprobs: bool | None = None
    probe: Probe | None = None
    probe_error: str | None = None  # why the probe could not be scored (out of memory, an attention it refused)
    started_at: str
    finished_at: str | None = None
