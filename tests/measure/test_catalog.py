"""The catalog of figures (benchd.measure.catalog): each figure declared once, found by its key or a distribution's
percentile, its values written one way, and what it names there is: the summaries' fields it keys, the Prometheus
series that carry it."""

import pytest
from prometheus_client import CollectorRegistry

from benchd.measure.catalog import FIGURES, PERCENTILES, figure, per_request
from benchd.measure.summary import PERCENTILES as SUMMARY_PERCENTILES
from benchd.measure.summary import LatencyStats, StageSummary
from benchd.telemetry.metrics import Metrics


def test_a_figure_is_found_by_its_key_and_a_distribution_by_its_percentile():
    assert figure("ttft_s") is FIGURES["ttft_s"]
    p99 = figure("ttft_s.p99")
    assert (p99.key, p99.name, p99.unit, p99.better, p99.percentile) == ("ttft_s.p99", "TTFT p99", "s", "lower", 99)
    assert p99.prometheus is None and p99.span_attribute is None  # the series carries the distribution, not a p99
    assert figure("output_tokens_per_s").higher_is_worse is False and figure("itl_s.p50").higher_is_worse
    for wrong in ("ttft", "ttft_s.p42", "output_tokens_per_s.p50", "ttft_s.p99.p50", ""):
        with pytest.raises(KeyError, match="no such figure|takes a percentile"):
            figure(wrong)


def test_the_catalog_keys_what_the_summaries_hold():
    """A distribution is a LatencyStats of the stage's summary with the summary's percentiles; a stage's figure is
    one of its numbers."""
    assert PERCENTILES == SUMMARY_PERCENTILES
    fields = StageSummary.model_fields
    for f in per_request():
        assert fields[f.key].annotation is LatencyStats, f.key
    for key in ("output_tokens_per_s", "total_tokens_per_s", "requests_per_s", "goodput_requests_per_s",
                "kv_cache_occupancy_peak"):
        assert key in fields and not FIGURES[key].per_request
    assert [f.key for f in per_request()] == ["ttft_s", "itl_s", "tpot_s", "e2e_s", "queue_s", "dispatch_lag_s"]


def test_each_series_the_catalog_names_is_one_benchd_exports():
    registry = CollectorRegistry()
    Metrics(registry)
    exported = {family.name for family in registry.collect()}
    named = {f.prometheus for f in FIGURES.values() if f.prometheus is not None}
    assert named and named <= exported, named - exported
    assert {f.span_attribute for f in per_request()} == {
        "benchd.ttft_s", "benchd.itl_s", "benchd.tpot_s", "benchd.e2e_s", "benchd.queue_s", "benchd.dispatch_lag_s"}


@pytest.mark.parametrize(("key", "value", "text", "cell"), [
    ("ttft_s", 0.0123, "12.3 ms", "12.3"),
    ("itl_s", 0.00085, "850 µs", "0.85"),
    ("e2e_s", 2.5, "2.5 s", "2,500"),
    ("output_tokens_per_s", 1234.56, "1,234.6 tok/s", "1,235"),
    ("energy_per_token_j", 0.0412, "41.2 mJ", "41.2"),
    ("energy_per_token_j", 3.5, "3.5 J", "3,500"),
    ("weight_bytes", 2.5 * 2**30, "2.5 GiB", "2.5"),
    ("weight_bytes", 48 * 2**20, "48 MiB", "0.0469"),
    ("kv_cache_occupancy_peak", 0.071, "7.1%", "7%"),
    ("perplexity", 12.875, "12.88", "12.9"),
    ("ttft_s", None, "–", "–"),
])
def test_a_value_is_written_one_way(key, value, text, cell):
    assert (figure(key).text(value), figure(key).cell(value)) == (text, cell)


def test_a_table_head_names_the_unit_of_its_cells():
    assert [figure(k).display for k in ("ttft_s.p50", "energy_per_token_j", "weight_bytes", "mbu",
                                        "output_tokens_per_s", "perplexity")] == ["ms", "mJ", "GiB", "%", "tok/s", ""]


