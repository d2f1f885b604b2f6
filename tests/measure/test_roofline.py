"""How far from the hardware (benchd.measure.roofline): a synthetic trace of known steps against known limits."""

import json

import pytest

from benchd.measure.roofline import (
    BANDWIDTH,
    COMPUTE,
    ModelCost,
    StepLog,
    moved_toward,
    roofline,
    row_work,
    utilisation,
)
from benchd.models.flops import Shape

# One layer, no MLP to speak of: a token's matmuls are 2·1·1 + 2·2·1·1 + 2·1·1 + 3·2·1·1 = 14 FLOPs.
SHAPE = Shape(hidden=1, ffn=1, layers=1, heads=1, kv_heads=1, head_dim=1, vocab=1)


def test_a_rows_work_splits_prefill_from_decode_and_counts_causal_pairs():
    assert row_work(past=0, query=7, prompt=7, sampled=True) == (7, 0, 0, 28, 1)
    assert row_work(past=4, query=6, prompt=7, sampled=True) == (3, 3, 4, 6 * 4 + 21, 1)  # a chunk past the prompt
    assert row_work(past=0, query=4, prompt=7, sampled=False) == (4, 0, 0, 10, 0)  # a first chunk samples nothing
    assert row_work(past=9, query=1, prompt=7, sampled=True) == (0, 1, 9, 10, 1)


def test_the_bound_sums_each_steps_binding_ceiling():
    cost = ModelCost(SHAPE, weight_bytes=1000, kv_bytes_per_token=10)
    assert (cost.token_flops(), cost.pair_flops(), cost.head_flops()) == (14, 4, 2)
    log = StepLog()
    log.add(prefill=100, decode=0, kv_read=0, attended=5050, sampled=1)  # 1,400 + 20,200 + 2 FLOPs; 2,000 bytes
    log.add(prefill=0, decode=2, kv_read=200, attended=202, sampled=2)  # 28 + 808 + 4 FLOPs; 3,020 bytes
    log.add(prefill=0, decode=2, kv_read=202, attended=204, sampled=2)  # 28 + 816 + 4 FLOPs; 3,040 bytes
    # 1,000 bytes/s and 1,000 FLOP/s: the prefill is compute bound (21.602 s), the decodes bandwidth bound
    line = roofline(log, cost, elapsed_s=100.0, peak_bytes_per_s=1000.0, peak_flops_per_s=1000.0)
    assert line.flops == 21_602 + 840 + 848 and line.bytes == 2000 + 3020 + 3040
    assert line.bound_s == pytest.approx(21.602 + 3.020 + 3.040)
    assert line.bandwidth_bound_steps == 2 and line.bound_by == BANDWIDTH
    assert line.of_bound == pytest.approx(line.bound_s / 100.0)
    assert line.mbu == pytest.approx(8060 / 100 / 1000) and line.mfu == pytest.approx(23_290 / 100 / 1000)
    assert line.intensity == pytest.approx(23_290 / 8060)
    assert (line.steps, line.prefill_tokens, line.decode_tokens) == (3, 100, 4)
    assert log.since(1).decode_tokens == [2, 2] and len(log.since(3)) == 0
    assert StepLog.of_columns(*log.columns()) == log and StepLog().columns() == ((),) * 5  # as events.Steps carries
    # a faster device in compute only: the same steps, bound by the decodes' bytes
    faster = roofline(log, cost, elapsed_s=100.0, peak_bytes_per_s=1000.0, peak_flops_per_s=1e9)
    assert faster.bound_s == pytest.approx(2.0 + 3.020 + 3.040, rel=1e-4) and faster.bandwidth_bound_steps == 3
    # a stage takes its steps from the engine's log, and the log forgets what came before: it stays a stage long
    taken = log.take(1)
    assert taken.kv_read_tokens == [200, 202] and len(log) == 0


