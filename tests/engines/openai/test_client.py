"""What the openai engine sends and how its client processes read: prompts sized in tokens and datasets, response
framings cut anywhere, traceparent, client processes sharing the schedule or dying, counts per chunk."""

import json
import time

import pytest

from benchd.daemon.inprocess import run_local as run
from benchd.engines.openai.counts import chunk_counts, text_counts
from benchd.engines.openai.engine import OpenAIEngine, apportion
from benchd.loadgen.contents import clean_ids, read_dataset, sized_text, text_contents
from benchd.models.tokenizer import load_tokenizer
from benchd.spec import SpecError, TextDataset
from benchd.telemetry.run import Telemetry
from benchd.telemetry.tracing import build_tracer_provider
from tests.engines.openai.helpers import openai_spec, records
from tests.helpers import wait_for
from tests.otlp import HTTPReceiver

pytestmark = pytest.mark.timeout(300)

# ---- prompts -----------------------------------------------------------------------------------


def test_synthetic_prompts_have_exactly_the_sampled_length(served_dir):
    import random

    tokenizer = load_tokenizer(str(served_dir))
    allowed = clean_ids(tokenizer)
    rng = random.Random(0)
    for n in (1, 2, 5, 12, 37, 256, 1000) * 3:
        text, count = sized_text(tokenizer, rng, allowed, n)
        assert count == n and len(tokenizer.encode(text, add_special_tokens=False)) == n


def test_datasets_are_read_and_sampled_with_the_seed(tmp_path, prompts, served_dir):
    assert read_dataset(TextDataset(format="jsonl", path=prompts))[-1] == "a bare string"
    sharegpt = tmp_path / "sharegpt.json"
    sharegpt.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": "first question"}, {"from": "gpt", "value": "answer"}]},
        {"conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "second"}]},
        {"conversations": [{"from": "gpt", "value": "no human turn"}]},
    ]))
    assert read_dataset(TextDataset(format="sharegpt", path=str(sharegpt))) == ["first question", "second"]
    spec = openai_spec("http://127.0.0.1:1/v1", prompts=prompts)
    first = [c.prompt_text for c, _ in zip(text_contents(spec.workload, 7), range(12))]
    again = [c.prompt_text for c, _ in zip(text_contents(spec.workload, 7), range(12))]
    other = [c.prompt_text for c, _ in zip(text_contents(spec.workload, 8), range(12))]
    assert first == again and first != other
    assert sorted(first[:6]) == sorted(first[6:]) and len(set(first[:6])) == 6  # each once before repeats
    # With a tokenizer, the same order, each prompt's count the tokenizer's own (counted together, up front)
    tokenizer = load_tokenizer(str(served_dir))
    counted = [c for c, _ in zip(text_contents(spec.workload, 7, tokenizer), range(12))]
    assert [c.prompt_text for c in counted] == first
    assert [c.text_tokens for c in counted] == [len(tokenizer.encode(c.prompt_text, add_special_tokens=False))
                                                for c in counted]
    assert all(c.text_tokens > 1 for c in counted)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "no prompt key"}\n')
    with pytest.raises(SpecError, match="workload.dataset.field: .* line 1 has no string 'prompt'"):
        read_dataset(TextDataset(format="jsonl", path=str(bad)))


@pytest.mark.parametrize("shape", ["split", "length", "until-close"])
def test_response_framings_and_reads_cut_anywhere(server, prompts, shape):
    outcome = run(openai_spec(server.base_url, model=shape, prompts=prompts, requests=4, output=5))
    assert outcome.status == "succeeded", outcome.error
    for record in records(outcome):
        assert record.error is None and record.output_tokens == 5
        if shape == "split":  # chunks are stamped by the read that completed them (two in one read: one arrival)
            assert sum(record.arrival_tokens) == 5 and len(record.arrival_tokens) > 1
            assert all(b > a for a, b in zip(record.arrival_s, record.arrival_s[1:]))


