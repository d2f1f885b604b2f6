import copy
import json
from pathlib import Path

import pytest
import yaml

from benchd.cli.main import _spec, build_parser
from benchd.spec import (
    Concurrent,
    Gamma,
    Poisson,
    SpecBase,
    SpecError,
    load_spec,
    parse_spec,
    validate_spec,
)
from benchd.spec.matrix import parse_matrix
from tests.helpers import ROOT, own, whole

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_examples_load(path):
    data = yaml.safe_load(path.read_text())
    if "matrix" in data:  # a matrix document: every variant is a spec
        assert all(isinstance(v.spec, SpecBase) for v in parse_matrix(data).variants())
    else:
        assert isinstance(load_spec(path), SpecBase)


def test_defaults_are_a_runnable_spec():
    spec = parse_spec({})
    assert spec.model == "tiny" and spec.engine == "transformers"
    assert spec.workload.stop.requests == 16


def test_json_and_yaml_load_the_same(tmp_path):
    data = {"model": "small", "workload": {"arrivals": {"profile": "poisson", "rate": 2.5}, "stop": {"requests": 3}}}
    (tmp_path / "a.json").write_text(json.dumps(data))
    (tmp_path / "a.yaml").write_text("model: small\nworkload:\n  arrivals: {profile: poisson, rate: 2.5}\n"
                                     "  stop: {requests: 3}\n")
    assert load_spec(tmp_path / "a.json") == load_spec(tmp_path / "a.yaml")
    assert load_spec(tmp_path / "a.json").workload.arrivals == Poisson(profile="poisson", rate=2.5)


def test_sweep_expands_into_stages():
    spec = parse_spec({"workload": {"arrivals": {"profile": "sweep", "over": "concurrent", "values": [1, 8]}}})
    assert spec.workload.stages() == [Concurrent(profile="concurrent", concurrency=1),
                                      Concurrent(profile="concurrent", concurrency=8)]
    gamma = parse_spec({"workload": {"arrivals": {"profile": "sweep", "over": "gamma", "values": [2],
                                                  "burstiness": 0.5}}})
    assert gamma.workload.stages() == [Gamma(profile="gamma", rate=2, burstiness=0.5)]


def message(data) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    return str(info.value)


@pytest.mark.parametrize(
    ("data", "field", "reason"),
    [
        ({"workload": {"arrivals": {"profile": "poisson", "rate": 0}}}, "workload.arrivals.poisson.rate",
         "greater than 0"),
        ({"workload": {"arrivals": {"profile": "gamma", "rate": 1, "burstiness": -1}}},
         "workload.arrivals.gamma.burstiness", "greater than or equal to 0.001"),
        ({"workload": {"arrivals": {"profile": "bursty"}}}, "workload.arrivals",
         "does not match any of the expected tags"),
        ({"workload": {"arrivals": {"profile": "concurrent"}}}, "workload.arrivals.concurrent.concurrency",
         "Field required"),
        ({"workload": {"arrivals": {"profile": "sweep", "over": "concurrent", "values": [1.5]}}},
         "workload.arrivals.sweep", "whole numbers"),
        ({"workload": {"arrivals": {"profile": "sweep", "over": "poisson", "values": []}}},
         "workload.arrivals.sweep.values", "at least 1 item"),
        ({"workload": {"stop": {}}}, "workload.stop", "a run must end"),
        ({"workload": {"stop": {"requests": 0}}}, "workload.stop.requests", "greater than or equal to 1"),
        ({"workload": {"warmup": {"requests": 2, "seconds": 1}}}, "workload.warmup", "not both"),
        ({"workload": {"prompt_tokens": {"dist": "uniform", "min": 10, "max": 5}}},
         "workload.prompt_tokens.uniform", "max (5) must be >= min (10)"),
        ({"workload": {"output_tokens": {"dist": "normal", "mean": 100, "std": 5, "max": 50}}},
         "workload.output_tokens.normal", "mean (100.0) must lie within"),
        ({"workload": {"output_tokens": {"dist": "list", "values": [4, 0]}}},
         "workload.output_tokens.list.values.1", "greater than or equal to 1"),
        ({"workload": {"slo": {}}}, "workload.slo", "set at least one objective"),
        ({"workload": {"bogus": 1}}, "workload.bogus", "Extra inputs are not permitted"),
        ({"engine": "vllm"}, "engine", "'transformers', 'openai' or 'static'"),
        ({"dtype": "int3"}, "dtype", "Input should be"),
        ({"device": "tpu"}, "device", "should match pattern"),
        ({"name": "has spaces"}, "name", "should match pattern"),
        ({"transformers": {"block_size": 2}}, "transformers.block_size", "greater than or equal to 4"),
        # What a careless or hostile client sends: never accepted to fail later.
        ({"workload": {"stop": {"duration_s": float("nan")}}}, "workload.stop.duration_s", "finite number"),
        ({"workload": {"output_tokens": {"dist": "normal", "mean": 4, "std": float("inf"), "max": 8}}},
         "workload.output_tokens.normal.std", "finite number"),
        ({"workload": {"stop": {"requests": True}}}, "workload.stop.requests", "valid integer"),
        ({"workload": {"prompt_tokens": {"value": 1}}}, "workload.prompt_tokens", "Unable to extract tag"),
        ({"label": "x" * 201}, "label", "at most 200 characters"),
        ({"seed": 2**64}, "seed", "less than or equal to"),
        ({"workload": {"arrivals": {"profile": "gamma", "rate": 1, "burstiness": 1e-300}}},
         "workload.arrivals.gamma.burstiness", "greater than or equal to 0.001"),
        ({"transformers": {"cpu_threads": 0}}, "transformers.cpu_threads", "greater than or equal to 1"),
        ({"static": {"batch_size": 0}}, "static.batch_size", "greater than or equal to 1"),
    ],
)
def test_invalid_fields_are_named_with_the_reason(data, field, reason):
    text = message(data)
    line = next((line for line in text.splitlines() if line.startswith(field + ":")), None)
    assert line is not None, text
    assert reason in line, text