def test_a_faster_variant_says_which_ceiling_it_moved_toward():
    cost = ModelCost(SHAPE, weight_bytes=1000, kv_bytes_per_token=10)
    log = StepLog()
    log.add(0, 2, 200, 202, 2)
    slow = roofline(log, cost, 10.0, 1000.0, 1000.0).as_dict()
    fast = roofline(log, cost, 5.0, 1000.0, 1000.0).as_dict()
    lighter = roofline(log, ModelCost(SHAPE, 250, 10), 8.0, 1000.0, 1000.0).as_dict()  # quantized: fewer bytes
    assert moved_toward(slow, fast) == BANDWIDTH  # its bytes' share of the time grew more than its FLOPs'
    assert moved_toward(slow, lighter) == COMPUTE
    assert moved_toward(fast, slow) is None and moved_toward(None, fast) is None
    both = utilisation([slow, None, fast])
    assert both == pytest.approx({"mbu": (0.302 + 0.604) / 2, "mfu": (0.084 + 0.168) / 2,
                                  "of_bound": (slow["of_bound"] + fast["of_bound"]) / 2})
    assert utilisation([None]) is None


def test_the_cpus_limits_are_measured_for_real_and_kept_per_device_model_and_driver(tmp_path, monkeypatch):
    """The probe on this CPU, for real, into a cache file; a worker after it reads the file. A GPU (faked: its name,
    driver and probe) measured under another driver is measured again, each kept under its own key."""
    from benchd.hardware import speed
    from benchd.models.flops import peak_bandwidth, peak_tflops

    cache = tmp_path / "device-speed.json"
    monkeypatch.setattr(speed, "_MEASURED", {})
    cpu = speed.measure("cpu", cache)
    assert cpu.name and cpu.copy_bytes_per_s > 1e8 and cpu.matmul_flops_per_s["float32"] > 1e8
    monkeypatch.setattr(speed, "_MEASURED", {})
    monkeypatch.setattr(speed, "_probe", lambda *args: pytest.fail("measured again"))
    assert speed.measure("cpu", cache) == cpu  # read from the file

    h100 = "NVIDIA H100 80GB HBM3"
    probed = []

    def probe(device, name, driver):
        probed.append(driver)
        return speed.DeviceSpeed(device, {"bfloat16": 7.5e14}, 3.0e12, 512 << 20, 1.0, name, driver)

    monkeypatch.setattr(speed, "_probe", probe)
    for driver in ("550.54", "550.54", "560.35"):
        monkeypatch.setattr(speed, "_MEASURED", {})
        monkeypatch.setattr(speed, "identity", lambda device, driver=driver: (h100, driver))
        gpu = speed.measure("cuda", cache)
        assert (gpu.name, gpu.driver, gpu.flops_per_s("auto")) == (h100, driver, 7.5e14)
    assert probed == ["550.54", "560.35"]
    assert len(json.loads(cache.read_text())) == 3
    assert peak_bandwidth(gpu.name) == 3.35e12 and peak_tflops(gpu.name, "bf16") == 989.4
    assert peak_bandwidth("NVIDIA H100 PCIe") == 2.0e12 and peak_bandwidth("NVIDIA A100-SXM4-80GB") == 2.039e12
    assert peak_bandwidth(cpu.name) is None


def test_a_step_streams_every_weight_but_an_input_embedding_the_head_does_not_share(tiny):
    from benchd.models.quantize import streamed_weight_bytes, tensor_bytes, weight_bytes

    embedding, head = tiny.model.get_input_embeddings().weight, tiny.model.get_output_embeddings().weight
    shared = head is embedding
    assert streamed_weight_bytes(tiny.model) == weight_bytes(tiny.model) - (0 if shared else tensor_bytes(embedding))
    assert streamed_weight_bytes(tiny.model) < weight_bytes(tiny.model) or shared


