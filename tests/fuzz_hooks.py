"""Schemathesis hooks for tests/api/test_fuzz.py (SCHEMATHESIS_HOOKS=tests.fuzz_hooks): besides what it generates from
the OpenAPI document, bodies nested around and far past documents.DEPTH_MAX, and bodies holding numbers JSON cannot
hold exactly (1e309, -1e400, huge integers, NaN and Infinity literals). Both are sent as raw bytes: json.dumps can
write neither a 5,000-deep value nor 1e309."""

from __future__ import annotations

import json
import os

import schemathesis
from hypothesis import strategies as st

from benchd.spec.documents import DEPTH_MAX

MARK = "\u2603fuzz\u2603"  # a string no generated body holds: where the raw text goes
DEPTHS = [DEPTH_MAX - 2, DEPTH_MAX, DEPTH_MAX + 1, 250, 495, 600, 5000]  # of the value put in: the body's is more
NOT_FINITE = ["1e309", "-1e309", "1e400", "1" + "0" * 400, "NaN", "Infinity", "-Infinity"]  # or not exact
OTHER_NUMBERS = ["5e-324", "1.7976931348623157e308", "true", '"3600"']  # the edges, and numbers in disguise
# Free-form places a client chooses the shape of, and places a matrix copies values from.
FREE_FORM = [("openai", "extra_body"), ("openai", "stream_options"), ("spec", "openai", "extra_body"),
             ("matrix", "openai.extra_body"), ("baseline",), ("x",)]
KEYS = ["a", "interval_s", "enabled", "repeats", "duration_s", "rate", "threshold"]


def _places(body: object) -> list[tuple]:
    """Every object of the body, as a path of keys, to put a value in."""
    found, stack = [], [((), body)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            found.append(path)
            stack.extend(((*path, k), v) for k, v in value.items() if isinstance(k, str))
    return found


def _with_mark(body: dict, path: tuple, key: str) -> dict:
    """A copy of body with MARK at path + key (the objects on the way made, or copied)."""
    out = dict(body)
    node = out
    for part in path:
        node[part] = dict(node[part]) if isinstance(node.get(part), dict) else {}
        node = node[part]
    node[key] = MARK
    return out


def _raw(body: dict, text: str) -> bytes:
    return json.dumps(body).replace(json.dumps(MARK), text, 1).encode()


@st.composite
def _altered(draw, body):
    if not isinstance(body, dict):
        return body
    anywhere = st.sampled_from(_places(body)).flatmap(lambda path: st.sampled_from(KEYS).map(lambda key: (*path, key)))
    *path, key = draw(st.one_of(st.sampled_from(FREE_FORM), anywhere))
    marked = _with_mark(body, tuple(path), key)
    if draw(st.booleans()):
        # Three in four not finite: enough of each (test_fuzz asks for 20 a mode) whatever else the seed draws.
        number = draw(st.sampled_from(NOT_FINITE) if draw(st.integers(0, 3)) else st.sampled_from(OTHER_NUMBERS))
        return _made(_raw(marked, number), "number", number)
    depth = draw(st.sampled_from(DEPTHS))
    opener, closer = draw(st.sampled_from([('{"a": ', "}"), ("[", "]")]))
    return _made(_raw(marked, opener * depth + "1" + closer * depth), "nested", str(depth))


_MADE: dict[bytes, tuple[str, str]] = {}  # what each altered body holds, to log as it is sent


def _made(body: bytes, kind: str, detail: str) -> bytes:
    _MADE[body] = (kind, detail)
    return body


@schemathesis.hook
def before_generate_body(context, strategy):
    """A generated body (a third of them), or one with a deeply nested value or an inexact number put in one of its
    objects."""
    altered = strategy.flatmap(_altered)
    return st.one_of(strategy, altered, altered)


@schemathesis.hook
def after_call(context, case, response):
    """Each altered body sent, a line in $BENCHD_FUZZ_LOG: its kind, what it held and the status it got."""
    made = _MADE.get(case.body) if isinstance(case.body, bytes) else None
    if made is not None and (log := os.environ.get("BENCHD_FUZZ_LOG")):
        with open(log, "a") as f:
            f.write(json.dumps({"kind": made[0], "detail": made[1], "method": case.method, "path": case.path,
                                "status": response.status_code}) + "\n")
