"""Training-step and kernel runs on the CPU: FLOPs, memory, statistics, exports, storage and validation."""

import csv

import pytest
import torch
from prometheus_client import CollectorRegistry
from transformers import AutoModelForCausalLM

from benchd.daemon.lifecycle import Lifecycle
from benchd.daemon.local import LocalPool
from benchd.daemon.local import run_local as run_timed
from benchd.models.flops import Shape, forward_flops_per_token, memory_breakdown, peak_tflops, step_flops
from benchd.models.loading import load_model, parameter_count, preset_config
from benchd.spec import SpecError, parse_spec
from benchd.stopping import StopSignal
from benchd.store import Store
from benchd.telemetry.metrics import Metrics
from benchd.telemetry.run import Telemetry
from benchd.telemetry.tracing import build_tracer_provider
from benchd.timed.kernel import attention, attention_flops, matmul_flops
from tests.helpers import NODE, daemon, submit
from tests.otlp import HTTPReceiver


def train_spec(**options):
    return parse_spec({"kind": "train_step", "name": "train", "model": "tiny", "device": "cpu",
                       "train_step": {"batch_size": 2, "context_length": 16, "warmup_steps": 2, "steps": 4,
                                      **options}})


def kernel_spec(**kernel):
    return parse_spec({"kind": "kernel", "name": "kern", "device": "cpu", "dtype": "float32",
                       "kernel": {"warmup": 2, "repeats": 5, "flush_bytes": 1 << 20, **kernel}})


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


# ---- train_step runs ---------------------------------------------------------------------------


def test_train_step_times_every_phase_and_leaves_warmup_out():
    registry = CollectorRegistry()
    outcome = run_timed(train_spec(mode="train"), telemetry=Telemetry(Metrics(registry)))
    assert outcome.status == "succeeded", outcome.error
    (summary,) = outcome.summaries()
    assert set(summary.phases) == {"forward", "backward", "optimizer", "step"}
    assert summary.steps == 4 and summary.warmup_steps == 2 and summary.parameters == 139_584
    for phase, stats in summary.phases.items():
        timings = [t for t in outcome.timings if t.series == phase]
        assert [t.warmup for t in timings] == [True, True, False, False, False, False]
        measured = [t.seconds for t in timings if not t.warmup]
        assert stats.count == 4 and stats.mean == pytest.approx(sum(measured) / 4, rel=1e-12)
        assert stats.min == min(measured) and stats.max == max(measured)
        assert stats.std == pytest.approx(float(torch.tensor(measured, dtype=torch.float64).std()), rel=1e-9)
        labels = {"model": "tiny", "workload": "train", "phase": phase}
        assert registry.get_sample_value("benchd_step_duration_seconds_count", labels) == 4
        assert registry.get_sample_value("benchd_step_duration_seconds_sum", labels) == pytest.approx(sum(measured))
    steps = [t.seconds for t in outcome.timings if t.series == "step"]
    parts = [sum(t.seconds for t in outcome.timings if t.index == i and t.series != "step") for i in range(6)]
    assert steps == pytest.approx(parts, rel=1e-9)  # the phases tile the step
    assert summary.tokens_per_s == pytest.approx(2 * 16 / summary.phases["step"].mean)
    assert summary.achieved_tflops == pytest.approx(summary.flops.total / summary.phases["step"].mean / 1e12)
    # no peak given: the CPU's float32 matmul rate as its probe measured it (stored with the run); no allocator
    fp32 = outcome.metadata.device_limits["matmul_flops_per_s"]["float32"]
    assert summary.peak_source == "measured" and summary.peak_tflops == pytest.approx(fp32 / 1e12)
    assert summary.mfu == pytest.approx(summary.achieved_tflops / summary.peak_tflops)
    assert summary.memory.peak_allocated is None
    assert summary.memory.optimizer_states == 2 * summary.memory.parameters


def test_the_peak_of_an_mfu_is_the_given_then_the_measured_then_the_datasheets():
    from benchd.protocol.metadata import RunMetadata
    from benchd.timed.train_step import peak_for

    h100 = RunMetadata(benchd_version="0", python_version="3", torch_version="2", transformers_version="5",
                       device="cuda", device_name="NVIDIA H100 80GB HBM3", host="h", model="m", started_at="t")
    assert peak_for(None, h100, "bf16") == (989.4, "datasheet")
    h100.device_limits = {"matmul_flops_per_s": {"bfloat16": 7.8e14, "tf32": 3.9e14}}
    assert peak_for(None, h100, "bf16") == (780.0, "measured") and peak_for(None, h100, "tf32") == (390.0, "measured")
    assert peak_for(None, h100, "fp16") == (989.4, "datasheet")  # a dtype the probe did not measure
    assert peak_for(500.0, h100, "bf16") == (500.0, "given")
    h100.device_name = "x86_64"
    assert peak_for(None, h100, "fp16") == (None, None)