def test_each_devices_limits_are_gauges_with_the_datasheet_beside_them(tmp_path):
    """A live daemon's CPU worker measures its device; /metrics serves the figures. A GPU's (its hello faked) has
    the datasheet's beside the measured, for each dtype the table knows."""
    from prometheus_client import CollectorRegistry, generate_latest

    from benchd.hardware.speed import DeviceSpeed
    from benchd.telemetry.gauges import LimitsCollector
    from tests.helpers import daemon

    with daemon(tmp_path) as server:
        server.wait_ready()
        page = server.http.get("/metrics").text
    measured = [line for line in page.splitlines()
                if line.startswith("benchd_cpu_peak_memory_bandwidth_bytes_per_second{")
                and 'source="measured"' in line]
    # The CPU's limits are a CPU's series (not benchd_gpu_*, issue 53), with the gpu label its runs' series carry:
    # empty; and no deprecated duplicate beside them.
    assert len(measured) == 1 and 'gpu=""' in measured[0] and float(measured[0].rsplit(" ", 1)[1]) > 1e8
    rates = [line for line in page.splitlines() if line.startswith("benchd_cpu_peak_flops_per_second{")]
    assert any('dtype="float32"' in line and 'gpu=""' in line for line in rates)
    assert "benchd_gpu_peak" not in page

    h100 = DeviceSpeed("cuda", {"bfloat16": 7.8e14, "tf32": 3.9e14}, 3.0e12, 512 << 20, 1.0,
                       "NVIDIA H100 80GB HBM3", "580.159.04")
    registry = CollectorRegistry()
    registry.register(LimitsCollector(lambda: {"0": h100}))
    for name, labels, value in (
            ("benchd_gpu_peak_memory_bandwidth_bytes_per_second", {"source": "measured"}, 3.0e12),
            ("benchd_gpu_peak_memory_bandwidth_bytes_per_second", {"source": "datasheet"}, 3.35e12),
            ("benchd_gpu_peak_flops_per_second", {"dtype": "bfloat16", "source": "measured"}, 7.8e14),
            ("benchd_gpu_peak_flops_per_second", {"dtype": "bfloat16", "source": "datasheet"}, 989.4e12),
            ("benchd_gpu_peak_flops_per_second", {"dtype": "tf32", "source": "datasheet"}, 494.7e12)):
        found = registry.get_sample_value(name, {"gpu": "0", "name": h100.name, **labels})
        assert found == pytest.approx(value), (name, labels, generate_latest(registry).decode())


@pytest.mark.parametrize("engine", ["transformers", "static"])
def test_a_runs_stage_summary_places_its_steps_on_the_devices_roofline(tiny, engine):
    """Through the daemon's lifecycle (events, ingest, summary): 6 requests of 16 prompt and 8 output tokens; every
    prompt token prefilled once, 7 decoded a request; static batches of 4 then 2 run 8 steps each. The limits are
    this CPU's, measured, and the cost the tiny model's, both kept in the run's metadata."""
    from prometheus_client import CollectorRegistry

    from benchd.daemon.inprocess import run_local
    from benchd.report.tables import summary_rows
    from benchd.telemetry.metrics import Metrics
    from benchd.telemetry.run import Telemetry
    from tests.helpers import make_spec

    spec = make_spec(engine=engine, workload={"ignore_eos": True, "stop": {"requests": 6},
                                              "prompt_tokens": {"dist": "fixed", "value": 16},
                                              "output_tokens": {"dist": "fixed", "value": 8}})
    registry = CollectorRegistry()
    result = run_local(spec, tiny, telemetry=Telemetry(Metrics(registry)))
    assert result.status == "succeeded", result.error
    assert result.metadata.device_limits["copy_bytes_per_s"] > 1e8
    assert result.metadata.model_cost["kv_bytes_per_token"] == 512 and result.metadata.model_cost["dtype"] == "float32"
    (summary,) = result.summaries()
    line = summary.roofline
    assert (line["prefill_tokens"], line["decode_tokens"]) == (96, 42)
    if engine == "static":
        assert line["steps"] == 16
    assert line["bound_s"] > 0 and 0 < line["of_bound"] < 1 and 0 < line["mbu"] < 1 and 0 < line["mfu"] < 1
    assert line["bound_by"] in (BANDWIDTH, COMPUTE) and line["intensity"] > 0
    assert result.to_json()["stages"][0]["roofline"] == line
    rows = dict(summary_rows([summary]))  # the CLI's table and the report's
    assert rows["MBU / MFU"] == [f"{line['mbu']:.1%} / {line['mfu']:.1%}"]
    assert rows["of roofline bound (bound by)"] == [f"{line['of_bound']:.1%} ({line['bound_by']})"]
    labels = {"model": "tiny", "engine": engine, "workload": "test", "gpu": ""}  # /metrics, per workload
    for name, figure in (("benchd_run_memory_bandwidth_utilization_ratio", "mbu"),
                         ("benchd_run_flops_utilization_ratio", "mfu"),
                         ("benchd_run_roofline_bound_ratio", "of_bound")):
        assert registry.get_sample_value(name, labels) == pytest.approx(line[figure]), name