def test_traceparent_names_the_request_span_the_otlp_receiver_gets(server, prompts, monkeypatch):
    with HTTPReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        telemetry = Telemetry(None, build_tracer_provider(lambda *_: None))
        before = len(server.headers)
        outcome = run(openai_spec(server.base_url, prompts=prompts, requests=3), telemetry=telemetry)
        telemetry.shutdown()
        spans = receiver.wait_for_spans(4)
    sent = [h["traceparent"] for h in server.headers[before:]]
    assert len(sent) == 3
    run_span = next(s for s in spans if s.name.startswith("benchd.run"))
    by_id = {s.span_id.hex(): s for s in spans}
    for header, record in zip(sorted(sent), sorted(records(outcome), key=lambda r: r.span_id)):
        version, trace_id, span_id, flags = header.split("-")
        assert (version, flags) == ("00", "01") and len(span_id) == 16
        assert span_id == record.span_id and trace_id == record.trace_id == outcome.metadata.trace_id
        span = by_id[span_id]  # the exported request span has the id the server was told
        assert span.trace_id.hex() == trace_id and span.parent_span_id == run_span.span_id
        assert span.name == "text_completion ok"


def test_no_traceparent_when_the_run_is_not_traced(server, prompts):
    before = len(server.headers)
    run(openai_spec(server.base_url, prompts=prompts, requests=2))
    assert all("traceparent" not in h for h in server.headers[before:])


@pytest.mark.quiet
def test_several_client_processes_share_the_schedule(server, prompts):
    spec = openai_spec(server.base_url, prompts=prompts, requests=30, output=3, client_processes=3,
                       arrivals={"profile": "constant", "rate": 100})
    outcome = run(spec)
    assert outcome.status == "succeeded" and outcome.metadata.engine_settings["client_processes"] == 3
    got = records(outcome)
    assert len(got) == 30 and all(r.error is None and r.output_tokens == 3 for r in got)
    lags = sorted(r.dispatch_lag_s for r in got)
    assert lags[0] >= -1e-6 and lags[len(lags) // 2] < 0.005  # stamps of other processes, on the same clock
    assert all(r.submitted_s <= r.admitted_s <= r.arrival_s[0] <= r.finished_s for r in got)


def test_a_client_process_that_dies_ends_its_requests(server, prompts):
    spec = openai_spec(server.base_url, model="stall", prompts=prompts, requests=2, stall_timeout_s=60)
    engine = OpenAIEngine(spec.openai, spec.workload, spec.model)
    engine.start()
    done = []

    class Sink:
        def __getattr__(self, name):
            return lambda *args: done.append((name, args))

    from benchd.engines import GenerationRequest

    engine.submit(GenerationRequest("r0", [], 4, "hello"), Sink(), at=time.perf_counter())
    wait_for(lambda: any(name == "admitted" for name, _ in done), 10, "the server to answer")
    engine._clients[0].process.kill()
    wait_for(lambda: any(name == "finished" for name, _ in done), 10, "the request to end")
    finished = [args for name, args in done if name == "finished"]
    assert finished[0][0] == "r0" and finished[0][2] == "client_error: the client process exited"
    assert not engine.alive()
    engine.stop()


def test_chunk_counts_from_the_whole_text(served_dir):
    tokenizer = load_tokenizer(str(served_dir))
    texts = ["hello wor", "ld this is", " a te", "st"]
    counts = text_counts(tokenizer, texts)
    assert sum(counts) == len(tokenizer.encode("".join(texts), add_special_tokens=False))
    # each token is counted where its last character arrived: the prefix up to a boundary holds that many
    for i in range(1, len(texts) + 1):
        prefix = tokenizer("".join(texts), add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        boundary = sum(len(t) for t in texts[:i])
        assert sum(counts[:i]) == sum(1 for _, end in prefix if end <= boundary)
    assert chunk_counts(["x"] * 5, [None] * 5, 5, tokenizer) == [1] * 5  # a token a chunk needs no tokenizer
    assert chunk_counts(texts, [None, 2, None, None], 40, tokenizer)[1] > 2  # scaled up to the final count
    assert sum(chunk_counts(texts, [None] * 4, 40, tokenizer)) == 40
    assert chunk_counts(texts, [None] * 4, None, None) == [1, 1, 1, 1]


def test_apportion_keeps_the_total_and_a_token_per_chunk():
    assert apportion([3, 3, 1], 7) == [3, 3, 1]
    assert apportion([1, 1, 1], 5) in ([2, 2, 1], [2, 1, 2], [1, 2, 2])
    assert sum(apportion([10, 1, 4, 2], 40)) == 40 and min(apportion([10, 1, 4, 2], 40)) >= 1