def test_train_step_modes_and_mfu_against_a_given_peak():
    outcome = run_timed(train_spec(mode="forward", peak_tflops=0.5))
    (summary,) = outcome.summaries()
    assert summary.peak_source == "given"
    assert set(summary.phases) == {"forward", "step"} and summary.flops.backward == 0
    assert summary.mfu == pytest.approx(summary.achieved_tflops / 0.5)
    assert summary.memory.gradients == 0
    autocast = run_timed(train_spec(mode="forward_backward", autocast="bfloat16", warmup_steps=0, steps=2))
    assert autocast.status == "succeeded", autocast.error
    assert autocast.summaries()[0].matmul_precision == "bf16" and autocast.summaries()[0].dtype == "float32"


def test_warmup_study_runs_one_level_per_count():
    outcome = run_timed(train_spec(warmup_study=[0, 1, 3], steps=2))
    assert [r.stage for r in outcome.summaries()] == ["warmup=0", "warmup=1", "warmup=3"]
    assert [r.warmup_steps for r in outcome.summaries()] == [0, 1, 3]
    assert all(r.steps == 2 for r in outcome.summaries())
    for index, warmups in enumerate((0, 1, 3)):
        forward = [t for t in outcome.timings if t.stage_index == index and t.series == "forward"]
        assert sum(t.warmup for t in forward) == warmups and len(forward) == warmups + 2


def test_a_stopped_train_step_keeps_its_measured_steps():
    stop = StopSignal()

    def progress(p):
        if p.completed >= 4:  # 2 warm-up + 2 measured at least
            stop.set("cancelled")

    outcome = run_timed(train_spec(steps=500), stop=stop, on_progress=progress)
    assert outcome.status == "cancelled"
    (summary,) = outcome.summaries()
    measured = [t for t in outcome.timings if t.series == "step" and not t.warmup]
    assert summary.status == "cancelled" and 2 <= summary.steps == len(measured) < 500


def test_context_beyond_the_model_is_a_clear_failure():
    outcome = run_timed(train_spec(context_length=5000))
    assert outcome.status == "failed"
    assert "train_step.context_length: 5000 is beyond the model's 4096 positions" in outcome.error


def test_train_step_spans_reach_a_collector(monkeypatch):
    with HTTPReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        provider = build_tracer_provider(lambda *_: None)
        telemetry = Telemetry(Metrics(CollectorRegistry()), provider)
        outcome = run_timed(train_spec(steps=3, warmup_steps=1), telemetry=telemetry)
        telemetry.shutdown()
        spans = receiver.wait_for_spans(5)
    names = sorted(s.name for s in spans)
    assert names == ["benchd.run train", "benchd.train_step warmup=1", "benchd.train_step.step 1",
                     "benchd.train_step.step 2", "benchd.train_step.step 3"]
    (run_span,) = [s for s in spans if s.name == "benchd.run train"]
    assert all(s.trace_id == run_span.trace_id for s in spans)
    assert outcome.metadata.trace_id == run_span.trace_id.hex()
    (stage,) = [s for s in spans if s.name == "benchd.train_step warmup=1"]
    attrs = {a.key: a.value for a in stage.attributes}
    assert attrs["benchd.phases.step.count"].int_value == 3
    assert attrs["benchd.phases.forward.mean"].double_value == outcome.summaries()[0].phases["forward"].mean


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
    assert by["torch"].peak_tflops == pytest.approx(fp32) and by["torch"].of_peak == pytest.approx(by["torch"].tflops / fp32)
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


# ---- the daemon and the store ------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/benchd.db"
    return request.getfixturevalue("postgres_url")


def test_timed_runs_round_trip_through_the_store(store_url, tmp_path):
    store = Store(store_url, spool_dir=tmp_path / "spool")
    store.start()
    for run_id, spec in (("t1", train_spec(steps=2, warmup_steps=1)),
                         ("k1", kernel_spec(op="matmul", shapes=[{"m": 16, "n": 16, "k": 16}]))):
        store.create_run(run_id, spec.model_dump(mode="json"))
        pool = LocalPool()
        outcome = Lifecycle(pool, Telemetry(), store=store).execute(run_id, spec, spec.device, StopSignal())
        pool.stop()
        assert store.flush()
        row = store.get_run(run_id)
        assert row["status"] == "succeeded" and row["engine"] == spec.kind
        assert row["summary"] == [r.model_dump(mode="json") for r in outcome.summaries()]
        rows = store.timing_rows(run_id)
        assert len(rows) == len(outcome.timings)
        assert sorted(r["seconds"] for r in rows) == sorted(t.seconds for t in outcome.timings)
    assert store.get_run("k1")["model"] == "matmul"
    store.close()