def test_every_figure_says_what_it_is():
    for f in FIGURES.values():
        assert f.name and f.title and f.description.endswith("."), f.key
        assert f.better in ("lower", "higher", None) and f.format in (
            "seconds", "rate", "joules", "bytes", "ratio", "number"), f.key


def test_every_figure_a_summary_carries_or_a_reader_names_is_catalogued():
    """A stage's distributions and rates, a comparison's metrics (each latency at each compared percentile, a run's
    figures, a matrix's), the history's and the fleet's figures: each one the catalog holds."""
    from benchd.measure import fleet, history, matrix
    from benchd.measure.compare import COMPARED, RUN_LEVEL
    from benchd.measure.sides import LATENCIES

    fields = StageSummary.model_fields
    carried = {k for k, f in fields.items() if f.annotation is LatencyStats or k.endswith("_tokens_per_s")}
    carried |= {"requests_per_s", "goodput_requests_per_s", "kv_cache_occupancy_peak", "mbu", "mfu", "of_bound"}
    named = {f"{k}.p{p}" for k in LATENCIES for p in COMPARED} | set(RUN_LEVEL)
    named |= {k for k, _ in matrix.RUN_FIGURES} | set(history.FIGURES) | set(fleet.FIGURES)
    for key in carried | named:
        figure(key)  # KeyError names a figure the catalog lacks


def test_each_reader_takes_a_figures_name_and_unit_from_the_catalog(monkeypatch):
    """Renamed in the catalog, a figure is renamed in the run's table, a comparison's rows and answer; the history's
    and the fleet's figures, Prometheus' HELP text and the GenAI instruments' units are the catalog's own."""
    from dataclasses import replace

    from benchd.measure import fleet, history
    from benchd.measure.comparison import MetricChange
    from benchd.report.tables import comparison_rows, summary_rows
    from benchd.telemetry import genai

    for key, f in history.FIGURES.items():
        assert f == figure(key), key
    for key, f in fleet.FIGURES.items():
        assert replace(f, name=figure(key).name) == figure(key) and f.name.startswith(figure(key).name), key
    registry = CollectorRegistry()
    Metrics(registry)
    helps = {family.name: family.documentation for family in registry.collect()}
    for f in per_request():
        assert helps[f.prometheus] == f.description, f.key
    assert (genai.SERVER_TTFT.unit, genai.SERVER_TPOT.unit) == (figure("ttft_s").unit, figure("tpot_s").unit)

    monkeypatch.setitem(FIGURES, "ttft_s", replace(FIGURES["ttft_s"], name="first", unit="ks", format="rate"))
    monkeypatch.setitem(FIGURES, "output_tokens_per_s", replace(FIGURES["output_tokens_per_s"], compared_as="out"))
    stats = LatencyStats.of([0.01, 0.02])
    summary = StageSummary.model_construct(
        requests=2, errors=0, warmup_requests=0, cut=0, output_tokens_per_s=1.0, total_tokens_per_s=2.0,
        requests_per_s=1.0, ttft_s=stats, itl_s=stats, tpot_s=stats, e2e_s=stats, queue_s=stats,
        dispatch_lag_s=stats, kv_cache_occupancy_peak=None, offered_requests_per_s=None, valid=None,
        goodput_requests_per_s=None, drain_s=None, clocks=[], roofline=None)
    assert "first ks p50 / p90 / p99" in [name for name, _ in summary_rows([summary])]
    change = MetricChange(metric="ttft_s.p99", a=2.0, b=3.0, relative_change=0.5, ci_low=None, ci_high=None,
                          samples_a=1, samples_b=1, verdict="n/a")
    assert (change.name, change.unit) == ("first p99", "ks")
    rows, _ = comparison_rows(type("Result", (), {"metrics": [change]})())
    assert rows[0][:3] == ["first p99", "2.0 ks", "3.0 ks"]
    throughput = change.model_copy(update={"metric": "output_tokens_per_s"})
    assert (throughput.name, throughput.unit) == ("out", "tok/s")
