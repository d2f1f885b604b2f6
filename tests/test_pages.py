"""Report pages in a real browser: Debian's headless chromium loads them from a live daemon and from `benchd run
--out`; every chart drew its marks, the console stayed silent, nothing was fetched, and a screenshot is kept."""

import json
import re
import subprocess
import sys
from html.parser import HTMLParser

import numpy as np
import pytest
import sqlalchemy as sa

from benchd.api import create_app
from benchd.daemon.settings import Settings
from benchd.measure.records import RequestRecord, summarize
from benchd.report import charts
from benchd.report.pages import run_page
from benchd.report.tables import rounded
from tests.browser import Chromium
from tests.fake_nvml import FakeGPU
from tests.helpers import CPU_CACHE, NODE, ROOT, LiveServer, spec, submit
from tests.test_hardware import reader

DISTRIBUTIONS = ["ttft", "itl", "tpot", "e2e"]
GENERATION = [*DISTRIBUTIONS, "requests", "throughput", "in-flight", "kv-cache", "gpu-utilization", "gpu-power",
              "gpu-memory"]
TIMELINE_PANELS = ["in-flight", "kv-cache", "gpu-utilization", "gpu-power", "gpu-memory"]

# Two load levels of a few seconds each: dozens of engine-load samples (every 100 ms) and hardware samples
# (every 0.2 s), warm-up requests in each level.
SWEEP = {
    "name": "report",
    "label": "v1.2",
    "transformers": CPU_CACHE,
    "workload": {
        "arrivals": {"profile": "sweep", "over": "concurrent", "values": [1, 4]},
        "stop": {"duration_s": 2.5},
        "warmup": {"requests": 2},
        "prompt_tokens": {"dist": "uniform", "min": 8, "max": 32},
        "output_tokens": {"dist": "uniform", "min": 8, "max": 48},
    },
}
VOID = {"meta", "link", "br", "hr", "img", "input", "wbr", "col", "area", "base", "source", "track", "embed"}


