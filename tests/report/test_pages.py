"""Report pages from the live daemon, loaded in a real chromium: a run's (a sweep's, a kernel run's, one stored without
a timeline), a matrix's and a comparison's, each reading at 1400 and 800 px; an unknown run's route."""

import re

import numpy as np
import pytest
import sqlalchemy as sa

from benchd.api import create_app
from benchd.daemon.settings import Settings
from benchd.measure.records import RequestRecord
from benchd.measure.summary import summarize
from benchd.report.tables import rounded
from tests.fake_nvml import FakeGPU
from tests.hardware.helpers import reader
from tests.helpers import NODE, LiveServer, spec, submit
from tests.report.helpers import (
    DISTRIBUTIONS,
    GENERATION,
    SWEEP,
    TIMELINE_PANELS,
    clean,
    drawn,
    lines_js,
    well_formed,
)


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
    # The KV cache's axis spans its values (a fixed 0–100 % flattened a peak of 7 % to a line), its note the peak.
    kv = page.split('data-chart="kv-cache"')[1].split("</figure>")[0]
    peak = max(stage["kv_cache_occupancy_peak"] for stage in server.http.get(f"/runs/{run_id}").json()["summary"])
    top = max(float(t) for t in re.findall(r'class="tick"[^>]*>([\d.]+)%<', kv)) / 100
    assert 0 < peak <= top < max(2 * peak, peak + 0.1) and re.search(r"peak \d+\.\d% of the cache", kv), (peak, top)


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
                run_figures(run_id, "succeeded", by_run[run_id], summary, metadata, None, variant["values"]))
            order.append({"run_id": run_id, "round": round_, "variant": variant["index"]})
    comparison = compare_matrix(variants, runs, baseline=0)
    row = {"id": "m1", "status": "succeeded", "baseline": 0, "variants": variants, "runs": order,
           "comparison": comparison.model_dump(mode="json"),
           "document": {"name": "quant", "workload": {"slo": {"ttft_p99_s": 0.05}}, "repeats": 2}}
    page = matrix_page(row, by_run)
    well_formed(page)
    assert "0.0807498489985793" not in page  # a derived figure, not the stack
    assert "attention: sdpa, quantization: int8_weight_only" in page  # in effect: what differs among variants
    tradeoff = page.split('data-chart="tradeoff-ttft"')[1].split("</figure>")[0]
    assert tradeoff.count("<circle") == 3 and 'class="slo"' in tradeoff and "SLO: TTFT p99 ≤ 50 ms" in tradeoff
    assert "missed the SLO (1 of 3)" in tradeoff  # the slow variant's p99 lies above the objective
    (tmp_path / "matrix.html").write_text(page)
    for width in WIDTHS:
        loaded = chromium.load((tmp_path / "matrix.html").as_uri(), f"matrix-{width}.png", width,
                               probe=lines_js("table.variants span.pair"))
        clean(loaded)
        fits(loaded, width)  # the variants' table included: a cell is a figure, its change and a verdict's mark
        drawn(loaded, ["tradeoff-ttft", "tradeoff-itl", "ttft", "itl", "runs"])
        # each value on a line of its own, broken (if at all) after its "=", never within a word ("attn_" /
        # "implementation" was)
        assert len(loaded.probe) == 6 and all(line.endswith("=") for pair in loaded.probe for line in pair[:-1])
        assert ["attn_implementation=", "sdpa"] in loaded.probe or ["attn_implementation=sdpa"] in loaded.probe
    assert "✗" in loaded.text and 'title="slower"' in page  # a verdict's mark, its word on hover


