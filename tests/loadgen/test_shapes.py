"""Load shapes: a linear ramp, trace replay (benchd's JSONL and Mooncake's), a concurrency cap on an open loop,
shared prefixes and multi-turn conversations; pure functions first, then runs against the controlled server."""

import itertools
import json

import pytest

from benchd.daemon.inprocess import run_local as run
from benchd.loadgen import arrivals
from benchd.loadgen.contents import contents
from benchd.spec import SpecError, parse_spec
from tests.openai_server import OpenAIServer


def workload(**kw):
    base = {"prompt_tokens": {"dist": "fixed", "value": 8}, "output_tokens": {"dist": "fixed", "value": 4},
            "stop": {"requests": 8}}
    return parse_spec({"workload": {**base, **kw}}).workload


def test_a_constant_ramp_follows_the_integrated_rate():
    ramp = parse_spec({"workload": {"arrivals": {"profile": "ramp", "start_rate": 0, "rate": 10,
                                                 "ramp_s": 10}}}).workload.arrivals
    times = list(itertools.islice(arrivals.offsets(ramp, 0), 200))
    # Λ(10) = (0 + 10) · 10 / 2 = 50 requests during the ramp, then one every 0.1 s.
    assert sum(t < 10 for t in times) == 50
    assert times[60] - times[59] == pytest.approx(0.1)
    assert times[1] == pytest.approx(2 ** 0.5)  # Λ(t) = t²/2 = 1
    poisson = ramp.model_copy(update={"arrival": "poisson"})
    counts = [sum(t < 10 for t in itertools.islice(arrivals.offsets(poisson, seed), 400)) for seed in range(40)]
    assert sum(counts) / len(counts) == pytest.approx(50, rel=0.1)


