"""Every engine found (spec/engines.py: benchd's folders and the installed ones) run through the daemon's lifecycle on
a tiny workload and checked against the contracts of engines/base.py (engines/contracts.py): an engine is tested by
being installed. An engine that loads the model runs the tiny preset on the CPU; a server's engine runs against
tests/openai_server.py, its spec pointed there by SERVED. Then an engine that breaks two contracts fails the check."""

import json

import pytest

from benchd.daemon.inprocess import run_local as run
from benchd.engines.contracts import ContractBroken, check_contracts
from benchd.spec import parse_spec
from benchd.spec.engines import engines
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.timeout(300)

# How a server's engine reaches the tests' OpenAI-compatible server: its spec's sections, from the server's base URL.
SERVED = {"openai": lambda base_url: {"openai": {"base_url": base_url}}}


@pytest.fixture(scope="module")
def server():
    with OpenAIServer(delay_s=0.002) as s:
        yield s


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"prompt {i}"}) + "\n" for i in range(4)))
    return str(path)


def contract_spec(name, request):
    """A tiny workload on the engine: 4 requests of 5 tokens, 2 at a time, EOS ignored; on the tiny preset where
    the engine loads the model, else against the tests' server with prompts of a dataset (no tokenizer to load)."""
    workload = {"arrivals": {"profile": "concurrent", "concurrency": 2}, "stop": {"requests": 4},
                "output_tokens": {"dist": "fixed", "value": 5}, "ignore_eos": True}
    data = {"name": "contracts", "engine": name, "model": "tiny", "device": "cpu", "dtype": "float32",
            "workload": workload}
    if engines()[name].loads_model:
        workload["prompt_tokens"] = {"dist": "fixed", "value": 8}
        return parse_spec(data)
    if name not in SERVED:
        pytest.fail(f"engine {name!r} talks to a server: SERVED (tests/engines/test_contracts.py) says how its spec "
                    "reaches tests/openai_server.py")
    workload["dataset"] = {"format": "jsonl", "path": request.getfixturevalue("prompts")}
    data["model"] = "ok"  # the server's behaviour: one token a chunk, as many as asked
    return parse_spec({**data, **SERVED[name](request.getfixturevalue("server").base_url)})


def run_and_check(name, request):
    spec = contract_spec(name, request)
    outcome = run(spec, loaded=request.getfixturevalue("tiny") if spec.engine_record.loads_model else None)
    assert outcome.status == "succeeded", outcome.error
    for stage in outcome.stages:
        assert len(stage.records) >= 4
        check_contracts(spec.engine_record, stage.records, stage.steps, exact_output=True)


@pytest.mark.engine
@pytest.mark.parametrize("name", list(engines()))
def test_every_engine_keeps_the_contracts(name, request):
    run_and_check(name, request)


class Breaking:
    """transformers' engine behind a sink that ends each request 1 ms after its last token, counting no steps."""

    def __init__(self, engine):
        self.engine, self.steps = engine, None

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def submit(self, request, sink):
        self.engine.submit(request, Late(sink))


class Late:
    def __init__(self, sink):
        self.sink = sink

    def __getattr__(self, name):
        return getattr(self.sink, name)

    def finished(self, request_id, t, error=None):
        self.sink.finished(request_id, t + 0.001, error)


def breaking(loaded, spec):
    from benchd.engines.transformers.engine import create

    return Breaking(create(loaded, spec))


@pytest.mark.engine
def test_an_engine_that_breaks_a_contract_fails_the_check(monkeypatch, request):
    """Registered among the engines found in transformers' place: each request ends after its last token, and no
    step is counted; the contract test's own check names both."""
    record = engines()["transformers"]
    monkeypatch.setitem(engines(), "transformers", type(record)(**{
        **{field: getattr(record, field) for field in record.__dataclass_fields__},
        "create": f"{__name__}:breaking"}))
    with pytest.raises(ContractBroken) as broken:
        run_and_check("transformers", request)
    assert "not at its last token's stamp" in str(broken.value)
    assert "no forward steps counted" in str(broken.value)


def kept():
    from benchd.measure.records import RequestRecord

    return RequestRecord(index=0, request_id="r0", warmup=False, prompt_tokens=8, max_new_tokens=3, scheduled_s=1.0,
                         submitted_s=1.0, admitted_s=1.1, arrival_s=[1.2, 1.3, 1.4], arrival_tokens=[1, 1, 1],
                         token_ids=[5, 6, 7], finished_s=1.4)


@pytest.mark.parametrize(("change", "breach"), [
    ({"finished_s": None}, "never ended"),
    ({"arrival_s": [1.2, 1.35, 1.3], "finished_s": 1.3}, "go back in time"),
    ({"admitted_s": 0.9}, "admitted at 0.9 before submitted"),
    ({"admitted_s": 1.25}, "first token at 1.2 before admitted"),
    ({"finished_s": 1.5}, "not at its last token's stamp 1.4"),
    ({"finished_s": 1.35}, "finished at 1.35 before last token"),
    ({"token_ids": [5, 6]}, "3 tokens in 3 stamps with 2 ids"),
    ({"arrival_s": [1.2, 1.4], "arrival_tokens": [1, 2]}, "3 tokens in 2 stamps"),
    ({"max_new_tokens": 4}, "3 tokens of 4 asked with EOS ignored"),
])
def test_each_contract_broken_in_a_record_is_named(change, breach):
    """Each check of engines/contracts.py on a record that keeps every contract but one (a model-loading engine that
    stamps its tokens and counted its steps)."""
    from dataclasses import replace

    from benchd.measure.roofline import StepLog

    record, steps = engines()["transformers"], StepLog([(8, 0, 0, 36, 1), (0, 1, 8, 9, 1), (0, 1, 9, 10, 1)])
    check_contracts(record, [kept()], steps, exact_output=True)
    with pytest.raises(ContractBroken, match=breach.replace(".", r"\.")):
        check_contracts(record, [replace(kept(), **change)], steps, exact_output=True)


def test_a_stream_read_ends_no_earlier_than_its_last_token():
    """A server's engine stamps reads: its end ([DONE]) may come in a later read than its last token, never before,
    and its tokens carry no ids; it counts no steps (the server's)."""
    from dataclasses import replace

    record = engines()["openai"]
    stream = replace(kept(), token_ids=[], arrival_s=[1.2, 1.3], arrival_tokens=[2, 1], finished_s=1.45)
    check_contracts(record, [stream], None, exact_output=True)
    with pytest.raises(ContractBroken, match="finished at 1.25 before last token"):
        check_contracts(record, [replace(stream, finished_s=1.25)], None, exact_output=True)


@pytest.mark.parametrize(("steps", "breach"), [
    (None, "no forward steps counted for 3 tokens"),
    ([(8, 0, 0, 36, 1), (0, 1, 8, 9, 1)], "3 tokens out of 2 sampled"),
    ([(8, 0, 0, 36, 1), (0, 1, 8, 9, 1), (0, 0, 0, 0, 1)], "a step counted with no token in it"),
])
def test_an_engine_that_loads_the_model_counts_its_steps(steps, breach):
    from benchd.measure.roofline import StepLog

    with pytest.raises(ContractBroken, match=breach):
        check_contracts(engines()["static"], [kept()], None if steps is None else StepLog(steps), exact_output=True)
