"""The openai engine against a real `transformers serve`: exact counts on both APIs, and a server with no metrics
page said so."""

import pytest

from benchd.daemon.inprocess import run_local as run
from tests.engines.openai.helpers import openai_spec, records
from tests.engines.openai.helpers import transformers_serve as serve

pytestmark = pytest.mark.timeout(300)

# ---- a real transformers serve -----------------------------------------------------------------


@pytest.fixture(scope="module")
def transformers_serve(served_dir):
    with serve(served_dir) as base_url:
        yield base_url, str(served_dir)


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_transformers_serve_exact_counts(transformers_serve, api):
    base_url, path = transformers_serve
    spec = openai_spec(base_url, model=path, api=api, requests=4, output=8, tokenizer=path)
    outcome = run(spec)
    assert outcome.status == "succeeded", outcome.error
    summary = outcome.summaries()[0]
    assert summary.requests == 4 and summary.errors == 0, [r.error for r in records(outcome)]
    for record in records(outcome):
        # The server's own usage: exactly the requested output, and (completions) exactly the sized prompt.
        assert record.output_tokens == 8, record.arrival_tokens
        assert all(n >= 1 for n in record.arrival_tokens)
        if api == "completions":
            assert record.prompt_tokens == 12
        else:
            assert record.prompt_tokens > 12  # the chat template's tokens, as the server counted them
        assert 0 < record.ttft_s <= record.e2e_s < 60
        # 0 when every chunk was already waiting in one socket read (a loaded machine): stamps are arrivals
        assert record.tpot_s >= 0 and record.dispatch_lag_s < 0.5
        assert len(record.itl_s()) == 8 - record.arrival_tokens[0]
    # every request's gaps in the summary (none at all when each request's chunks came in one read: a loaded machine)
    assert summary.output_tokens == 32 and summary.itl_s.count == sum(len(r.itl_s()) for r in records(outcome))
    assert outcome.metadata.device == "remote" and outcome.metadata.device_name == base_url


def test_transformers_serve_exposes_no_metrics_and_the_run_says_so(transformers_serve):
    """transformers serve (5.17) has no /metrics route: every read is a 404, counted; the run succeeds with a
    warning and no server series."""
    base_url, path = transformers_serve
    metrics_url = base_url.removesuffix("/v1") + "/metrics"
    outcome = run(openai_spec(base_url, model=path, requests=2, output=4, tokenizer=path, metrics_url=metrics_url,
                              metrics_interval_s=0.2))
    assert outcome.status == "succeeded", outcome.error
    assert outcome.summaries()[0].errors == 0
    server = outcome.timeline["server"]
    assert server["scrapes"] == 0 and server["failures"] >= 1 and server["t"] == []
    assert "HTTP 404 Not Found: the server exposes no Prometheus metrics there" in server["warning"]
