"""A run's confined paths in the worker, as it loads: each path admission found under BENCHD_MODEL_ROOTS
(models/roots.py) opened once and checked on what was opened, so that a path that led inside the roots at admission
and leads outside by the time the run loads (a directory swapped for a link) fails the run with that cause, and
nothing outside is read."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchd.models.roots import OUTSIDE
from benchd.spec import SpecError


class PathChanged(SpecError):
    """A path that admission found under the roots does not lead there now."""


@dataclass(slots=True)
class Opened:
    """A path opened once and checked on what was opened: its file descriptor (O_PATH: nothing read through it yet)
    and where it really is. Everything the run reads goes through `path`, the descriptor's own name, so a link
    swapped in after the check changes nothing."""

    fd: int
    real: str  # where the descriptor leads, checked under a root (what a process of the group would open)

    @property
    def path(self) -> str:
        return f"/proc/self/fd/{self.fd}"

    def close(self) -> None:
        os.close(self.fd)


def open_under(field: str, ref: str, roots: list[str]) -> Opened:
    """Open ref and check that what was opened lies under a root, by the text as given and by where the opened file
    really is; PathChanged naming the field otherwise."""
    if not os.path.isabs(ref) or not any(Path(os.path.normpath(ref)).is_relative_to(root) for root in roots):
        raise PathChanged(f"{field}: {ref!r} is {OUTSIDE}")
    try:
        fd = os.open(ref, os.O_PATH | os.O_CLOEXEC)
    except OSError as error:
        raise PathChanged(f"{field}: {ref!r} cannot be opened now: {error.strerror}") from None
    real = os.readlink(f"/proc/self/fd/{fd}")
    if not any(Path(real).is_relative_to(os.path.realpath(root)) for root in roots):
        os.close(fd)
        raise PathChanged(f"{field}: {ref!r} now leads to {real!r}, outside BENCHD_MODEL_ROOTS: it changed after the "
                          "run was admitted, and the run does not read it")
    return Opened(fd, real)


def open_confined(spec_data: dict[str, Any],
                  confine: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Opened]]:
    """The spec (a dict) with every confined path but the model's replaced by its opened descriptor's name, and what
    was opened by field (the caller closes them after the run); PathChanged for a path that no longer leads under the
    roots (the ones opened before it are closed)."""
    if not confine:
        return spec_data, {}
    opened: dict[str, Opened] = {}
    try:
        for field, ref in confine["paths"].items():
            opened[field] = open_under(field, ref, confine["roots"])
    except PathChanged:
        for item in opened.values():
            item.close()
        raise
    data = _replaced(spec_data, {f: o.path for f, o in opened.items() if f != "model"})
    return data, opened


def _replaced(data: dict[str, Any], values: dict[str, str]) -> dict[str, Any]:
    """A copy of a nested dict with dotted fields set (the parts on the way copied, the rest shared)."""
    out = dict(data)
    for dotted, value in values.items():
        node, *path, last = [out, *dotted.split(".")]
        for part in path:
            node[part] = dict(node.get(part) or {})
            node = node[part]
        node[last] = value
    return out
