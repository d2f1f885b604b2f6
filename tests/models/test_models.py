import pytest
import torch
from transformers import AutoModelForCausalLM

from benchd.models.loading import PRESETS, load_model, parameter_count, preset_config, resolve_dtype


def meta_model(name):
    with torch.device("meta"):  # shapes only: no memory, no time
        return AutoModelForCausalLM.from_config(preset_config(name))


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("2.7B", 3_406_809_600),  # the classic table's 2.7B size (CS336): 12.69 GiB of fp32 weights
        ("llama-3.2-1b", 1_235_814_400),
        ("llama-3.1-8b", 8_030_261_248),
    ],
)
def test_preset_parameter_counts(name, params):
    assert parameter_count(meta_model(name)) == params


@pytest.mark.parametrize(
    ("name", "hidden", "ffn", "layers", "heads"),
    [("small", 768, 3072, 12, 12), ("medium", 1024, 4096, 24, 16), ("large", 1280, 5120, 36, 20),
     ("xl", 1600, 6400, 48, 25), ("2.7B", 2560, 10240, 32, 32)],
)
def test_classic_sizes(name, hidden, ffn, layers, heads):
    config = preset_config(name)
    assert (config.hidden_size, config.intermediate_size, config.num_hidden_layers,
            config.num_attention_heads, config.vocab_size) == (hidden, ffn, layers, heads, 10_000)


def test_every_preset_builds():
    for name in PRESETS:
        assert parameter_count(meta_model(name)) > 0


def test_presets_are_random_but_seeded(tiny):
    again = load_model("tiny", dtype="float32", device="cpu", seed=0)
    other = load_model("tiny", dtype="float32", device="cpu", seed=1)
    first = dict(tiny.model.named_parameters())
    assert all(torch.equal(p, first[n]) for n, p in again.model.named_parameters())
    assert not all(torch.equal(p, first[n]) for n, p in other.model.named_parameters())
    assert tiny.load_s > 0 and tiny.device.type == "cpu" and tiny.dtype == torch.float32


def test_local_directory_loads_with_from_pretrained(tiny, tiny_dir):
    loaded = load_model(str(tiny_dir), dtype="float32", device="cpu")
    saved = dict(tiny.model.named_parameters())
    assert all(torch.equal(p, saved[n]) for n, p in loaded.model.named_parameters())
    assert loaded.vocab_size == tiny.vocab_size == 512
    assert loaded.special_ids == frozenset({0, 1, 2})


def test_missing_path_fails_clearly(tmp_path):
    with pytest.raises(OSError):
        load_model(str(tmp_path / "nothing-here"), device="cpu")


def test_auto_dtype():
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("float16", torch.device("cpu")) == torch.float16
