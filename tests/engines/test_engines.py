"""Both in-process engines on the tiny model, for real. CI runs this file against transformers 5.17 and the newest
5.x."""

import gc
import itertools
import math
import threading
import time
import weakref
from types import SimpleNamespace

import pytest
import torch
from transformers.generation.continuous_batching.input_outputs import HostDeviceIOPair

from benchd.daemon.inprocess import run_local
from benchd.engines import GenerationRequest, create_engine
from benchd.engines.handoff import MAX_WAIT_S, Handoff
from benchd.engines.transformers import warmup
from benchd.engines.transformers.engine import TransformersEngine
from benchd.engines.transformers.paged_cache import kv_blocks
from benchd.engines.transformers.plan import plan_cache
from benchd.engines.transformers.spec import TransformersOptions
from benchd.engines.transformers.warmup import check_warmup, warm_skipped_pair
from benchd.models.flops import Shape
from benchd.models.loading import load_model
from benchd.spec import SpecError
from tests.helpers import make_spec

pytestmark = pytest.mark.engine

ENGINES = ["transformers", "static"]


class Sink:
    """A TokenSink that keeps every event."""

    def __init__(self, expected=1):
        self.admitted_at, self.token_ids, self.stamps, self.ends = {}, {}, {}, {}
        self.expected = expected
        self.all_done = threading.Event()

    def admitted(self, request_id, t):
        self.admitted_at[request_id] = t

    def tokens(self, request_id, t, n, token_ids=()):
        self.token_ids.setdefault(request_id, []).extend(token_ids)
        self.stamps.setdefault(request_id, []).append(t)

    def stamped_tokens(self, request_id, stamps, token_ids):
        assert len(stamps) == len(token_ids) > 0
        self.token_ids.setdefault(request_id, []).extend(token_ids)
        self.stamps.setdefault(request_id, []).extend(stamps)

    def finished(self, request_id, t, error=None):
        assert request_id not in self.ends, "finished twice"
        self.ends[request_id] = (t, error)
        if len(self.ends) == self.expected:
            self.all_done.set()