def test_an_unknown_run_has_no_report_and_the_route_is_documented(live):
    server, _ = live
    response = server.http.get("/runs/nope/report")
    assert response.status_code == 404 and response.json() == {"detail": "no run nope"}
    responses = server.http.get("/openapi.json").json()["paths"]["/runs/{run_id}/report"]["get"]["responses"]
    assert list(responses["200"]["content"]) == ["text/html"] and {"404", "422", "503"} <= set(responses)
    assert responses["404"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Problem"}


def test_the_comparison_page_has_the_same_look(live, chromium):
    server, run_id = live
    # The first run of this spec starts an engine of its own (it ran cold): the two after it, warm, are compared.
    cold, a, b = (server.wait_status(submit(server, spec(requests=24, output=8)), "succeeded")["id"]
                  for _ in range(3))
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
    assert loaded.layout["sections"] == ["warnings", "context", "changes", "quality", "distributions"]
    assert "benchd · comparison · short" in loaded.text and f'<a href="runs/{a}/report">{a}</a>' in page
    assert re.search(r'<span class="verdict (equivalent|faster|slower|inconclusive)">', page)
    compared = server.http.get("/compare", params={"a": a, "b": b}).json()
    assert compared["context_a"]["workloads"] == ["short"] and compared["context_b"]["runs"] == 1
    assert compared["warnings"][0].startswith("one run on each side") and "one run on each side" in loaded.text
    assert server.http.get("/compare", params={"a": cold, "b": b}).json()["warnings"][0].startswith(
        "A's runs all ran cold (the first after their engine started) and the other side's warm")
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


def test_the_api_docs_page_works_offline(live, chromium):
    """http://localhost:8000/docs, which the README points to, was a blank page offline (swagger-ui from a CDN): its
    script and style now come from the daemon (fastapi-offline's copy), and it draws every operation with nothing
    fetched from elsewhere."""
    server, _ = live
    paths = server.http.get("/openapi.json").json()["paths"]
    docs = chromium.load(f"{server.url}/docs", "api-docs.png", 1400,
                         until="document.querySelectorAll('.opblock').length > 0")
    assert [url for url in docs.fetched if not url.startswith(server.url)] == [], docs.fetched
    assert f"{server.url}/static-offline-docs/swagger-ui-bundle.js" in docs.fetched
    assert [line for line in docs.console if "error" in line.lower()] == [], docs.console
    assert "POST\n/runs" in docs.text and "GET\n/workloads" in docs.text
    assert [p for p in paths if f"\n{p}" not in docs.text] == []  # every path drawn
    assert server.http.get("/redoc").status_code == 404  # no page that needs the network


def test_the_change_points_page_reads_at_1400_and_800_px(chromium, tmp_path):
    """Its table's "stack between" column ran off the window at 800 px with no cue that it scrolled, and its header
    linked only the workloads with a change point on the page: the stack and the confirmation are now a line under
    each change, and the header links every workload's history."""
    from datetime import UTC, datetime

    from benchd.measure.history import ChangePoint, Confirmation, SegmentView, StackShift
    from benchd.report.history import changes_page

    at = datetime(2026, 11, 20, 14, tzinfo=UTC)
    side = SegmentView(runs=6, first_run="r", last_run="r", start=at, end=at, mean=0.0123, ci_low=0.011, ci_high=0.013)
    stack = [StackShift(field="engine_settings.continuous_batching.max_batch_tokens", before="128", after="16"),
             StackShift(field="transformers_version", before="5.17.0", after="5.24.0", mixed=True)]
    changes = [ChangePoint(id=f"c{i}", workload="nightly-reference-llama", device="NVIDIA H100 80GB HBM3",
                           node="gpu-node-017.cluster.local", figure=figure, run_id="r", at=at, direction="worse",
                           relative_change=1.901, ci_low=1.332, ci_high=2.608, p_value=1e-4, confidence=0.95,
                           before=side, after=side, stack=stack, detected_at=at,
                           confirmation=Confirmation(status="confirmed", matrix_id="m1", environments=["a", "b"],
                                                     requested_at=at, reason="the interval excludes zero"))
               for i, figure in enumerate(("ttft_s.p50", "itl_s.p99", "output_tokens_per_s"))]
    page = changes_page(changes, 3, None, [("idle", 0), ("nightly-reference-llama", 3)])
    well_formed(page)
    assert '<a href="/history/idle?format=html">idle</a>' in page  # a workload with no change point, linked too
    (tmp_path / "changes.html").write_text(page)
    for width in WIDTHS:
        loaded = chromium.load((tmp_path / "changes.html").as_uri(), f"changes-{width}.png", width,
                               probe="[...document.querySelectorAll('tr.detail td')].map(td => "
                                     "td.getBoundingClientRect().right)")
        clean(loaded)
        fits(loaded, width)
        assert len(loaded.probe) == 3 and max(loaded.probe) <= width  # every stack in the window
    assert "stack between: engine_settings.continuous_batching.max_batch_tokens 128 → 16" in loaded.text
    assert "confirmation: confirmed (matrix m1): the interval excludes zero" in loaded.text
