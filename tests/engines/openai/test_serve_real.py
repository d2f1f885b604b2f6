"""The openai engine against a real `transformers serve` of the real preset (smollm2-135m): real requests through the
chat API, streams that end at the model's EOS, and each request counted by benchd's tokenizer beside the server's
usage; a tokenizer that is not the server's model's makes the counts disagree, and the run says so."""

import pytest

from benchd.daemon.inprocess import run_local as run
from benchd.spec import parse_spec
from tests.engines.openai.helpers import records, transformers_serve

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def served(real_model):
    with transformers_serve(real_model) as base_url:
        yield base_url, str(real_model)


def real_spec(base_url, model, tokenizer):
    # User turns alone (8–14 tokens); seed 15 draws "What is the capital of France?", whose answer ends early.
    return parse_spec({"name": "served-real", "engine": "openai", "model": model, "seed": 15,
                       "openai": {"base_url": base_url, "api": "chat", "tokenizer": tokenizer},
                       "workload": {"arrivals": {"profile": "concurrent", "concurrency": 3}, "stop": {"requests": 3},
                                    "prompts": "real", "prompt_tokens": {"dist": "uniform", "min": 8, "max": 14},
                                    "output_tokens": {"dist": "fixed", "value": 40}}})


def test_real_requests_end_at_eos_and_benchds_counts_agree_with_the_servers_usage(served):
    base_url, path = served
    outcome = run(real_spec(base_url, path, path))
    assert outcome.status == "succeeded", outcome.error
    summary = outcome.summaries()[0]
    assert summary.requests == 3 and summary.valid, [i.message for i in summary.invalid]
    assert summary.counts_checked == 3 and summary.counts_disagree == 0
    found = records(outcome)
    for record in found:
        counts = record.counts
        assert record.output_tokens == counts.server_output <= 40  # recorded as the server counted them
        assert record.prompt_tokens == counts.server_prompt == counts.prompt  # the template benchd rendered too
        assert abs(counts.output - counts.server_output) <= 2  # the server also counts the EOS the text leaves out
    assert any(r.output_tokens < 40 for r in found)  # a stream that ended at EOS, under its cap
    assert outcome.metadata.prompts == "real" and outcome.ended().quality.ended_at_eos >= 1


def test_a_tokenizer_that_is_not_the_servers_makes_the_run_invalid(served, served_dir):
    base_url, path = served
    summary = run(real_spec(base_url, path, str(served_dir))).summaries()[0]
    assert summary.counts_checked == 3 and summary.counts_disagree >= 1
    assert [i.check for i in summary.invalid] == ["token_counts"]
    assert "by the server's usage and by benchd's tokenizer differ" in summary.invalid[0].message
