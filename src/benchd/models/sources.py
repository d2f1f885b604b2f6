"""Where a model comes from: a preset, a local directory, or a Hugging Face hub id (org/name), cached or on the hub;
checked before anything loads, so that a name that is none of them is refused at once with the closest names known
(a typo once waited 52 s for the hub's lookups to give up)."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable
from pathlib import Path

from benchd.models.packaged import weights_problem
from benchd.models.presets import PRESETS
from benchd.spec import GenerateSpec, RunSpec, TrainStepSpec

HUB_ID = re.compile(r"[\w.-]{1,96}/[\w.-]{1,96}")  # the hub's org/name (its legacy names without org: when cached)
HUB_TIMEOUT_S = 5.0  # the one question asked of the hub about a model not in the cache


def loads_model(spec: RunSpec) -> bool:
    """Whether the run loads its model (a served model is the server's; a kernel run has none)."""
    return isinstance(spec, TrainStepSpec) or (isinstance(spec, GenerateSpec) and spec.engine_record.loads_model)


def closest(name: str, known: Iterable[str]) -> str:
    """"; did you mean 'tiny'?" for the known names nearest to name, or nothing."""
    found = difflib.get_close_matches(name, sorted(set(known)), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(map(repr, found))}?" if found else ""


def source_problem(ref: str) -> str | None:
    """Why ref names no model to be had here (None: a preset, a real one's weights installed or converted, a
    directory with config.json, a hub id in the cache, or one the hub knows)."""
    if ref in PRESETS:
        return weights_problem(ref)
    path = Path(ref).expanduser()
    if path.is_dir():
        return None if (path / "config.json").is_file() else (
            f"{ref!r} is a directory with no config.json (a transformers model's directory holds config.json and its "
            "weights)")
    if ref.startswith(("/", ".", "~")) or ref.endswith("/"):
        return f"{ref!r}: no such directory"
    cached = _cached()
    if ref in cached:
        return None
    known = [*PRESETS, *cached]
    if not HUB_ID.fullmatch(ref):
        return (f"{ref!r} is neither a preset ({', '.join(PRESETS)}), a local directory, nor a hub id (org/name)"
                + closest(ref, known))
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return (f"{ref!r} is not in the Hugging Face cache, and the hub is offline (HF_HUB_OFFLINE)"
                + closest(ref, known))
    return _asked(ref, constants.ENDPOINT, known)


def _cached() -> list[str]:
    """The models in the Hugging Face cache (HF_HOME, HF_HUB_CACHE), by hub id."""
    from huggingface_hub import constants

    try:
        entries = os.listdir(constants.HF_HUB_CACHE)
    except OSError:
        return []
    return [entry.removeprefix("models--").replace("--", "/") for entry in entries if entry.startswith("models--")]


def _asked(ref: str, endpoint: str, known: list[str]) -> str | None:
    """What the hub says of ref: nothing when it knows it (the loader downloads it), else why not."""
    import httpx

    token = os.environ.get("HF_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.get(f"{endpoint.rstrip('/')}/api/models/{ref}", headers=headers, timeout=HUB_TIMEOUT_S)
    except httpx.HTTPError as error:
        reason = str(error).split("] ")[-1] or type(error).__name__  # "[Errno -2] Name or service not known"
        return (f"{ref!r} is not in the Hugging Face cache, and the hub at {endpoint} did not answer in "
                f"{HUB_TIMEOUT_S:g} s ({reason})" + closest(ref, known))
    if response.status_code in (401, 404):  # the hub answers 401 for a repository that does not exist, too
        private = "" if token else ", or a private one (set HF_TOKEN)"
        return f"{ref!r}: no such model on the hub{private}" + closest(ref, known)
    return None
