"""Documents from outside (HTTP bodies, spec files, traces, datasets, a model's config.json): parsed with one bound on
how deep they nest and how many values they hold, so that nothing downstream (validation, serialization, a deep
copy) meets a structure deep enough to reach Python's recursion limit. Too deep or too large is a DocumentError
naming the place."""

from __future__ import annotations

import errno
import itertools
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any, BinaryIO

import yaml

# The one limit, wherever a document is parsed: the request guard (api/guard.py), the spec models' free-form fields
# (fields.FreeForm), the command line's YAML and JSON files, and the matrix expansion. A spec nests about 6 levels; an
# extra_body a server takes, a few more.
DEPTH_MAX = 64  # containers (objects, arrays) inside one another, the outermost counting 1
NODES_MAX = 1 << 20  # values in all (a YAML alias counts each time it is used): a 1 MiB JSON body never holds more
# Parsed this deep at most, so that the field that passes DEPTH_MAX can be named; anything deeper is refused from its
# text, never handed to a recursive parser: json's C scanner takes one of Python's frames a level, PyYAML's composer
# about three (Python's limit is 1,000).
JSON_PARSE_DEPTH_MAX = 8 * DEPTH_MAX
YAML_PARSE_DEPTH_MAX = 2 * DEPTH_MAX

PLACE_PARTS = 8  # a path deeper than this is written shortened

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)  # a JSON string, escapes included
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class DocumentError(ValueError):
    """A document too deep, too large or not parseable: where (a path from its top, () for the whole) and why."""

    def __init__(self, loc: tuple, reason: str) -> None:
        super().__init__(reason)
        self.loc, self.reason = loc, reason

    def __str__(self) -> str:
        where = place(self.loc)
        return f"{where}: {self.reason}" if where else self.reason


def place(loc: tuple) -> str:
    """A path as people read it (a.b.0); a deep one shortened to its first parts and its depth."""
    if len(loc) <= PLACE_PARTS:
        return ".".join(map(str, loc))
    return ".".join(map(str, loc[:PLACE_PARTS])) + f"… ({len(loc)} levels down)"


def too_deep(depth_max: int = DEPTH_MAX) -> str:
    return f"nested too deeply: more than {depth_max} levels of objects and arrays"


def json_depth(text: str) -> int:
    """How deep a JSON text nests, read from its brackets outside strings: linear, with no recursion, whatever the
    text (an invalid one gets some number; the parser refuses it after)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)


def nesting_problem(value: Any, depth_max: int = DEPTH_MAX, nodes_max: int | None = NODES_MAX,
                    finite: bool = False) -> DocumentError | None:
    """Where a parsed value (dicts, lists, scalars) nests deeper than depth_max, holds more than nodes_max values (None:
    any number) or, with finite, holds a number that is not finite or an integer beyond 64 bits; None when it does not.
    Iterative (a YAML alias can even make a value hold itself: it is then too deep)."""
    if not isinstance(value, dict | list):
        return DocumentError((), reason) if finite and (reason := _inexact(value)) else None
    stack: list[tuple[Any, int, tuple | None]] = [(value, 1, None)]  # (container, its depth, (parent's trail, key))
    nodes = 1
    while stack:
        item, depth, trail = stack.pop()
        if depth > depth_max:
            return DocumentError(_path(trail), too_deep(depth_max))
        nodes += len(item)
        if nodes_max is not None and nodes > nodes_max:
            return DocumentError(_path(trail), f"holds more than {nodes_max:,} values")
        for key, child in item.items() if isinstance(item, dict) else enumerate(item):
            if isinstance(child, dict | list):
                stack.append((child, depth + 1, (trail, key)))
            elif finite and (reason := _inexact(child)):
                return DocumentError(_path((trail, key)), reason)
    return None


def _inexact(value: Any) -> str | None:
    """Why a number is not one every JSON reader takes as it is: not finite, or an integer beyond 64 bits."""
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    if isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**64:
        return "must be an integer within 64 bits"
    return None


def _path(trail: tuple | None) -> tuple:
    parts = []
    while trail is not None:
        trail, key = trail
        parts.append(key)
    return tuple(reversed(parts))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(text: str, nodes_max: int | None = NODES_MAX) -> Any:
    """Strict JSON (no NaN or Infinity literals), bounded (nodes_max None: a file whose size bounds it, a dataset):
    DocumentError for anything else."""
    depth = json_depth(text)
    if depth > JSON_PARSE_DEPTH_MAX:
        raise DocumentError((), too_deep())
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise DocumentError((), f"not valid JSON: {error.msg} at line {error.lineno}, column {error.colno}") from None
    except ValueError as error:  # a NaN or Infinity literal
        raise DocumentError((), str(error)) from None
    except RecursionError:  # an invalid text whose brackets the count above misread: never valid JSON anyway
        raise DocumentError((), too_deep()) from None
    if (problem := nesting_problem(value, nodes_max=nodes_max)) is not None:
        raise problem
    return value


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, composing at most YAML_PARSE_DEPTH_MAX collections inside one another (its composer
    recurses)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        collection = self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent)
        if collection:
            self._depth += 1
            if self._depth > YAML_PARSE_DEPTH_MAX:
                mark = self.peek_event().start_mark
                raise DocumentError((), f"line {mark.line + 1}, column {mark.column + 1}: {too_deep()}")
        try:
            return super().compose_node(parent, index)
        finally:
            if collection:
                self._depth -= 1


def load_yaml(text: str) -> Any:
    """YAML (a superset of JSON), safely and bounded: DocumentError naming the place, yaml.YAMLError for text that is
    not YAML."""
    loader = _BoundedLoader(text)
    try:
        value = loader.get_single_data()
    finally:
        loader.dispose()
    if (problem := nesting_problem(value)) is not None:
        raise problem
    return value


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def open_file(path: str | Path) -> BinaryIO:
    """A file a spec names (a trace, a dataset), opened for reading without ever blocking: O_NONBLOCK, so that a FIFO
    with no writer opens at once, and refused unless the opened descriptor is a regular file (a FIFO, device or socket
    could hold a reader forever or feed it without end). OSError whose strerror says why."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a file")
            raise OSError(errno.EINVAL, f"not a regular file ({kind})")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