def test_a_comparison_says_which_ceiling_b_moved_toward():
    from rich.console import Console

    from benchd.measure.compare import compare
    from benchd.measure.sides import Side
    from benchd.report.outputs import comparison_table

    def side(name, lines):
        ids = [f"{name}{i}" for i in range(len(lines) or 1)]
        return Side(run_ids=ids, samples={}, output_tokens_per_s=[100.0] * len(ids),
                    energy_per_token_j=[None] * len(ids), roofline=lines)

    a = side("a", [{"mbu": 0.30, "mfu": 0.05, "of_bound": 0.25}, {"mbu": 0.32, "mfu": 0.07, "of_bound": 0.27}])
    b = side("b", [{"mbu": 0.60, "mfu": 0.08, "of_bound": 0.50}])
    result = compare(a, b)
    assert result.roofline_a == pytest.approx({"mbu": 0.31, "mfu": 0.06, "of_bound": 0.26})
    assert result.moved_toward == BANDWIDTH and compare(b, a).moved_toward is None
    assert compare(a, side("c", [])).moved_toward is None and compare(a, side("c", [])).roofline_b is None
    console = Console(width=160, record=True)
    console.print(comparison_table(result))
    text = console.export_text()
    assert "MBU" in text and "31.0%" in text and "60.0%" in text and "toward the bandwidth ceiling" in text


def test_the_report_draws_each_stage_under_the_two_ceilings():
    """Two stages of a run, each a point at its (intensity, achieved FLOP/s), under the bandwidth slope and the
    compute ceiling with its ridge at 1e12 / 1e11 = 10 FLOP/byte; a run without steps says why it draws none."""
    from benchd.measure.summary import summarize
    from benchd.report import scatter
    from benchd.report.pages import run_page
    from tests.report.helpers import well_formed

    log = StepLog()
    log.add(0, 2, 200, 202, 2)
    cost = ModelCost(SHAPE, weight_bytes=1000, kv_bytes_per_token=10)
    stages = []
    for label, elapsed in (("concurrency 1", 2.0), ("concurrency 8", 1.0)):
        summary = summarize(label, "succeeded", [])
        summary.roofline = roofline(log, cost, elapsed, 1e11, 1e12).as_dict()
        stages.append(summary.model_dump(mode="json"))
    page = run_page({"id": "r", "status": "succeeded", "spec": {"name": "r"}, "summary": stages}, [])
    well_formed(page)
    chart = page.split('data-chart="roofline"')[1].split("</figure>")[0]
    assert chart.count("<circle") == 2 and "ridge at 10 FLOP/byte" in chart
    assert "concurrency 1: 0.278 FLOP/byte" in chart  # 840 FLOPs over 3,020 bytes
    assert "<td>MBU / MFU</td>" in page
    assert "compute 1 TFLOP/s" in chart and "bandwidth 100 GB/s, ridge 10 FLOP/B" in chart  # each ceiling's value
    assert ">100 GFLOP/s</text>" in chart and "e+" not in chart  # ticks in readable units
    assert "no stage with steps" in scatter.roofline("roofline", "t", [], 1e11, 1e12)