def test_every_bad_field_is_reported_at_once():
    text = message({"seed": -1, "workload": {"stop": {"requests": 0}}})
    assert text.splitlines()[0].startswith("seed:")
    assert any(line.startswith("workload.stop.requests:") for line in text.splitlines())


def test_not_a_mapping():
    assert "expected a mapping" in message([1, 2])


def test_file_errors(tmp_path):
    with pytest.raises(SpecError, match="No such file"):
        load_spec(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("workload: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML or JSON"):
        load_spec(bad)


@pytest.mark.parametrize("fields, where", [
    ({"engine": "static", "attn_implementation": "paged|eager"}, "attn_implementation: paged|eager is for continuous"),
    ({"compile": "reduce-overhead"}, "compile: applies to the static engine (torch.compile of generate()'s "
                                     "forward), not the transformers engine"),
    ({"kind": "kernel", "kernel": {"op": "matmul", "shapes": [{"m": 8, "n": 8, "k": 8}]},
      "quantization": "int8_weight_only"}, "quantization: applies to models benchd loads for generation"),
    ({"engine": "openai", "openai": {"tokenizer": "/x"}, "attn_implementation": "eager"},
     "attn_implementation: applies to models benchd loads for generation, not a served model"),
    ({"quantization": "int2"}, "quantization: Input should be"),
])
def test_stack_choices_that_contradict_the_spec_name_the_field(fields, where):
    with pytest.raises(SpecError) as raised:
        parse_spec(fields)
    assert where in str(raised.value)


def test_the_stack_defaults_change_nothing():
    spec = parse_spec({})
    assert (spec.quantization, spec.attn_implementation, spec.compile) == ("none", None, "off")
    assert parse_spec({"engine": "static", "compile": "max-autotune", "attn_implementation": "eager"}).compile == \
        "max-autotune"


# ---- a union on the kind: each spec holds its own sections -------------------------------------------------


def test_a_spec_holds_only_what_its_kind_and_engine_use():
    """Another engine's or kind's section is checked as that one would check it, and left out."""
    static = parse_spec({"engine": "static", "static": {"batch_size": 2}, "transformers": {"num_blocks": 64},
                         "train_step": {"steps": 3}, "kernel": None})
    assert static.static.batch_size == 2 and not hasattr(static, "transformers")
    assert set(static.model_dump()) - set(parse_spec({}).model_dump()) == {"static"}
    kernel = parse_spec({"kind": "kernel", "engine": "static", "workload": {"stop": {"requests": 2}},
                         "kernel": {"op": "matmul", "shapes": [{"m": 8, "n": 8, "k": 8}]}})
    assert "workload" not in kernel.model_dump() and "engine" not in kernel.model_dump()
    text = message({"kind": "train_step", "workload": {"stop": {}}, "openai": {"api": "soap"}})
    assert "workload.stop: set requests, duration_s or both" in text and "openai.api: Input should be" in text
    assert message({"kind": "train"}).startswith("kind: Input should be 'generate', 'train_step' or 'kernel'")


# Specs 14d1cbb (before the union) accepted: every document its RunSpec validated while its tests ran, the examples
# and the command line's, with what each resolved to there (tests/data/write_specs.py says how they were made).
ACCEPTED = json.loads((ROOT / "tests" / "data" / "specs-14d1cbb.json").read_text())


def resolved_then(item: dict) -> dict:
    """What the spec's dump was at 14d1cbb: the dump of an empty spec with the item's changes."""
    dump = copy.deepcopy(ACCEPTED["default"])
    for path, value in item["resolved"]:
        node = dump
        for key in path[:-1]:
            node = node[key]
        if path:
            node[path[-1]] = value
        else:
            dump = value
    return dump


def test_every_spec_accepted_before_the_union_means_the_same():
    """Each spec is accepted still, with the values it resolved to, less the sections its kind and engine never
    used; and its set fields (a schedule's stored spec, what the command line sends a daemon) likewise."""
    specs = ACCEPTED["specs"]
    assert len(specs) > 500
    runners, differ = set(), []
    for item in specs:
        then = resolved_then(item)
        document = then if item["spec"] == "resolved" else item["spec"]
        spec = validate_spec(document)
        runners.add(spec.runner)
        if (spec.model_dump(mode="json") != whole(then, document)
                or spec.model_dump(mode="json", exclude_unset=True) != own(document)):
            differ.append(item["source"])
    assert differ == [], f"{len(differ)} of {len(specs)} differ"
    assert runners == {"transformers", "static", "openai", "train_step", "kernel"}


@pytest.mark.parametrize("command", ACCEPTED["commands"], ids=lambda command: " ".join(command["argv"]) or "quick")
def test_the_command_line_resolves_what_it_did(command):
    argv = [str(ROOT / arg) if arg.startswith("examples/") else arg for arg in command["argv"]]
    assert _spec(build_parser().parse_args(["run", *argv])).model_dump(mode="json") == whole(command["resolved"])
