"""What every request passes before FastAPI parses it: the bearer token first on mutating methods (and on reads with
BENCHD_READS__NEED_TOKEN), then a bounded, strictly parsed JSON body (UTF-8, no NaN or Infinity, no NUL or lone
surrogate in any string, nested at most documents.DEPTH_MAX levels) and clean path and query values; whatever fails
is a 401, 413 or 422 naming the place, never a 400 or a 500."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from benchd.api.deps import token_accepted
from benchd.api.schemas import ERRORS
from benchd.spec.documents import DocumentError
from benchd.spec.documents import parse_json as parse_document

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
ALWAYS_OPEN = frozenset({"/healthz", "/readyz", "/metrics"})  # probes and Prometheus: open with reads.need_token too
# JSON whatever the route answers (a report's HTML too): named by its schema, as api/runs.py's _as_json does.
READ_401 = {**{k: v for k, v in ERRORS[401].items() if k != "model"},
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Problem"}}}}


def text_problem(text: str) -> str | None:
    """Strings the store and the JSON encoders cannot keep: NUL (PostgreSQL) and lone surrogates (not UTF-8)."""
    if "\x00" in text:
        return "must not contain NUL characters"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "must not contain lone surrogates (not valid Unicode)"
    return None


def parse_json(body: bytes) -> Any:
    """Strict, bounded JSON; DocumentError (where, and the reason) for anything else."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DocumentError((), f"not UTF-8 ({error.reason} at byte {error.start})") from None
    return parse_document(text)


def walk(value: Any, loc: tuple, problems: list[dict]) -> None:
    if isinstance(value, str):
        if reason := text_problem(value):
            problems.append({"type": "string_type", "loc": loc, "msg": reason})
    elif isinstance(value, dict):
        for key, item in value.items():
            if reason := text_problem(key):
                problems.append({"type": "string_type", "loc": loc, "msg": f"a key {reason}"})
            walk(item, (*loc, key), problems)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            walk(item, (*loc, index), problems)


class GuardedRoute(APIRoute):
    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        if "GET" in (kwargs.get("methods") or ()) and path not in ALWAYS_OPEN:  # a 401 with BENCHD_READS__NEED_TOKEN
            kwargs["responses"] = {401: READ_401, **(kwargs.get("responses") or {})}
        super().__init__(path, endpoint, **kwargs)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            settings = request.app.state.services.settings
            problems: list[dict] = []
            for kind, items in (("path", request.path_params.items()), ("query", request.query_params.multi_items())):
                for name, value in items:
                    if isinstance(value, str) and (reason := text_problem(value)):
                        problems.append({"type": "string_type", "loc": (kind, name), "msg": reason})
            needed = request.method in MUTATING or (settings.reads.need_token and request.url.path not in ALWAYS_OPEN)
            if needed and not token_accepted(settings, request.headers.get("authorization")):
                raise HTTPException(status.HTTP_401_UNAUTHORIZED, "a valid bearer token is required",
                                    headers={"WWW-Authenticate": "Bearer"})
            if problems:
                raise RequestValidationError(problems)
            if request.method in ("POST", "PUT", "PATCH"):
                await _check_body(request, settings.max_body_bytes)
            return await handler(request)

        return guarded


async def _check_body(request: Request, limit: int) -> None:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, f"the body is over {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, f"the body is over {limit} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    request._body = body  # FastAPI reads the body from here: it is read once
    if not body:
        return
    try:
        value = parse_json(body)
    except DocumentError as error:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", *error.loc),
                                       "msg": error.reason}]) from None
    problems: list[dict] = []
    walk(value, ("body",), problems)
    if problems:
        raise RequestValidationError(problems)
    request._json = value  # and its JSON from here: parsed once, strictly


def validation_detail(errors: list[dict]) -> list[dict]:
    """Validation problems as the OpenAPI document describes them: where (loc), why (msg) and their type; the
    offending input is left out (it may be what JSON cannot hold, such as NaN)."""
    return [{"loc": [part if isinstance(part, int) else str(part) for part in error.get("loc", ())],
             "msg": str(error.get("msg", "")), "type": str(error.get("type", "value_error"))} for error in errors]