def prompts(n, seed=0, low=3, high=20):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 512, (int(torch.randint(low, high, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]


def plain_generate(loaded, prompt, max_new_tokens):
    ids = torch.tensor([prompt])
    out = loaded.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                max_new_tokens=max_new_tokens, eos_token_id=[], pad_token_id=0)
    return out[0, len(prompt):].tolist()


def run_requests(engine, requests):
    sink = Sink(len(requests))
    for request in requests:
        engine.submit(request, sink)
    assert sink.all_done.wait(120), "engine did not finish"
    return sink


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


def test_every_token_is_stamped_in_order(engine):
    requests = [GenerationRequest(f"r{i}", p, 10) for i, p in enumerate(prompts(5, seed=2))]
    before = time.perf_counter()
    sink = run_requests(engine, requests)
    for request in requests:
        stamps = sink.stamps[request.request_id]
        assert len(stamps) == len(sink.token_ids[request.request_id]) == 10
        assert before < sink.admitted_at[request.request_id] <= stamps[0]
        assert all(a <= b for a, b in itertools.pairwise(stamps))
        assert sink.ends[request.request_id][0] == stamps[-1]


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


def test_kv_cache_occupancy_is_live(tiny):
    engine = create_engine(tiny, make_spec())
    engine.start()
    try:
        idle = engine.load()
        assert idle.kv_blocks_used == 0 and idle.kv_blocks_total >= 64
        sink = Sink(4)
        for i, p in enumerate(prompts(4, seed=5, low=40, high=60)):
            engine.submit(GenerationRequest(f"r{i}", p, 150), sink)
        peak = 0.0
        while not sink.all_done.is_set():
            load = engine.load()
            peak = max(peak, load.kv_occupancy)
            assert 0 <= load.kv_blocks_used <= load.kv_blocks_total
            time.sleep(0.002)
        # 4 requests of ~200 tokens in 16-token blocks hold ~52 of 64 blocks at their longest.
        assert peak > 0.3
        assert engine.load().kv_blocks_used == 0  # all freed at the end
    finally:
        engine.stop()


def test_cache_adapter_reads_both_cache_generations(tiny):
    engine = create_engine(tiny, make_spec())
    engine.start()
    try:
        cache = engine._manager.batch_processor.cache
        used, total = kv_blocks(cache)
        assert (used, total) == (0, cache.num_blocks)
        version_api = "get_num_free_blocks" if hasattr(cache, "get_num_free_blocks") else "compute_free_capacity"
        assert hasattr(cache, version_api)
    finally:
        engine.stop()


def test_cache_too_small_for_the_workload_is_a_spec_error(tiny):
    spec = make_spec(transformers={"block_size": 16, "num_blocks": 2},
                     workload={"prompt_tokens": {"dist": "fixed", "value": 40}})
    with pytest.raises(SpecError, match="transformers.num_blocks"):
        create_engine(tiny, spec)


def test_library_defaults_pass_nothing_of_benchds(tiny):
    from benchd.engines.transformers.batching import cb_config
    from benchd.engines.transformers.spec import TransformersOptions

    ours = cb_config(TransformersOptions(), "cuda")
    library = cb_config(TransformersOptions(library_defaults=True), "cuda")
    assert ours.use_cuda_graph is True and library.use_cuda_graph is None
    assert cb_config(TransformersOptions(), "cpu").num_blocks == 256


def test_cpu_threads_default_to_a_few_on_cuda_and_to_torchs_elsewhere(monkeypatch):
    import os

    from benchd.engines.transformers.batching import CUDA_CPU_THREADS, cb_config, cpu_threads
    from benchd.engines.transformers.spec import TransformersOptions

    for cores, expected in ((16, CUDA_CPU_THREADS), (64, CUDA_CPU_THREADS), (4, 2), (1, 1)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cores: set(range(n)))
        assert cpu_threads(TransformersOptions(), "cuda") == expected
    assert cpu_threads(TransformersOptions(), "cpu") is None  # the model itself runs on them
    assert cpu_threads(TransformersOptions(library_defaults=True), "cuda") is None
    assert cpu_threads(TransformersOptions(cpu_threads=3), "cpu") == 3
    assert cb_config(TransformersOptions(cpu_threads=3), "cuda").use_cuda_graph  # not passed on to transformers


def test_cpu_threads_hold_in_the_generation_thread_while_the_engine_runs(tiny, monkeypatch):
    torch.set_num_threads(2)
    engine = create_engine(tiny, make_spec(transformers={"cpu_threads": 1}))
    engine.start()
    try:
        seen = []  # the count as the generation thread sees it, from inside the model's forward
        hook = tiny.model.register_forward_pre_hook(lambda module, args: seen.append(torch.get_num_threads()))
        try:
            run_requests(engine, [GenerationRequest("r0", prompts(1)[0], 4)])
        finally:
            hook.remove()
        assert seen and set(seen) == {1}
        assert engine.settings()["cpu_threads"] == 1
    finally:
        engine.stop()
    assert torch.get_num_threads() == 2  # restored when the engine stops

    def fails(*args, **kwargs):
        raise RuntimeError("no cache for you")

    monkeypatch.setattr(tiny.model, "init_continuous_batching", fails)
    engine = create_engine(tiny, make_spec(transformers={"cpu_threads": 1}))
    with pytest.raises(RuntimeError, match="no cache"):
        engine.start()
    assert torch.get_num_threads() == 2  # and when it fails to start


def test_a_warm_engine_forgets_the_prefixes_an_earlier_run_cached(tiny):
    """transformers keeps finished requests' complete blocks for prefix sharing across sessions: the same seeded
    prompts in the next run would skip their prefill. forget() drops them, and the next request computes its own."""
    from benchd.engines.transformers.paged_cache import cached_prefix_blocks

    engine = create_engine(tiny, make_spec())
    engine.start()
    try:
        cache = engine._manager.batch_processor.cache
        prompt = prompts(1, seed=9, low=48, high=49)[0]  # three complete 16-token blocks
        run_requests(engine, [GenerationRequest("first", prompt, 8)])
        assert cached_prefix_blocks(cache) >= 3
        engine.forget()
        assert cached_prefix_blocks(cache) == 0 and engine.load().kv_blocks_used == 0
        sink = run_requests(engine, [GenerationRequest("again", prompt, 8)])  # still serves, from scratch
        assert sink.ends["again"][1] is None and len(sink.token_ids["again"]) == 8
    finally:
        engine.stop()


def test_the_engine_thread_gives_way_to_a_due_send_once_and_not_past_the_bound():
    handoff = Handoff()
    handoff.expect(time.perf_counter() + 60)
    start = time.perf_counter()
    handoff.give_way()  # not due yet: no wait
    assert time.perf_counter() - start < MAX_WAIT_S and handoff.due != math.inf
    handoff.expect(time.perf_counter() - 1)  # due, never sent: one wait of the bound, then no more for this send
    start = time.perf_counter()
    handoff.give_way()
    assert time.perf_counter() - start >= MAX_WAIT_S and handoff.due == math.inf
    handoff.expect(time.perf_counter())
    sent = threading.Event()
    threading.Thread(target=lambda: (time.sleep(0.0005), handoff.clear(), sent.set())).start()
    handoff.give_way()  # waits for the send
    assert sent.wait(5) and handoff.due == math.inf


def test_an_open_loop_hands_off_around_each_send_and_the_engine_drops_its_hooks(tiny, monkeypatch):
    """The engine's thread passes its hooks during an open-loop run (each layer, each forward pass) with sends
    expected, and the run leaves none due; the stopped engine takes its hooks off the model it shares."""
    calls = []
    give_way = Handoff.give_way
    monkeypatch.setattr(Handoff, "give_way", lambda self, *args: calls.append(self.due) or give_way(self, *args))
    spec = make_spec(workload={"arrivals": {"profile": "poisson", "rate": 40}, "stop": {"requests": 12}})
    outcome = run_local(spec, tiny)
    assert outcome.status == "succeeded"
    layers = next(m for m in tiny.model.modules() if isinstance(m, torch.nn.ModuleList))
    assert len(calls) > 12 * (len(layers) + 2)  # every forward pass: before each layer, before and after the model
    assert any(due != math.inf for due in calls)  # sends were expected while the engine ran
    assert not tiny.model._forward_pre_hooks and not tiny.model._forward_hooks
    assert all(not layer._forward_pre_hooks for layer in layers)


def test_a_send_held_back_by_a_concurrency_cap_does_not_hold_the_engine(tiny, monkeypatch):
    """At a cap, a due send waits for a completion, which needs the engine: the engine's thread must not wait for
    it (once a request, that would cost a saturated engine MAX_WAIT_S a request)."""
    waits = []
    give_way = Handoff.give_way

    def timed(self, *args):
        start = time.perf_counter()
        give_way(self, *args)
        waits.append(time.perf_counter() - start)

    monkeypatch.setattr(Handoff, "give_way", timed)
    spec = make_spec(workload={"arrivals": {"profile": "poisson", "rate": 400, "max_concurrency": 2},
                               "stop": {"requests": 24}})
    outcome = run_local(spec, tiny)
    assert outcome.status == "succeeded" and waits
    assert sum(w >= MAX_WAIT_S for w in waits) <= 2, sorted(waits)[-5:]


def test_no_handoff_where_the_engine_thread_does_not_keep_the_gil_or_the_forward_is_compiled(tiny):
    compiled = TransformersEngine(tiny, TransformersOptions(block_size=16, num_blocks=64, compile_level=1),
                                  make_spec().workload)
    assert compiled.handoff is None  # hooks would break the compiled graph at every layer
    plain = TransformersEngine(tiny, TransformersOptions(block_size=16, num_blocks=64), make_spec().workload)
    assert plain.handoff is not None


def test_a_planned_engine_whose_warm_up_captured_no_graph_does_not_start(tiny):
    """transformers says nothing when the largest step's capture fails at warm-up (out of memory), and the graph pool
    then fragments under load (docs/memory.md): a planned engine checks its warm-up captured that graph. On the CPU no
    graph is ever captured, so the check is run on a started engine's real objects with CUDA graphs marked on."""
    engine = create_engine(tiny, make_spec())
    engine.start()
    try:
        engine.plan = plan_cache(Shape.of(tiny.model.config), 4, 0, 2 << 30, 64, num_blocks=64, block_size=16,
                                 max_batch_tokens=128)
        engine._manager.continuous_batching_config.use_cuda_graph = (True, True)
        with pytest.raises(torch.OutOfMemoryError, match="the warm-up could not capture the largest step"):
            check_warmup(engine._manager, engine.plan, tiny.device)
        engine._manager.batch_processor.inputs_and_outputs.graphs._storage[(128, 1024)] = "captured"
        check_warmup(engine._manager, engine.plan, tiny.device)  # captured: it starts
        engine._manager.batch_processor.inputs_and_outputs.graphs._storage.clear()
    finally:
        engine._manager.continuous_batching_config.use_cuda_graph = (False, False)
        engine.stop()


def test_an_async_engine_whose_warm_up_skipped_its_second_io_pair_has_it_warmed(tiny):
    """transformers 5.17 warms only the first of async batching's two IO pairs when the attention has no decode fast
    path (paged sdpa, torch's varlen kernel), and the second would capture its largest step under load, outside the
    plan; on an H200 the start check called that out of memory with 86 GiB free (docs/memory.md). benchd warms the
    second pair itself, as transformers warms the first: the largest step, then back to the first pair. A second
    pair still unwarmed names the setting; one whose warm-up step was prepared but not captured ran out of memory.
    Async IO pairs need CUDA: the pairs here are transformers' own host/device pairs built on the CPU, their
    buffers filled as a warm-up would; the GPU run checked the real ones (docs/benchmarks.md)."""
    engine = create_engine(tiny, make_spec())
    engine.start()
    processor, config = engine._manager.batch_processor, engine._manager.continuous_batching_config
    sync_io, runner, graphs_before, pairs = processor.inputs_and_outputs, processor.model_runner, \
        config.use_cuda_graph, []
    try:
        engine.plan = plan_cache(Shape.of(tiny.model.config), 4, 0, 2 << 30, 64, io_pairs=2, num_blocks=64,
                                 block_size=16, max_batch_tokens=128)
        config.use_cuda_graph = (True, True)
        pairs += [HostDeviceIOPair(processor.cache, tiny.model.config, config, torch.device("cpu"), tiny.model.dtype,
                                   processor.logit_processor) for _ in range(2)]
        io = SimpleNamespace(io_pairs=pairs, current_pair=0)
        io.swap_io_pairs = lambda: setattr(io, "current_pair", 1 - io.current_pair)
        processor.inputs_and_outputs = io
        graph = SimpleNamespace(reset=lambda: None)
        warmed = []

        def run_one_warmup(model, num_q_tokens, max_kv_read):  # prepares the step on the current pair, captures it
            warmed.append((io.current_pair, num_q_tokens, max_kv_read))
            pairs[io.current_pair].host_io.num_q_tokens = num_q_tokens
            pairs[io.current_pair].device_io.graphs._storage[(num_q_tokens, max_kv_read)] = graph

        processor.model_runner = SimpleNamespace(run_one_warmup=lambda **kwargs: None)
        pairs[0].host_io.num_q_tokens = 128  # the first pair's warm-up step, captured
        pairs[0].device_io.graphs._storage[(128, 1024, 1024)] = graph
        warm_skipped_pair(engine._manager, tiny.model)  # a warm-up that did nothing: the check names the setting
        with pytest.raises(SpecError, match="transformers.use_async_batching: .* never reached the second"):
            check_warmup(engine._manager, engine.plan, tiny.device)
        processor.model_runner = SimpleNamespace(run_one_warmup=run_one_warmup)
        warm_skipped_pair(engine._manager, tiny.model)
        cache = processor.cache
        assert warmed == [(1, cache.max_batch_tokens, cache.num_blocks * cache.block_size - cache.max_batch_tokens)]
        assert io.current_pair == 0
        check_warmup(engine._manager, engine.plan, tiny.device)  # both warmed: it starts
        warm_skipped_pair(engine._manager, tiny.model)
        assert len(warmed) == 1  # nothing left to warm
        pairs[1].device_io.graphs._storage.clear()  # the second pair's step prepared, its capture failed
        with pytest.raises(torch.OutOfMemoryError, match="the warm-up could not capture the largest step"):
            check_warmup(engine._manager, engine.plan, tiny.device)
    finally:
        for pair in pairs:
            pair.device_io.graphs._storage.clear()
        processor.inputs_and_outputs, processor.model_runner = sync_io, runner
        config.use_cuda_graph = graphs_before
        engine.stop()


def test_a_start_refused_after_the_warm_up_lets_go_of_its_cache_and_the_next_run_runs(tiny, monkeypatch):
    """A start refused after the warm-up (the checks above) held the cache and the graphs, and left the model on the
    paged attention transformers had switched it to (5.17 switches plain sdpa; 5.24 runs it as it is): the run fails
    with the cause, and the next one runs."""
    attention, held = tiny.model.config._attn_implementation, []

    def refused(manager):
        processor = manager.batch_processor  # a local of a frame the error passes through, as in the check
        held.append(weakref.ref(processor.cache))
        raise SpecError("transformers.use_async_batching: refused after the warm-up")

    monkeypatch.setattr(warmup, "check_warmup", lambda manager, plan, device: refused(manager))
    engine = create_engine(tiny, make_spec())
    with pytest.raises(SpecError, match="refused after the warm-up"):  # its ExceptionInfo keeps the error alive
        engine.start()
    assert engine._manager is None and tiny.model.config._attn_implementation == attention
    gc.collect()
    assert held[0]() is None  # the cache is gone while the error still lives
    failed = run_local(make_spec(), tiny)
    assert failed.status == "failed" and "refused after the warm-up" in failed.error
    monkeypatch.undo()
    assert run_local(make_spec(), tiny).status == "succeeded"


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
