"""BENCHD_MODEL_ROOTS: the directories whose models, tokenizers, traces and datasets a spec from HTTP may name. The
daemon checks each path at admission (by its text first, then where it leads), and names each to the worker, which
checks it again on what it opens as it loads (models/confinement.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from benchd.models.presets import PRESETS
from benchd.models.sources import closest, loads_model
from benchd.spec import GenerateSpec, RunSpec

OUTSIDE = "not under BENCHD_MODEL_ROOTS"


def path_problem(ref: str, roots: list[Path]) -> str | None:
    """A file or directory a spec names: under a root by its text, and where it leads (its real path)."""
    if not roots or not os.path.isabs(ref):
        return f"{ref!r} is {OUTSIDE}" + ("" if roots else " (no roots are configured)")
    path = Path(os.path.normpath(ref))
    real = Path(os.path.realpath(path))
    if not any(path.is_relative_to(root) and real.is_relative_to(Path(os.path.realpath(root))) for root in roots):
        return f"{ref!r} is {OUTSIDE}"
    return None


def model_problem(ref: str, roots: list[Path]) -> str | None:
    """A non-preset model must be a directory under an allowed root, judged on the text of the path first so
    that nothing outside the roots is ever looked at."""
    allowed = "neither a preset nor a directory under BENCHD_MODEL_ROOTS"
    if not roots or not os.path.isabs(ref):
        return f"{ref!r} is {allowed}" + ("" if roots else " (no roots are configured)") + closest(ref, PRESETS)
    path = Path(os.path.normpath(ref))
    if not any(path.is_relative_to(root) for root in roots):
        return f"{ref!r} is {allowed}"
    real = Path(os.path.realpath(path))  # a link inside a root must not lead outside it
    if not any(real.is_relative_to(Path(os.path.realpath(root))) for root in roots):
        return f"{ref!r} leads outside BENCHD_MODEL_ROOTS"
    if not (real / "config.json").is_file():
        return f"{ref!r} has no config.json"
    return None


def confined(spec: RunSpec, daemon_model: str, roots: list[Path]) -> dict[str, Any] | None:
    """What the worker re-checks for a run admitted from HTTP (models/confinement.py): the roots, and each field whose
    path admission checked against them (admission/reach.py), by its dotted name; None when it names no such path. The
    daemon's own model is the operator's choice."""
    paths: dict[str, str] = {}
    if loads_model(spec) and spec.model not in PRESETS and spec.model != daemon_model:
        paths["model"] = spec.model
    if isinstance(spec, GenerateSpec):
        paths.update(spec.paths())
    return {"roots": [str(root) for root in roots], "paths": paths} if paths else None
