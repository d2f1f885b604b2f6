"""The drawing itself: a capacity search's SLO and the stages that missed it, a thinned series keeping its peaks, a
distribution spanning decades on a log axis."""


import numpy as np

from benchd.measure.summary import summarize
from benchd.report import charts
from benchd.report.pages import run_page
from tests.report.helpers import well_formed


def test_a_capacity_search_marks_its_slo_and_the_stages_that_missed_it():
    from benchd.spec import SLO
    from tests.measure.helpers import served_records

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