class _Nesting(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        if tag not in VOID:
            self.open.append(tag)

    def handle_endtag(self, tag) -> None:
        assert self.open and self.open[-1] == tag, f"</{tag}> closes {self.open[-3:]}"
        self.open.pop()


def well_formed(page: str) -> None:
    """Every element closed in order, and nothing that a browser would fetch."""
    assert page.startswith("<!doctype html>")
    parser = _Nesting()
    parser.feed(page)
    parser.close()
    assert parser.open == []
    for reference in ("src=", "url(", "@import", 'href="http', "<script"):
        assert reference not in page


def drawn(loaded, names) -> None:
    """Each named chart is there, drew marks, and has a real width on the page."""
    for name in names:
        chart = loaded.charts[name]
        assert not chart["empty"] and chart["marks"] > 0 and chart["width"] > 300, chart


def clean(loaded) -> None:
    """No console message, no exception, and nothing fetched but the page itself."""
    print(f"screenshot: {loaded.screenshot}")
    assert loaded.console == []
    assert [url for url in loaded.fetched if not url.startswith("data:")] == [loaded.url]
    assert loaded.screenshot.read_bytes().startswith(b"\x89PNG") and loaded.screenshot.stat().st_size > 20_000


@pytest.fixture(scope="module")
def chromium():
    with Chromium() as browser:
        yield browser


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """A live daemon with an NVML stand-in (one GPU) sampled every 0.2 s, and the sweep's succeeded run."""
    tmp = tmp_path_factory.mktemp("pages")
    settings = Settings(database_url=f"sqlite:///{tmp}/benchd.db", device="cpu", dtype="float32",
                        default_schedule=False, node_name=NODE, hardware_interval_s=0.2,
                        spool_dir=str(tmp / "spool"), workers={"log_dir": str(tmp / "workers")})
    app = create_app(settings, hardware_reader=lambda: reader(FakeGPU("GPU-page-0")))
    with LiveServer(app) as server:
        server.wait_ready()
        run_id = submit(server, SWEEP)
        server.wait_status(run_id, "succeeded")
        yield server, run_id


def test_a_runs_report_from_the_live_daemon(live, chromium):
    server, run_id = live
    stored = server.app.state.services.store.get_run(run_id)
    assert len(stored["timeline"]["load"]["t"]) >= 20 and len(stored["timeline"]["hardware"]["t"]) >= 10
    response = server.http.get(f"/runs/{run_id}/report")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    well_formed(response.text)

    loaded = chromium.load(f"{server.url}/runs/{run_id}/report", "run-report.png")
    clean(loaded)
    drawn(loaded, GENERATION)
    assert loaded.charts["requests"]["note"] is None  # the timeline placed every stage
    run = server.http.get(f"/runs/{run_id}").json()
    assert [s["stage"] for s in run["summary"]] == ["concurrent=1", "concurrent=4"]
    for stage in run["summary"]:  # the distributions hold exactly what the summaries count
        for chart, figure in (("ttft", "ttft_s"), ("itl", "itl_s"), ("tpot", "tpot_s"), ("e2e", "e2e_s")):
            assert f"{stage['stage']} (n={stage[figure]['count']:,})" in loaded.charts[chart]["caption"]
        assert rounded(stage["output_tokens_per_s"]) in loaded.text
    assert "GPU 0" in loaded.charts["gpu-power"]["caption"]
    for fact in ("NVIDIA H100 80GB HBM3", run["metadata"]["torch_version"], run["metadata"]["transformers_version"],
                 "warm-up", "generating"):
        assert fact in loaded.text


WIDTHS = (1400, 800)  # a laptop's window, and half a wide screen's


def fits(loaded, width: int) -> None:
    """Nothing widens the page, every table fits the box it sits in, and no chart draws its text larger than the
    page's type (an SVG scaled up past its drawn width does) nor below 9 px."""
    layout = loaded.layout
    assert layout["window"] == width and layout["page"] <= width, (width, layout["page"])
    assert [t["head"] for t in layout["tables"] if t["width"] > t["box"] + 1] == [], width
    for tick in layout["ticks"]:
        assert 9 <= tick["px"] <= layout["text_px"], (width, tick)


def test_a_runs_report_reads_at_1400_and_800_px(live, chromium):
    """The sweep's report at two widths: latency and throughput first (the throughput-latency chart a sweep
    exists for), the roofline after them at the page's type size; the header names workload, label and device;
    numbers rounded, engine settings a table, the hardware from the run's start."""
    server, run_id = live
    page = server.http.get(f"/runs/{run_id}/report").text
    for width in WIDTHS:
        loaded = chromium.load(f"{server.url}/runs/{run_id}/report", f"run-report-{width}.png", width)
        clean(loaded)
        fits(loaded, width)
        sections = loaded.layout["sections"]
        assert sections[:4] == ["summary", "tradeoff", "latency", "load"], sections
        assert sections.index("roofline") > sections.index("requests")
        drawn(loaded, ["tradeoff-ttft", "tradeoff-itl", "roofline"])
    header = loaded.text.split("\n")[:2]
    assert header[0] == "benchd · report · v1.2", header
    assert "label v1.2 · tiny · transformers · cpu (" in header[1] and "x86_64" not in header[0], header
    assert re.search(r"\d\.\d{5,}", loaded.text) is None  # no figure printed to full float precision
    assert "continuous batching" in loaded.text and "block size" in loaded.text and '"block_size"' not in loaded.text
    tradeoff = page.split('data-chart="tradeoff-ttft"')[1].split("</figure>")[0]
    assert tradeoff.count("<circle") == 2 and ">concurrent=1</text>" in tradeoff and "Pareto front" in tradeoff
    roofline = page.split('data-chart="roofline"')[1].split("</figure>")[0]
    assert "FLOP/s</text>" in roofline and "e+" not in roofline and ">compute " in roofline
    utilization = page.split('data-chart="gpu-utilization"')[1].split("</figure>")[0]
    assert re.search(r'class="tick"[^>]*>-', utilization) is None  # its axis starts with the run, not before


def test_a_matrix_page_fits_1400_and_800_px_with_throughput_against_latency(chromium, tmp_path):
    from benchd.measure.matrix import compare_matrix, run_figures
    from benchd.report.matrix import matrix_page

    rng = np.random.default_rng(3)

    def records(scale: float) -> list[RequestRecord]:
        out = []
        for i in range(40):
            stamps = i * 0.05 + 0.02 * scale + np.cumsum(rng.exponential(0.004 * scale, 16))
            out.append(RequestRecord(i, f"r{i}", False, 32, 16, i * 0.05, i * 0.05, i * 0.05, stamps.tolist(),
                                     [1] * 16, finished_s=float(stamps[-1])))
        return out

    labels = ["quantization=none,attn_implementation=sdpa", "quantization=int8_weight_only,attn_implementation=sdpa",
              "quantization=none,attn_implementation=eager"]
    variants = [{"index": i, "label": label, "values": dict(kv.split("=") for kv in label.split(",")),
                 "spec": {"name": "quant"}} for i, label in enumerate(labels)]
    runs, by_run, order = {}, {}, []
    for round_ in range(2):
        for variant, scale in zip(variants, (1.0, 1.6, 0.8)):
            run_id = f"run{variant['index']}{round_}"
            by_run[run_id] = records(scale)
            summary = summarize("concurrent=4", "succeeded", by_run[run_id]).model_dump(mode="json")
            metadata = {"weight_bytes": 2_000_000_000, "quantize_s": 0.0807498489985793, "model_load_s": 1.234}
            runs.setdefault(variant["index"], []).append(
                run_figures(run_id, "succeeded", by_run[run_id], summary, metadata, None))
            order.append({"run_id": run_id, "round": round_, "variant": variant["index"]})
    comparison = compare_matrix(variants, runs, baseline=0)
    row = {"id": "m1", "status": "succeeded", "baseline": 0, "variants": variants, "runs": order,
           "comparison": comparison.model_dump(mode="json"),
           "document": {"name": "quant", "workload": {"slo": {"ttft_p99_s": 0.05}}, "repeats": 2}}
    page = matrix_page(row, by_run)
    well_formed(page)
    assert "0.0807498489985793" not in page and "quantize_s: 0.0807" in page  # rounded in the stack
    tradeoff = page.split('data-chart="tradeoff-ttft"')[1].split("</figure>")[0]
    assert tradeoff.count("<circle") == 3 and 'class="slo"' in tradeoff and "SLO: TTFT p99 ≤ 50 ms" in tradeoff
    assert "missed the SLO (1 of 3)" in tradeoff  # the slow variant's p99 lies above the objective
    (tmp_path / "matrix.html").write_text(page)
    for width in WIDTHS:
        loaded = chromium.load((tmp_path / "matrix.html").as_uri(), f"matrix-{width}.png", width)
        clean(loaded)
        fits(loaded, width)  # the variants' table included: a cell is a figure, its change and a verdict's mark
        drawn(loaded, ["tradeoff-ttft", "tradeoff-itl", "ttft", "itl", "runs"])
    assert "✗" in loaded.text and 'title="slower"' in page  # a verdict's mark, its word on hover


def test_a_capacity_search_marks_its_slo_and_the_stages_that_missed_it():
    from benchd.spec import SLO
    from tests.test_validity import served_records

    slo = SLO(ttft_p99_s=0.2)
    stages = [(f"poisson@{rate}/s", served_records([i / rate for i in range(rate * 10)], None, servers=2,
                                                   service_s=lambda i: 0.15)) for rate in (4, 8, 16)]
    summaries = [summarize(label, "succeeded", records, slo=slo).model_dump(mode="json") for label, records in stages]
    rows = [{**r.to_row(label, 0.0), "stage_index": i} for i, (label, records) in enumerate(stages) for r in records]
    spec = {"name": "search", "workload": {"arrivals": {"profile": "capacity"}, "slo": {"ttft_p99_s": 0.2}}}
    page = run_page({"id": "c", "status": "succeeded", "spec": spec, "summary": summaries}, rows)
    well_formed(page)
    tradeoff = page.split('data-chart="tradeoff-ttft"')[1].split("</figure>")[0]
    assert 'class="slo"' in tradeoff and "SLO: TTFT p99 ≤ 200 ms" in tradeoff
    met = [s["slo_met"] for s in summaries]
    assert met[0] and not met[-1] and f"missed the SLO ({met.count(False)} of 3)" in tradeoff
    assert tradeoff.count('fill="#fff"') == met.count(False)  # hollow: missed


def test_an_unknown_run_has_no_report_and_the_route_is_documented(live):
    server, _ = live
    response = server.http.get("/runs/nope/report")
    assert response.status_code == 404 and response.json() == {"detail": "no run nope"}
    responses = server.http.get("/openapi.json").json()["paths"]["/runs/{run_id}/report"]["get"]["responses"]
    assert list(responses["200"]["content"]) == ["text/html"] and {"404", "422", "503"} <= set(responses)
    assert responses["404"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Problem"}


def test_the_comparison_page_has_the_same_look(live, chromium):
    server, run_id = live
    a, b = (server.wait_status(submit(server, spec(requests=24, output=8)), "succeeded")["id"] for _ in range(2))
    url = f"{server.url}/compare?a={a}&b={b}&format=html"
    page = server.http.get(url).text
    well_formed(page)
    report = server.http.get(f"/runs/{run_id}/report").text

    def style(text: str) -> str:
        return text[text.index("<style>"):text.index("</style>")]

    assert style(page) == style(report)
    for width in WIDTHS:
        loaded = chromium.load(url, f"comparison-{width}.png", width)
        clean(loaded)
        fits(loaded, width)
        drawn(loaded, DISTRIBUTIONS)
    assert "A (n=24)" in loaded.charts["ttft"]["caption"] and "B (n=24)" in loaded.charts["ttft"]["caption"]
    assert "TTFT p50" in loaded.text and "ttft_s" not in loaded.text
    # What was compared: each side's workload, its runs linked to their reports, when; the verdicts coloured, and
    # why each weak one is weak (one run a side), where the JSON says it too.
    assert loaded.layout["sections"] == ["warnings", "context", "changes", "distributions"]
    assert "benchd · comparison · short" in loaded.text and f'<a href="runs/{a}/report">{a}</a>' in page
    assert re.search(r'<span class="verdict (no-significant-change|faster|slower|inconclusive)">', page)
    compared = server.http.get("/compare", params={"a": a, "b": b}).json()
    assert compared["context_a"]["workloads"] == ["short"] and compared["context_b"]["runs"] == 1
    assert compared["warnings"][0].startswith("one run on each side") and "one run on each side" in loaded.text
    # The latest two runs of the workload on both sides: the same runs, so a warning and no verdict.
    same = server.http.get("/compare", params={"workload": "short", "last": 2}).json()
    assert sorted(same["a"]) == sorted(same["b"]) == sorted([a, b])
    assert {m["verdict"] for m in same["metrics"]} == {"n/a"} and "share 2 of their runs" in same["warnings"][0]
    shared = chromium.load(f"{server.url}/compare?workload=short&last=2&format=html", "comparison-shared.png", 1400)
    assert "Read this first" in shared.text and "no verdict is given" in shared.text


def test_a_run_stored_without_a_timeline_says_so_in_those_panels(live, chromium):
    server, _ = live
    run_id = submit(server, spec(requests=8, output=8))
    server.wait_status(run_id, "succeeded")
    with server.app.state.services.store.engine.begin() as db:  # as runs stored before timelines existed
        db.execute(sa.text("UPDATE runs SET timeline = NULL WHERE id = :id"), {"id": run_id})
    loaded = chromium.load(f"{server.url}/runs/{run_id}/report", "run-report-without-timeline.png")
    clean(loaded)
    drawn(loaded, [*DISTRIBUTIONS, "requests", "throughput"])  # from the request rows alone
    assert "stages drawn back to back" in loaded.charts["requests"]["note"]
    for name in TIMELINE_PANELS:
        assert loaded.charts[name]["empty"] and "no timeline stored with this run" in loaded.charts[name]["note"]


def test_a_kernel_runs_report(live, chromium):
    server, _ = live
    run_id = submit(server, {"kind": "kernel", "name": "kern", "kernel": {
        "op": "matmul", "shapes": [{"m": 64, "n": 48, "k": 32}], "warmup": 2, "repeats": 5, "flush_bytes": 1 << 20}})
    server.wait_status(run_id, "succeeded")
    loaded = chromium.load(f"{server.url}/runs/{run_id}/report", "kernel-report.png")
    clean(loaded)
    drawn(loaded, ["timings-64x48x32"])
    assert loaded.charts["timings-64x48x32"]["marks"] >= 5  # a point per measured call
    assert "× reference" in loaded.text and "torch" in loaded.charts["timings-64x48x32"]["caption"]


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
    from tests.test_validity import served_records

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
    assert "<td>completed / offered req/s</td><td>4.00 / 4.05 (99%)</td><td>8.02 / 16.05 (50%)</td>" in page
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

    from benchd.measure.compare import Side, compare
    from benchd.report.comparison import comparison_page
    from benchd.report.outputs import comparison_table

    a = Side(run_ids=["a1", "a2"], samples={"ttft_s": [[0.010] * 30, [0.011] * 30]},
             output_tokens_per_s=[100.0, 102.0], energy_per_token_j=[])
    b = Side(run_ids=["b1", "b2"], samples={"ttft_s": [[0.020] * 60]}, output_tokens_per_s=[60.0, 62.0],
             energy_per_token_j=[])
    result = compare(a, b)
    page = comparison_page(result, a, b)
    assert "<td>TTFT p50</td><td>10.5 ms</td><td>20 ms</td>" in page
    assert "<td>output throughput</td><td>101.0 tok/s</td><td>61.0 tok/s</td>" in page
    console = Console(width=200, record=True)
    console.print(comparison_table(result))
    text = console.export_text()
    assert "TTFT p50" in text and "10.5 ms" in text and "101.0 tok/s" in text and "101000" not in text


# ---- the drawing itself -------------------------------------------------------------------------------


def test_thinning_a_series_keeps_its_peaks():
    t = np.arange(10_000, dtype=float)
    v = np.sin(t / 50)
    v[1234], v[8765] = 40.0, -40.0
    kept_t, kept_v, thinned = charts.decimate(t, v)
    assert thinned and len(kept_t) <= charts.LINE_POINTS + 2
    assert 1234 in kept_t and 8765 in kept_t and kept_v.max() == 40.0 and kept_v.min() == -40.0
    assert np.all(np.diff(kept_t) > 0)  # still in time order
    short_t, _short_v, thinned = charts.decimate(t[:100], v[:100])
    assert not thinned and len(short_t) == 100


def test_a_distribution_spanning_decades_gets_a_log_axis():
    wide = charts.cdf("x", "x", [("a", np.geomspace(1e-4, 1.0, 50))])
    narrow = charts.cdf("x", "x", [("a", np.linspace(0.010, 0.012, 50))])
    assert "log axis" in wide and "log axis" not in narrow
    assert ">100 µs<" in wide and ">1 ms<" in wide and ">100 ms<" in wide  # decade ticks in readable units
    nothing = charts.cdf("x", "x", [("a", [])])
    assert 'class="chart empty"' in nothing and "no observations" in nothing
