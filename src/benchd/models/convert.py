"""A real preset's GGUF file converted once to a transformers directory (float32 safetensors, its tokenizer and chat
template), offline: transformers' own GGUF loader dequantizes it (about 70 s on a busy 2-core machine, most of it
parsing the file's metadata in Python); the directory it saves reloads in under a second."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import shutil
import time
from pathlib import Path

from benchd.models.packaged import converted_dir, install_hint, is_converted, source_file
from benchd.models.presets import Weights, real

log = logging.getLogger("benchd.models")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def prepared(name: str) -> Path:
    """The preset's converted directory, converting it first if no process has (a lock beside it: two workers that
    start at once convert it once). Raises FileNotFoundError when the package is missing, ValueError when its file
    is not the one the preset names."""
    weights = real(name)
    if weights is None:
        raise ValueError(f"{name!r} is not a real preset")
    target = converted_dir(name, weights)
    if is_converted(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes, a dead holder's too
        if not is_converted(target):
            _convert(name, weights, target)
    return target


def _convert(name: str, weights: Weights, target: Path) -> None:
    source = source_file(weights)
    if source is None:
        raise FileNotFoundError(f"{name}: the package {weights.requirement} is not installed ({install_hint(weights)})")
    found = sha256_of(source)
    if found != weights.sha256:
        raise ValueError(f"{name}: {source} has sha256 {found}, not the preset's {weights.sha256}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    begun = time.perf_counter()
    log.info("converting %s from %s (once: %s)", name, source, target)
    partial = target.with_name(f"{target.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    options = {"gguf_file": source.name, "local_files_only": True}
    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), **options)
    model = AutoModelForCausalLM.from_pretrained(str(source.parent), dtype=torch.float32, **options)
    # Dequantized on load: what is saved is plain float32, no longer a GGUF-quantized model.
    # an attribute the checker reads through torch's Module.__getattr__ (Tensor | Module): transformers sets None too
    model.hf_quantizer = None  # type: ignore[assignment]
    with contextlib.suppress(AttributeError):
        del model.config.quantization_config
    model.config.name_or_path = name
    # transformers' GGUF tokenizer takes the file's BOS for its EOS too (<|im_start|>): the model's own end of a
    # turn, which generate() and transformers serve stop on, is its generation config's (<|im_end|>).
    eos = model.generation_config.eos_token_id
    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(eos if isinstance(eos, int) else eos[0])
    tokenizer.pad_token = tokenizer.eos_token
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    (partial / "SOURCE").write_text(f"{weights.source}\n{weights.requirement} {weights.file}\nsha256 {found}\n")
    partial.rename(target)
    log.info("converted %s in %.1f s", name, time.perf_counter() - begun)
