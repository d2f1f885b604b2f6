"""FLOPs and memory of a training step and of single kernels: by hand for the tiny preset, against torch's FLOP
counter, the 2.7B size, the peak table."""


import torch
from transformers import AutoModelForCausalLM

from benchd.models.flops import (
    Shape,
    attention_flops,
    forward_flops_per_token,
    matmul_flops,
    memory_breakdown,
    peak_tflops,
    step_flops,
)
from benchd.models.loading import load_model, parameter_count, preset_config

# ---- FLOPs and memory --------------------------------------------------------------------------


def test_flops_by_hand_for_the_tiny_preset():
    # d 64, ffn 128, 2 layers, 4 heads of 16, 2 KV heads, vocab 512; batch 2 × 8 tokens.
    shape = Shape.of(preset_config("tiny"))
    projections = 2 * 64 * 64 + 2 * 2 * 64 * 32 + 2 * 64 * 64  # q, k and v, o
    scores = 2 * 2 * 64 * 8  # Q·Kᵀ and P·V over 8 positions
    mlp = 3 * 2 * 64 * 128  # gate, up, down
    head = 2 * 64 * 512
    assert forward_flops_per_token(shape, 8) == 2 * (projections + scores + mlp) + head == 217_088
    flops = step_flops(shape, batch=2, context=8, backward=True)
    assert (flops.forward, flops.backward, flops.total) == (3_473_408, 6_946_816, 10_420_224)
    assert step_flops(shape, 2, 8, backward=False).total == 3_473_408


def test_flops_match_torch_flop_counter():
    """PyTorch's own count of every matmul in a real forward and backward of the tiny model (eager attention, so
    the attention matmuls are visible to it); the forward also has RoPE's tiny frequency matmul."""
    from torch.utils.flop_counter import FlopCounterMode

    model = load_model("tiny", "float32", "cpu", attn_implementation="eager").model
    model.train()
    ids = torch.randint(0, 512, (2, 8))
    with FlopCounterMode(display=False) as forward:
        loss = model(input_ids=ids, labels=ids).loss
    with FlopCounterMode(display=False) as backward:
        loss.backward()
    expected = step_flops(Shape.of(model.config), 2, 8, backward=True)
    rope = 2 * 8 * 8  # inv_freq (8) ⊗ positions (8)
    assert forward.get_total_flops() == expected.forward + rope
    assert backward.get_total_flops() == expected.backward


def test_the_2_7b_size_parameters_and_memory():
    with torch.device("meta"):  # the exact module tree, no memory
        model = AutoModelForCausalLM.from_config(preset_config("2.7B"))
    parameters = parameter_count(model)
    assert parameters == 3_406_809_600
    memory = memory_breakdown(parameters, Shape.of(model.config), 4, 512, 4, 4, "train")
    assert round(memory.parameters / 2**30, 2) == 12.69
    assert round(memory.gradients / 2**30, 2) == 12.69
    assert round(memory.optimizer_states / 2**30, 2) == 25.38
    assert memory.total == memory.parameters * 4 + memory.activations
    forward_only = memory_breakdown(parameters, Shape.of(model.config), 4, 512, 4, 4, "forward")
    assert forward_only.gradients == forward_only.optimizer_states == 0
    assert forward_only.activations < memory.activations


def test_peak_table_prefers_the_specific_name():
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.4
    assert peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0
    assert peak_tflops("NVIDIA H100 80GB HBM3", "fp32") == 66.9
    assert peak_tflops("x86_64", "fp32") is None


def test_kernel_flops_by_hand():
    from benchd.spec import AttentionShape, MatmulShape

    assert matmul_flops(MatmulShape(m=128, n=64, k=32)) == 2 * 128 * 64 * 32
    full = AttentionShape(batch=2, heads=4, seq_len=64, head_dim=16, causal=False)
    assert attention_flops(full) == 4 * 2 * 4 * 64 * 64 * 16
    assert attention_flops(full.model_copy(update={"causal": True})) == 2 * 2 * 4 * 64 * 64 * 16
