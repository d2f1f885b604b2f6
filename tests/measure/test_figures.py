"""One definition of each figure (benchd.measure.latency, docs/figures.md): random arrivals, stream chunks of
several tokens included, delivered in random batches as a worker's polls deliver them, through the daemon's path
(RecordBook, as daemon/ingest.py feeds it, and RunTelemetry), give the same TTFT, ITL, TPOT and E2E in the stored
summary, the live Prometheus histograms and the OpenTelemetry GenAI metrics."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry

from benchd.measure.records import RecordBook
from benchd.measure.summary import summarize
from benchd.telemetry.genai import GenAIMetrics
from benchd.telemetry.metrics import Metrics
from benchd.telemetry.run import Telemetry
from tests.helpers import make_spec

LABELS = {"model": "tiny", "engine": "transformers", "workload": "figures", "gpu": ""}


@st.composite
def requests(draw):
    """(scheduled time, [(gap before the arrival, tokens it carries)], batch sizes it is delivered in)."""
    scheduled = draw(st.floats(0, 100, allow_nan=False))
    first_wait = draw(st.floats(1e-4, 5, allow_nan=False))
    arrivals = [(first_wait, draw(st.integers(1, 4)))]
    arrivals += draw(st.lists(st.tuples(st.floats(1e-5, 1, allow_nan=False), st.integers(0, 6)), max_size=30))
    cuts = draw(st.lists(st.integers(1, 5), min_size=len(arrivals), max_size=len(arrivals)))
    return scheduled, arrivals, cuts


def sample(registry, name: str) -> float:
    return registry.get_sample_value(name, LABELS) or 0.0


@settings(max_examples=150, deadline=None)
@given(st.lists(requests(), min_size=1, max_size=6))
def test_every_path_computes_the_same_figures(drawn):
    registry, genai = CollectorRegistry(), GenAIMetrics()
    observer = Telemetry(Metrics(registry), None, genai).for_run("r", "tiny", "transformers", "figures",
                                                                  spec=make_spec(name="figures"))
    book = RecordBook()
    for index, (scheduled, arrivals, cuts) in enumerate(drawn):
        request_id = f"r{index}"
        book.request(index, request_id, False, 8, sum(k for _, k in arrivals), scheduled, scheduled, None)
        stamps, t = [], scheduled
        for gap, _ in arrivals:
            t += gap
            stamps.append(t)
        counts = [k for _, k in arrivals]
        at, cut = 0, iter(cuts)
        while at < len(stamps):  # delivered in batches, as ingest gets them
            end = min(len(stamps), at + next(cut))
            changed = book.tokens(request_id, stamps[at:end], counts[at:end])
            observer.arrivals(*changed)
            at = end
        observer.finished(book.finished(request_id, stamps[-1], None))
    records = list(book.records.values())
    summary = summarize("s", "succeeded", records)
    ttfts = [r.ttft_s for r in records]
    itls = [gap for r in records for gap in r.itl_s()]
    tpots = [r.tpot_s for r in records if r.tpot_s is not None]
    e2es = [r.e2e_s for r in records]

    # The stored summary
    assert summary.ttft_s.count == len(ttfts) and summary.ttft_s.mean == pytest.approx(sum(ttfts) / len(ttfts))
    assert summary.itl_s.count == len(itls) == sum(r.output_tokens - r.arrival_tokens[0] for r in records)
    if itls:
        assert summary.itl_s.mean == pytest.approx(sum(itls) / len(itls))
    assert summary.tpot_s.count == len(tpots) and summary.e2e_s.count == len(e2es)
    # The live histograms
    for name, values in (("time_to_first_token", ttfts), ("inter_token_latency", itls),
                         ("time_per_output_token", tpots), ("request_duration", e2es)):
        assert sample(registry, f"benchd_{name}_seconds_count") == len(values), name
        assert sample(registry, f"benchd_{name}_seconds_sum") == pytest.approx(sum(values), rel=1e-9, abs=1e-9), name
    assert sample(registry, "benchd_generation_tokens_total") == sum(r.output_tokens for r in records)
    # The GenAI server metrics
    observer.run_finished(1e6, "succeeded", None)
    points = {m.name: m.data.data_points[0] for m in
              genai.collect(Resource.create({})).resource_metrics[0].scope_metrics[0].metrics}
    for name, values in (("gen_ai.server.time_to_first_token", ttfts),
                         ("gen_ai.server.time_per_output_token", tpots),
                         ("gen_ai.server.request.duration", e2es)):
        if values:
            assert points[name].count == len(values), name
            assert points[name].sum == pytest.approx(sum(values), rel=1e-9, abs=1e-9), name
