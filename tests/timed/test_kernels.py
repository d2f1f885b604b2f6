"""Single-kernel runs: the attention implementations computing the same thing, each implementation and shape timed,
torch and compiled matmul, a run whose every stage fails, bad timed specs named by field."""

import csv

import pytest
import torch
from prometheus_client import CollectorRegistry

from benchd.daemon.inprocess import run_local as run_timed
from benchd.spec import SpecError, parse_spec
from benchd.telemetry.metrics import Metrics
from benchd.telemetry.run import Telemetry
from benchd.timed.kernel import attention
from tests.timed.helpers import kernel_spec

# ---- kernel runs -------------------------------------------------------------------------------


def test_attention_implementations_compute_the_same_thing():
    from benchd.spec import AttentionShape

    shape = AttentionShape(batch=2, heads=3, seq_len=24, head_dim=8, causal=True)
    outputs = {}
    for name in ("eager", "sdpa", "math", "flash"):
        fn, scope = attention(name, shape, torch.float32, torch.device("cpu"), torch.Generator().manual_seed(0))
        with scope:
            outputs[name] = fn()
    for name, out in outputs.items():
        torch.testing.assert_close(out, outputs["eager"], rtol=1e-5, atol=1e-5, msg=name)


def test_kernel_run_times_each_implementation_and_shape(tmp_path):
    registry = CollectorRegistry()
    spec = kernel_spec(op="attention", implementations=["eager", "sdpa", "efficient"], reference="eager",
                       shapes=[{"heads": 2, "seq_len": 32, "head_dim": 16},
                               {"batch": 2, "heads": 2, "seq_len": 64, "head_dim": 16, "causal": False}])
    outcome = run_timed(spec, telemetry=Telemetry(Metrics(registry)))
    assert outcome.status == "succeeded", outcome.error
    by = {(r.implementation, r.shape): r for r in outcome.summaries()}
    assert len(by) == 6
    for shape in ("b1h2s32d16c", "b2h2s64d16"):
        eager, sdpa, efficient = by["eager", shape], by["sdpa", shape], by["efficient", shape]
        assert eager.speedup_vs_reference == 1.0
        assert sdpa.speedup_vs_reference == pytest.approx(eager.timing.median / sdpa.timing.median)
        assert sdpa.tflops == pytest.approx(sdpa.flops / sdpa.timing.median / 1e12)
        # The memory-efficient backend is CUDA-only: recorded as a failed stage with the reason; the run goes on.
        assert efficient.status == "failed" and "efficient cannot run" in efficient.error
        assert efficient.timing.count == 0
        labels = {"workload": "kern", "kernel": "attention", "implementation": "sdpa", "shape": shape,
                  "dtype": "float32"}
        assert registry.get_sample_value("benchd_kernel_duration_seconds_count", labels) == 5
    timed = [t for t in outcome.timings if t.stage_index == 0]
    assert [t.index for t in timed] == [2, 3, 4, 5, 6] and not any(t.warmup for t in timed)

    from benchd.report.outputs import write_outputs

    write_outputs(outcome, tmp_path)
    rows = list(csv.DictReader((tmp_path / "kernels.csv").open()))
    assert [r["implementation"] for r in rows] == ["eager", "sdpa", "efficient"] * 2
    assert float(rows[1]["median_s"]) == by["sdpa", "b1h2s32d16c"].timing.median
    timings = list(csv.DictReader((tmp_path / "timings.csv").open()))
    assert len(timings) == 4 * 5 and timings[0]["stage"] == "eager b1h2s32d16c"


def test_matmul_torch_and_compiled():
    outcome = run_timed(kernel_spec(op="matmul", implementations=["torch", "compiled", "tf32"],
                                    shapes=[{"m": 64, "n": 48, "k": 32}]))
    by = {r.implementation: r for r in outcome.summaries()}
    assert by["torch"].timing.count == by["compiled"].timing.count == 5
    assert by["torch"].flops == 2 * 64 * 48 * 32
    # against the CPU's float32 matmul rate as its probe measured it (stored with the run)
    fp32 = outcome.metadata.device_limits["matmul_flops_per_s"]["float32"] / 1e12
    assert by["torch"].peak_tflops == pytest.approx(fp32)
    assert by["torch"].of_peak == pytest.approx(by["torch"].tflops / fp32)
    assert by["tf32"].status == "failed" and "tf32 needs a CUDA device" in by["tf32"].error
    assert torch.get_float32_matmul_precision() == "highest"  # restored after each implementation


def test_a_run_whose_every_stage_fails_has_failed():
    outcome = run_timed(kernel_spec(op="matmul", implementations=["tf32"], shapes=[{"m": 8, "n": 8, "k": 8}]))
    assert outcome.status == "failed" and "tf32 needs a CUDA device" in outcome.error


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "kernel"}, "kernel: required when kind is kernel"),
        ({"kind": "kernel", "kernel": {"op": "matmul", "shapes": [{"m": 0, "n": 8, "k": 8}]}},
         "kernel.matmul.shapes.0.m: Input should be greater than or equal to 1"),
        ({"kind": "kernel", "kernel": {"op": "attention", "shapes": [{"heads": 2, "seq_len": 8}]}},
         "kernel.attention.shapes.0.head_dim: Field required"),
        ({"kind": "kernel", "kernel": {"op": "matmul", "shapes": []}},
         "kernel.matmul.shapes: List should have at least 1 item"),
        ({"kind": "kernel", "kernel": {"op": "conv", "shapes": []}}, "kernel: Input tag 'conv' found using 'op'"),
        ({"kind": "kernel", "kernel": {"op": "matmul", "shapes": [{"m": 8, "n": 8, "k": 8}],
                                       "implementations": ["cutlass"]}},
         "kernel.matmul: implementations: unknown 'cutlass'; known: torch, tf32, compiled"),
        ({"kind": "kernel", "kernel": {"op": "matmul", "shapes": [{"m": 8, "n": 8, "k": 8}], "reference": "tf32"}},
         "kernel.matmul: reference: 'tf32' is not among the implementations run"),
        ({"kind": "kernel", "dtype": "int8", "kernel": {"op": "matmul", "shapes": [{"m": 8, "n": 8, "k": 8}]}},
         "dtype: Input should be 'auto', 'float32', 'bfloat16' or 'float16'"),
        ({"kind": "train_step", "dtype": "bfloat16", "train_step": {"autocast": "bfloat16"}},
         "train_step.autocast: needs float32 weights"),
        ({"kind": "train_step", "train_step": {"autocast": "float32"}},
         "train_step.autocast: Input should be 'bfloat16' or 'float16'"),
        ({"kind": "train_step", "train_step": {"mode": "inference"}},
         "train_step.mode: Input should be 'forward', 'forward_backward' or 'train'"),
        ({"kind": "train_step", "train_step": {"steps": 0}}, "train_step.steps: Input should be greater than"),
        ({"kind": "benchmark"}, "kind: Input should be 'generate', 'train_step' or 'kernel'"),
    ],
)
def test_bad_timed_specs_name_the_field(data, message):
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    assert message in str(info.value)
