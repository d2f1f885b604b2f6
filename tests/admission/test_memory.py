"""What a run may hold, judged before it is queued (src/benchd/admission/memory.py): the worker's plan made with the
memory the run may use, and a tensor-parallel group's share checked against each of its GPUs."""

from benchd.admission import Memory, Refused, admit
from benchd.daemon.settings import Settings
from benchd.hardware.devices import resolve
from benchd.models.memory import estimate
from benchd.spec import validate_spec

EIGHT = [(str(i), f"GPU-{i:04d}", "H200") for i in range(8)]


def test_admission_refuses_a_gpu_run_whose_step_or_cache_cannot_fit():
    """Admission makes the worker's plan with the memory the run may use (90 % of the GPU's free memory here): the
    weights, the cache for one request and the worst step's graph pool must fit, else the refusal names the field."""
    settings = Settings(device="cuda", model="tiny")
    slots = resolve("all", [("0", "GPU-0000", "H100")])
    body = {"model": "llama-3.1-8b", "dtype": "bfloat16", "device": "cuda:0",
            "workload": {"prompt_tokens": {"dist": "fixed", "value": 4096},
                         "output_tokens": {"dist": "fixed", "value": 1024}}}

    def refused(free_gib: float, **transformers) -> dict:
        try:
            admit(validate_spec({**body, "transformers": transformers}), settings,
                  Memory(lambda slot: int(free_gib * 2**30)), slots)
        except Refused as refusal:
            return {".".join(map(str, p.field)): p.reason for p in refusal.problems}
        return {}

    model = refused(20)["model"]  # 16 GB of weights fit 18 GiB; with a step's logits and graphs they do not
    assert "to hold one request of 5,120 tokens" in model and "graph pool" in model and "on cuda:0" in model
    assert refused(24) == {}
    assert "more than the 21.60 GiB" in refused(24, num_blocks=400)["transformers.num_blocks"]
    assert "may need 5120" in refused(24, num_blocks=10)["transformers.num_blocks"]  # footprint.fit_problems
    assert "transformers.max_batch_tokens" in refused(24, max_batch_tokens=65536)


def test_admission_checks_each_ranks_share_against_its_gpu():
    """llama-3.1-8b in bfloat16 (16 GB of weights) cannot fit one GPU with 12 GiB free, but its half fits each
    of two; on four GPUs with 8 GiB free each, the quarter fits and the half (TP=2) does not, refused per GPU. (With
    6 GiB the quarter does not either: its weights, the CUDA context and one step's logits over 128k tokens of
    vocabulary leave no room for a cache.)"""
    settings = Settings(device="cuda", model="tiny", limits={"memory_fraction": 0.9})
    body = {"model": "llama-3.1-8b", "dtype": "bfloat16", "device": "cuda:0",
            "workload": {"prompt_tokens": {"dist": "fixed", "value": 256},
                         "output_tokens": {"dist": "fixed", "value": 64}}}
    need = estimate(validate_spec(body), "cuda")
    assert need.sharded(2).weights == need.weights // 2 and need.sharded(2).activations == need.activations

    def refused(tp, free_gib, gpus):
        memory = Memory(lambda slot: free_gib << 30)
        try:
            admit(validate_spec({**body, "tensor_parallel": tp}), settings, memory,
                  resolve("all", gpus))
        except Refused as refusal:
            return {".".join(map(str, p.field)): p.reason for p in refusal.problems}
        return {}

    assert "model" in refused(1, 12, EIGHT[:2])
    assert refused(2, 12, EIGHT[:2]) == {}
    per_gpu = refused(2, 8, EIGHT[:4])
    assert "its 1/2 share" in per_gpu["model"] and "on cuda:1" in per_gpu["model"]
    assert refused(4, 8, EIGHT[:4]) == {}
    assert "model" in refused(4, 6, EIGHT[:4])
    assert "devices per group" in refused(8, 80, EIGHT[:4])["tensor_parallel"]
