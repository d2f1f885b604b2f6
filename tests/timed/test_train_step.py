"""Training-step runs on the tiny model: every phase timed with warm-up left out, the peak an MFU is taken against,
modes, a warm-up study, a stopped run, a context beyond the model, spans to a collector."""


import pytest
import torch
from prometheus_client import CollectorRegistry

from benchd.daemon.inprocess import run_local as run_timed
from benchd.stopping import StopSignal
from benchd.telemetry.metrics import Metrics
from benchd.telemetry.run import Telemetry
from benchd.telemetry.tracing import build_tracer_provider
from tests.otlp import HTTPReceiver
from tests.timed.helpers import train_spec

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