def write(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def test_a_jsonl_trace_sets_offsets_and_lengths(tmp_path):
    path = write(tmp_path / "t.jsonl", [{"offset_s": 2.0, "prompt_tokens": 5, "output_tokens": 3},
                                        {"offset_s": 2.5, "prompt_tokens": 7, "output_tokens": 1},
                                        {"offset_s": 4.0, "prompt_tokens": 9, "output_tokens": 2}])
    w = workload(arrivals={"profile": "trace", "path": path, "speedup": 2})
    assert list(arrivals.offsets(w.arrivals, 0)) == [0.0, 0.25, 1.0]
    made = list(contents(w, 0, 512))
    assert [(len(c.prompt_ids), c.max_new_tokens) for c in made] == [(5, 3), (7, 1), (9, 2)]


@pytest.mark.parametrize(("line", "message"), [
    ("{", "line 1 is not JSON"),
    ('{"offset_s": 0, "prompt_tokens": 0, "output_tokens": 1}', "prompt_tokens must be a whole number of tokens"),
    ('{"offset_s": -1, "prompt_tokens": 1, "output_tokens": 1}', "offset_s must be a number ≥ 0"),
])
def test_a_bad_trace_line_is_named(tmp_path, line, message):
    (tmp_path / "bad.jsonl").write_text(line + "\n")
    w = workload(arrivals={"profile": "trace", "path": str(tmp_path / "bad.jsonl")})
    with pytest.raises(SpecError, match=f"workload.arrivals.path: .*{message}"):
        list(arrivals.offsets(w.arrivals, 0))


def test_a_mooncake_trace_shares_blocks_by_hash_id(tmp_path):
    path = write(tmp_path / "m.jsonl", [
        {"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1, 2, 3]},
        {"timestamp": 500, "input_length": 9, "output_length": 1, "hash_ids": [1, 2, 7]},
        {"timestamp": 1500, "input_length": 6, "output_length": 1, "hash_ids": [9, 2]}])
    w = workload(arrivals={"profile": "trace", "format": "mooncake", "path": path, "block_tokens": 4})
    assert list(arrivals.offsets(w.arrivals, 0)) == [0.0, 0.5, 1.5]
    a, b, c = (x.prompt_ids for x in contents(w, 0, 512))
    assert (len(a), len(b), len(c)) == (10, 9, 6)
    assert a[:8] == b[:8] and a[8:] != b[8:9]  # blocks 1 and 2 shared, block 3 and 7 differ
    assert c[4:6] == a[4:6] and c[:4] != a[:4]  # block 2 again, after another block


def test_a_shared_prefix_is_the_same_within_a_group_and_differs_between_groups():
    w = workload(prefix={"fraction": 0.5, "groups": 2})
    made = [c.prompt_ids for c in itertools.islice(contents(w, 0, 512), 4)]
    assert made[0][:4] == made[2][:4] and made[1][:4] == made[3][:4] and made[0][:4] != made[1][:4]
    assert made[0][4:] != made[2][4:]  # the rest is fresh


def test_each_turn_of_a_conversation_holds_the_earlier_turns():
    w = workload(conversation={"turns": 3, "conversations": 2})
    made = [c.prompt_ids for c in itertools.islice(contents(w, 0, 512), 6)]
    # Requests 0, 2, 4 are turns 1–3 of conversation 0: prompt 8, then + answer 4 + prompt 8 each turn.
    assert [len(p) for p in made] == [8, 8, 20, 20, 32, 32]
    assert made[2][:8] == made[0] and made[4][:20] == made[2] and made[3][:8] == made[1]
    assert w.max_prompt_tokens() == 32


def test_shapes_that_do_not_fit_together_are_refused(tmp_path):
    path = write(tmp_path / "t.jsonl", [{"offset_s": 0, "prompt_tokens": 5, "output_tokens": 3}])
    with pytest.raises(SpecError, match="conversation: a trace gives each request's lengths itself"):
        workload(arrivals={"profile": "trace", "path": path}, conversation={"turns": 2})
    with pytest.raises(SpecError, match="max_concurrency: caps open-loop levels"):
        workload(arrivals={"profile": "sweep", "over": "concurrent", "values": [1], "max_concurrency": 2})


def in_flight_peak(records):
    events = sorted([(r.submitted_s, 1) for r in records] + [(r.finished_s, -1) for r in records])
    peak = now = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


@pytest.mark.timeout(120)
def test_a_capped_open_loop_never_holds_more_than_its_cap_and_a_trace_replays_against_a_server(served_dir, tmp_path):
    path = write(tmp_path / "t.jsonl", [{"offset_s": i * 0.05, "prompt_tokens": 6 + i % 3, "output_tokens": 2 + i % 2}
                                        for i in range(20)])
    base = {"name": "shapes", "engine": "openai", "model": "ok",
            "openai": {"base_url": "", "tokenizer": str(served_dir)}}
    with OpenAIServer(delay_s=0.02) as server:
        base["openai"]["base_url"] = server.base_url
        capped = run(parse_spec({**base, "workload": {
            "arrivals": {"profile": "constant", "rate": 100, "max_concurrency": 2}, "stop": {"requests": 20},
            "prompt_tokens": {"dist": "fixed", "value": 8}, "output_tokens": {"dist": "fixed", "value": 4}}}))
        server.bodies.clear()
        replayed = run(parse_spec({**base, "workload": {"arrivals": {"profile": "trace", "path": path},
                                                         "stop": {"duration_s": 30}}}))
        sent = list(server.bodies)
    assert capped.status == "succeeded", capped.error
    records = capped.stages[0].records
    assert len(records) == 20 and all(r.ok for r in records)
    assert in_flight_peak(records) == 2
    (s,) = capped.summaries()
    assert s.stage == "constant@100/s≤2" and "dispatch_lag" in [i.check for i in s.invalid]  # the cap held them
    assert replayed.status == "succeeded", replayed.error
    records = sorted(replayed.stages[0].records, key=lambda r: r.index)
    assert len(records) == 20 and all(r.ok for r in records)
    assert [r.max_new_tokens for r in records] == [2 + i % 2 for i in range(20)]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(served_dir)
    prompts = sorted(len(tokenizer.encode(b.get("prompt") or b["messages"][-1]["content"], add_special_tokens=False))
                     for b in sent)
    assert prompts == sorted(6 + i % 3 for i in range(20))  # each prompt made to its line's length
    start = records[0].scheduled_s
    assert [r.scheduled_s - start for r in records] == pytest.approx([i * 0.05 for i in range(20)], abs=1e-6)
