"""What a generation run's requests are made for, as its engine's record says (src/benchd/worker/subjects.py): a
model loaded in the worker, or one a server holds, each saying what the run's metadata records of it."""

from types import SimpleNamespace

import pytest

from benchd.models.texts import resolved
from benchd.spec import SpecError
from benchd.worker.provenance import collect
from benchd.worker.subjects import Loaded, Served
from tests.helpers import make_spec

NO_ATTENTION = SimpleNamespace(attention=None)


def test_a_served_model_holds_nothing_of_the_worker_and_is_named_by_its_server(served_dir):
    spec = resolved(make_spec(engine="openai", openai={"base_url": "http://127.0.0.1:9/v1",
                                                       "tokenizer": str(served_dir)}))
    assert not spec.engine_record.loads_model
    subject = Served(spec)
    assert subject.device is None and subject.loaded is None and subject.load_s is None
    first = subject.streams()()
    assert first.prompt_text and first.prompt_ids == []  # text: the server tokenizes it
    metadata = collect(subject.device, spec.model, spec.label, subject.load_s)
    subject.describe(metadata, spec, NO_ATTENTION)
    assert metadata.device_name == "http://127.0.0.1:9/v1" and metadata.model_cost is None


def test_a_loaded_model_makes_token_prompts_and_records_its_stack_and_each_ranks_cost(tiny):
    spec = resolved(make_spec())
    assert spec.engine_record.loads_model
    alone = Loaded(spec, tiny, 0.5, 1, lambda device_type: {"device": device_type})
    assert alone.loaded is tiny and alone.device == tiny.device and alone.load_s == 0.5
    first = alone.streams()()
    assert first.prompt_text is None and first.prompt_ids
    assert all(0 <= token < tiny.vocab_size for token in first.prompt_ids)
    metadata = collect(alone.device, spec.model, spec.label, alone.load_s)
    alone.describe(metadata, spec, NO_ATTENTION)
    assert metadata.device_limits == {"device": "cpu"} and metadata.model_cost["dtype"] == "float32"
    assert metadata.torch_threads is not None and metadata.attention_kernel is None
    halves = Loaded(spec, tiny, 0.5, 2, lambda device_type: None).cost()
    assert halves["weight_bytes"] == metadata.model_cost["weight_bytes"] // 2


def test_a_loaded_model_refuses_requests_beyond_its_positions(tiny):
    long = resolved(make_spec(workload={"prompt_tokens": {"dist": "fixed", "value": 4090},
                                        "output_tokens": {"dist": "fixed", "value": 8}}))
    with pytest.raises(SpecError, match="positions"):
        Loaded(long, tiny, None, 1, lambda device_type: None)
