"""Both in-process engines on the tiny model, for real: greedy outputs as plain generate()'s, cancelling, serving on
after it, and each forward step's work as a hand computation gives it (what every engine must keep, its stamps and
its steps counted, tests/engines/test_contracts.py checks of each engine found). CI runs the engines' tests against
transformers 5.17 and the newest 5.x."""

import time

import pytest
import torch

from benchd.engines import GenerationRequest, create_engine
from benchd.models.flops import Shape
from benchd.models.loading import load_model
from tests.engines.helpers import ENGINES, Sink, plain_generate, prompts, run_requests
from tests.helpers import make_spec

pytestmark = pytest.mark.engine


@pytest.fixture(params=ENGINES)
def engine(request, tiny):
    engine = create_engine(tiny, make_spec(engine=request.param))
    engine.start()
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def reference(tiny):
    """A second copy of the same seeded weights: the engine under test switches its model to paged attention."""
    copy = load_model("tiny", dtype="float32", device="cpu", seed=0)
    assert all(torch.equal(a, b) for a, b in zip(copy.model.parameters(), tiny.model.parameters()))
    return copy


def test_greedy_outputs_equal_plain_generate(engine, reference):
    batch = prompts(6, seed=1)
    lengths = [5, 9, 3, 12, 7, 1]
    requests = [GenerationRequest(f"r{i}", p, n) for i, (p, n) in enumerate(zip(batch, lengths))]
    sink = run_requests(engine, requests)
    for i, (p, n) in enumerate(zip(batch, lengths)):
        assert sink.ends[f"r{i}"][1] is None
        assert sink.token_ids[f"r{i}"] == plain_generate(reference, p, n), f"request {i} ({engine.name})"


def test_cancel_ends_a_running_request(engine):
    sink = Sink()
    engine.submit(GenerationRequest("long", prompts(1, seed=3)[0], 2000), sink)
    deadline = time.monotonic() + 30
    while not sink.stamps.get("long") and time.monotonic() < deadline:
        time.sleep(0.005)
    engine.cancel("long")
    assert sink.all_done.wait(30)
    assert sink.ends["long"][1] == "cancelled"
    assert 0 < len(sink.token_ids["long"]) < 2000


def test_engine_keeps_serving_after_a_cancel(engine):
    sink = Sink()
    engine.submit(GenerationRequest("a", prompts(1)[0], 500), sink)
    engine.cancel("a")
    assert sink.all_done.wait(30)
    done = run_requests(engine, [GenerationRequest("b", prompts(1, seed=4)[0], 4)])
    assert len(done.token_ids["b"]) == 4 and done.ends["b"][1] is None


@pytest.mark.parametrize("name", ENGINES)
def test_each_engine_counts_its_forward_steps_and_their_work_as_a_hand_computation_does(tiny, name):
    """Steps counted by the engine's own loop (benchd.measure.roofline.StepLog). One request, a prompt of 7, 5
    tokens out: a prefill step of 7 tokens (7·8/2 causal pairs) and 4 decode steps, each reading the cache so far.
    Then 3 requests (prompts 5, 9, 12; outputs 3, 6, 4): continuous batching prefills 26 tokens and decodes
    2 + 5 + 3; static generate() prefills 3 rows of the widest prompt, 12, and decodes every row until the longest
    ends (5 steps of 3)."""
    from benchd.measure.roofline import ModelCost, roofline
    engine = create_engine(tiny, make_spec(engine=name, workload={"ignore_eos": True}))
    engine.start()
    try:
        run_requests(engine, [GenerationRequest("one", list(range(3, 10)), 5)])
        one = engine.steps.since(0)
        mark = len(engine.steps)
        run_requests(engine, [GenerationRequest(str(i), list(range(3, 3 + prompt)), output)
                              for i, (prompt, output) in enumerate([(5, 3), (9, 6), (12, 4)])])
        three = engine.steps.since(mark)
    finally:
        engine.stop()
    assert one.prefill_tokens == [7, 0, 0, 0, 0] and one.decode_tokens == [0, 1, 1, 1, 1]
    assert one.kv_read_tokens == [0, 7, 8, 9, 10] and one.attended == [28, 8, 9, 10, 11] and one.sampled == [1] * 5
    if name == "transformers":
        assert sum(three.prefill_tokens) == 26 and sum(three.decode_tokens) == 10 and sum(three.sampled) == 13
        assert sum(three.attended) == (15 + 45 + 78) + (6 + 7) + (10 + 11 + 12 + 13 + 14) + (13 + 14 + 15)
    else:
        assert three.prefill_tokens == [36, 0, 0, 0, 0, 0] and three.decode_tokens == [0, 3, 3, 3, 3, 3]
        assert three.kv_read_tokens == [0, 36, 39, 42, 45, 48] and len(three) == 6
    # tiny: hidden 64, ffn 128 (gated), 2 layers, 4 heads and 2 KV heads of 16, vocab 512, float32.
    # A token: 2 · (2·64·64 + 2·2·64·32 + 2·64·64 + 3·2·64·128) = 147,456 FLOPs; a pair: 2 · 2·2·4·16 = 512; a
    # sampled row: 2·64·512 = 65,536; a token's K and V: 2 · 2 · 2·16 · 4 bytes = 512.
    cost = ModelCost.of(Shape.of(tiny.model.config), weight_bytes=1000, element_bytes=4)
    assert (cost.token_flops(), cost.pair_flops(), cost.head_flops(), cost.kv_bytes_per_token) == \
        (147_456, 512, 65_536, 512)
    line = roofline(one, cost, elapsed_s=1.0, peak_bytes_per_s=1e9, peak_flops_per_s=1e12)
    assert line.flops == 11 * 147_456 + (28 + 8 + 9 + 10 + 11) * 512 + 5 * 65_536
    assert line.bytes == 5 * 1000 + (7 + 4 + 7 + 8 + 9 + 10) * 512
    assert (line.steps, line.prefill_tokens, line.decode_tokens) == (5, 7, 4)


@pytest.mark.parametrize("name", ENGINES)
def test_each_engine_gives_every_greedy_tokens_log_probability_as_a_plain_forward_pass_does(tiny, reference, name):
    """quality.logprobs: each generated token's log-probability beside it (transformers' return_logprobs, the
    static engine's scores), those of the model's own distribution: the same as a forward pass over the prompt and
    the tokens so far gives them (float32)."""
    spec = make_spec(engine=name)
    logged = spec.quality.model_copy(update={"logprobs": True})
    engine = create_engine(tiny, spec.model_copy(update={"quality": logged}))
    engine.start()
    try:
        batch = prompts(3, seed=2)
        sink = run_requests(engine, [GenerationRequest(f"r{i}", p, 6) for i, p in enumerate(batch)])
    finally:
        engine.stop()
    for i, prompt in enumerate(batch):
        tokens, logprobs = sink.token_ids[f"r{i}"], sink.logprobs[f"r{i}"]
        assert len(logprobs) == len(tokens) == 6 and all(x <= 0 for x in logprobs)
        with torch.inference_mode():
            scores = torch.log_softmax(reference.model(torch.tensor([prompt + tokens])).logits[0].float(), -1)
        expected = [scores[len(prompt) - 1 + j, t].item() for j, t in enumerate(tokens)]
        assert logprobs == pytest.approx(expected, abs=1e-4), name
