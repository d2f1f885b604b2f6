"""What `benchd run --out` writes and the pages of runs as they come: a report that renders, a large run's page of
reasonable size, an oversaturated stage marked, a run not ended or failed early, comparisons in ms and tok/s."""

import json
import subprocess
import sys

import numpy as np

from benchd.measure.records import RequestRecord
from benchd.measure.summary import summarize
from benchd.report import charts
from benchd.report.pages import run_page
from benchd.report.tables import rounded
from tests.helpers import ROOT
from tests.report.helpers import DISTRIBUTIONS, clean, drawn, well_formed


def test_benchd_run_out_writes_a_report_that_renders(tmp_path, chromium):
    result = subprocess.run(
        [sys.executable, "-m", "benchd.cli", "run", "--model", "tiny", "--device", "cpu", "--concurrency", "2",
         "--requests", "8", "--warmup-requests", "1", "--prompt-tokens", "8", "--output-tokens", "8",
         "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    assert str(tmp_path / "report.html") in result.stderr
    page = (tmp_path / "report.html").read_text()
    well_formed(page)
    loaded = chromium.load((tmp_path / "report.html").as_uri(), "cli-report.png")
    clean(loaded)
    drawn(loaded, [*DISTRIBUTIONS, "requests", "throughput", "in-flight", "kv-cache", "gpu-utilization"])
    for name in ("gpu-power", "gpu-memory"):  # this host has no GPU; a GPU host draws them
        chart = loaded.charts[name]
        assert chart["marks"] > 0 or "no GPU samples" in chart["note"]
    (stage,) = json.loads((tmp_path / "summary.json").read_text())["stages"]
    assert rounded(stage["output_tokens_per_s"]) in loaded.text
    assert f"(n={stage['ttft_s']['count']})" in loaded.charts["ttft"]["caption"]


def test_a_large_run_gives_a_page_of_reasonable_size(tmp_path, chromium):
    """10,000 requests of 256 tokens: the page stays small, says what it thinned, and draws."""
    rng = np.random.default_rng(0)
    records = []
    for i in range(10_000):
        t = i * 0.01
        stamps = t + 0.05 + np.cumsum(rng.exponential(0.01, 256))
        records.append(RequestRecord(i, f"r{i}", i < 100, 128, 256, t, t, t + 0.01, stamps.tolist(), [1] * 256,
                                     finished_s=float(stamps[-1])))
    rows = [{**r.to_row("poisson@100/s", 0.0), "stage_index": 0} for r in records]
    samples = np.arange(0, 105, 0.1)
    timeline = {"stages": [{"index": 0, "label": "poisson@100/s", "start_s": 0.0, "end_s": 105.0}],
                "load": {"t": samples.tolist(), "running": [256] * len(samples), "waiting": [0] * len(samples),
                         "kv_usage": [0.5] * len(samples), "output_tokens_per_s": [25_000.0] * len(samples)},
                "hardware": {"t": samples.tolist(), "cpu_utilization": [0.3] * len(samples), "gpus": {}}}
    run = {"id": "large", "status": "succeeded", "spec": {"name": "large", "model": "llama-3.2-1b"},
           "summary": [summarize("poisson@100/s", "succeeded", records).model_dump(mode="json")],
           "timeline": timeline}
    page = run_page(run, rows)
    assert len(page) < 500_000, len(page)  # 2.5 M token stamps behind it
    assert "589 of 10,000 requests drawn (one in 17)" in page and f"through {charts.CDF_POINTS} quantiles" in page
    assert "low and high of each of 300 buckets" in page
    well_formed(page)
    (tmp_path / "large.html").write_text(page)
    loaded = chromium.load((tmp_path / "large.html").as_uri(), "large-run-report.png")
    clean(loaded)
    drawn(loaded, [*DISTRIBUTIONS, "requests", "throughput", "in-flight", "kv-cache", "gpu-utilization"])
    assert "(n=9,900)" in loaded.charts["ttft"]["caption"] and "(n=2,524,500)" in loaded.charts["itl"]["caption"]


def test_an_oversaturated_stage_is_marked_in_the_report():
    from benchd.spec.validity import ValidityRules
    from tests.measure.helpers import served_records

    # A sweep's two levels against one server of 8 requests/s: 4/s keeps up, 16/s does not.
    stages = [(f"poisson@{rate}/s", served_records([i / rate for i in range(rate * 20)], None, servers=1,
                                                   service_s=lambda i: 1 / 8)) for rate in (4, 16)]
    summaries = [summarize(label, "succeeded", records, rules=ValidityRules(), open_loop=True).model_dump(mode="json")
                 for label, records in stages]
    rows = [{**r.to_row(label, 0.0), "stage_index": index} for index, (label, records) in enumerate(stages)
            for r in records]
    page = run_page({"id": "sweep", "status": "succeeded", "spec": {"name": "sweep"}, "summary": summaries}, rows)
    well_formed(page)
    assert "<td>verdict</td><td>valid</td><td>INVALID: oversaturated</td>" in page
    # the stages' rates (a schedule at r offers r; completed never more), the window's in the verdict's message
    assert "<td>completed / offered req/s</td><td>3.98 / 4.00 (99%)</td><td>7.99 / 16.00 (50%)</td>" in page
    assert "poisson@16/s: invalid: over-saturated: completed 8.02 requests/s against 16.1 offered" in page
    assert ">poisson@16/s · OVERSATURATED</text>" in page and ">poisson@4/s</text>" in page  # on every chart's bands


def test_a_run_that_has_not_ended_or_failed_early_still_has_a_page():
    for kind, extra in (("generate", {}), ("kernel", {"kernel": {"op": "matmul"}}), ("train_step", {})):
        page = run_page({"id": "q", "status": "queued", "spec": {"name": "q", "kind": kind, **extra},
                         "summary": None, "run_metadata": None, "hardware": None, "timeline": None}, [])
        well_formed(page)
        assert "no stack recorded: the run did not start" in page
        assert ("the run has not ended: its timeline is stored when it does" in page if kind == "generate"
                else "no timings recorded" in page)
    failed = run_page({"id": "f", "status": "failed", "spec": {}, "summary": [], "error": "OSError: <no model>"}, [])
    well_formed(failed)
    assert '<span class="error">OSError: &lt;no model&gt;</span>' in failed


def test_comparisons_give_latencies_in_ms_and_throughput_as_it_is():
    from rich.console import Console

    from benchd.measure.compare import compare
    from benchd.measure.sides import Side
    from benchd.report.comparison import comparison_page
    from benchd.report.outputs import comparison_table

    a = Side(run_ids=["a1", "a2"], samples={"ttft_s": [[0.010] * 30, [0.011] * 30]},
             output_tokens_per_s=[100.0, 102.0], energy_per_token_j=[None, None])
    b = Side(run_ids=["b1", "b2"], samples={"ttft_s": [[0.020] * 30, [0.020] * 30]}, output_tokens_per_s=[60.0, 62.0],
             energy_per_token_j=[None, None])
    result = compare(a, b)
    page = comparison_page(result, a, b)
    assert "<td>TTFT p50</td><td>10.5 ms</td><td>20 ms</td>" in page
    assert "<td>output throughput</td><td>101.0 tok/s</td><td>61.0 tok/s</td>" in page
    console = Console(width=200, record=True)
    console.print(comparison_table(result))
    text = console.export_text()
    assert "TTFT p50" in text and "10.5 ms" in text and "101.0 tok/s" in text and "101000" not in text
    # A few runs' interval at a high confidence can reach ×10⁶ on the log scale: the cell says it is that wide.
    from benchd.report.tables import change_cells

    wide = result.metrics[0].model_copy(update={"relative_change": 0.4, "ci_low": -0.9991, "ci_high": 2.5e6})
    assert change_cells(wide) == ("+40.0%", "[-99.9%, >+1,000%]")


def test_counts_agree_with_their_number_and_a_change_reads_as_a_comparison_writes_it():
    """Issue 53: "hardware (1 samples over 0.1 s)"; the history said "+190.1 %" where a comparison says "+188.1%"."""
    from datetime import UTC, datetime

    from benchd.hardware.sampler import HardwareSummary
    from benchd.measure.history import ChangePoint, SegmentView
    from benchd.report.tables import change_cells, hardware_line

    assert hardware_line(HardwareSummary(samples=1, window_s=0.1)).startswith("hardware (1 sample over 0.1 s)")
    assert hardware_line(HardwareSummary(samples=2, window_s=0.1)).startswith("hardware (2 samples over 0.1 s)")
    at = datetime(2026, 11, 20, 14, tzinfo=UTC)
    side = SegmentView(runs=6, first_run="r", last_run="r", start=at, end=at, mean=1.0, ci_low=0.9, ci_high=1.1)
    change = ChangePoint(id="c", workload="w", device="cpu", node="n", figure="ttft_s.p50", run_id="r", at=at,
                         direction="worse", relative_change=1.901, ci_low=1.332, ci_high=2.608, p_value=1e-4,
                         confidence=0.95, before=side, after=side, detected_at=at)

    class Metric:  # a comparison's figure with the same change
        relative_change, ci_low, ci_high = 1.901, 1.332, 2.608

    assert change.sentence().startswith("TTFT p50 " + " ".join(change_cells(Metric())))
    assert change.sentence().startswith("TTFT p50 +190.1% [+133.2%, +260.8%] at 2026-11-20 14:00")