def test_daemon_runs_train_step_and_kernel_specs(tmp_path):
    with daemon(tmp_path) as server:
        server.wait_ready()
        train = submit(server, {"kind": "train_step", "name": "tr", "train_step": {
            "batch_size": 2, "context_length": 16, "warmup_steps": 1, "steps": 3, "mode": "train"}})
        kern = submit(server, {"kind": "kernel", "name": "mm", "kernel": {
            "op": "matmul", "shapes": [{"m": 32, "n": 32, "k": 32}], "repeats": 7, "flush_bytes": 1 << 20}})
        run = server.wait_status(kern, "succeeded", "failed")
        assert run["status"] == "succeeded" and run["engine"] == "kernel" and run["model"] == "matmul"
        assert run["summary"][0]["timing"]["count"] == 7
        run = server.wait_status(train, "succeeded", "failed")
        assert run["status"] == "succeeded", run["error"]
        assert run["engine"] == "train_step" and run["summary"][0]["phases"]["optimizer"]["count"] == 3
        timings = server.http.get(f"/runs/{train}/timings").json()
        assert len(timings) == 4 * 4 and sum(t["warmup"] for t in timings) == 4
        text = server.http.get(f"/runs/{train}/timings", params={"format": "csv"}).text
        assert text.splitlines()[0] == "stage_index,series,index,warmup,seconds" and len(text.splitlines()) == 17
        metrics = server.http.get("/metrics").text
        assert f'benchd_step_duration_seconds_count{{hostname="{NODE}",model="tiny",phase="optimizer",workload="tr"}} ' \
               '3.0' in metrics
        assert f'benchd_kernel_duration_seconds_count{{dtype="float32",hostname="{NODE}",implementation="torch",' \
               'kernel="matmul",shape="32x32x32",workload="mm"} 7.0' in metrics
        # A generation run after a training step loads the daemon's model again and runs.
        gen = submit(server, {"name": "after", "transformers": {"block_size": 16, "num_blocks": 64,
                                                                  "max_batch_tokens": 128},
                              "workload": {"stop": {"requests": 2}, "prompt_tokens": {"dist": "fixed", "value": 4},
                                           "output_tokens": {"dist": "fixed", "value": 3}}})
        assert server.wait_status(gen, "succeeded", "failed")["status"] == "succeeded"
        over = server.http.post("/runs", json={"kind": "train_step", "train_step": {"steps": 20_000}})
        assert over.status_code == 422
        assert over.json()["detail"][0]["loc"] == ["body", "train_step", "steps"]
        assert "BENCHD_LIMITS__MAX_STEPS" in over.json()["detail"][0]["msg"]


def test_a_timed_run_after_a_generation_run_has_torchs_threads_back(tmp_path):
    """An engine's cpu_threads hold while it runs; the daemon closes it before a timed run, which then runs on the
    process's own thread count (each run's metadata records the count it ran with)."""
    kernel = {"kind": "kernel", "name": "mm", "device": "cpu", "kernel": {
        "op": "matmul", "shapes": [{"m": 16, "n": 16, "k": 16}], "repeats": 3, "flush_bytes": 1 << 20}}
    with daemon(tmp_path) as server:
        server.wait_ready()
        before = server.wait_status(submit(server, kernel), "succeeded")["metadata"]["torch_threads"]
        other = before - 1 if before > 1 else before + 1  # within the cores the worker may use (admission)
        gen = submit(server, {"name": "gen", "transformers": {"block_size": 16, "num_blocks": 64,
                                                                "max_batch_tokens": 128, "cpu_threads": other},
                              "workload": {"stop": {"requests": 2}, "prompt_tokens": {"dist": "fixed", "value": 4},
                                           "output_tokens": {"dist": "fixed", "value": 3}}})
        metadata = server.wait_status(gen, "succeeded")["metadata"]
        assert metadata["torch_threads"] == metadata["engine_settings"]["cpu_threads"] == other
        after = server.wait_status(submit(server, kernel), "succeeded")["metadata"]["torch_threads"]
        assert after == before


def test_cli_runs_a_kernel_spec(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "k.yaml"
    path.write_text("kind: kernel\nname: cli-k\ndevice: cpu\nkernel:\n  op: attention\n  repeats: 3\n"
                    "  flush_bytes: 1048576\n  shapes: [{heads: 2, seq_len: 16, head_dim: 8}]\n")
    done = subprocess.run([sys.executable, "-m", "benchd.cli", "run", str(path), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "b1h2s16d8c" in done.stdout and "eager" in done.stdout
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"summary.json", "timings.csv", "kernels.csv", "report.html"}
    refused = subprocess.run([sys.executable, "-m", "benchd.cli", "run", str(path), "--warmup-study"],
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "--warmup-study: applies to train_step specs" in refused.stderr
