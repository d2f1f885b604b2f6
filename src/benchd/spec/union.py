"""RunSpec: the union of every runner's spec, on the run's kind and a generation's engine (spec/engines.py finds the
engines, each with its spec); read from a document, validated at the edge, each problem named by its field."""

from __future__ import annotations

import difflib
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, Union

import yaml
from pydantic import (
    ConfigDict,
    Discriminator,
    GetCoreSchemaHandler,
    Tag,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)
from pydantic_core import CoreSchema, ErrorDetails, InitErrorDetails

from benchd.spec.documents import DocumentError, load_yaml
from benchd.spec.engines import default_engine, engines
from benchd.spec.run import GenerateSpec, KernelSpec, SpecBase, TrainStepSpec
from benchd.spec.timed import KernelOptions, RunKind, TrainStepOptions
from benchd.spec.workload import Workload

# ---- RunSpec: the union, read from a document -------------------------------------------------------

TIMED_SPECS: dict[str, type[SpecBase]] = {"train_step": TrainStepSpec, "kernel": KernelSpec}  # by kind
_STRICT = ConfigDict(strict=True)
_KIND = TypeAdapter(RunKind, config=_STRICT)


@cache
def specs() -> dict[str, type[SpecBase]]:
    """Each runner's spec: every engine's (spec/engines.py), then the timed kinds'."""
    return {**{name: record.spec for name, record in engines().items()}, **TIMED_SPECS}


@cache
def unused() -> dict[str, TypeAdapter]:
    """Sections a document may hold for another kind or engine than its own: a spec dumped before RunSpec was a
    union holds every one, and a matrix over engines gives each variant the others' options. Each is checked as
    that kind or engine would check it (a bad one is refused, as before), then left out."""
    sections = {name: _section(record.spec, name) for name, record in engines().items()}
    # a Literal of the names found at run time, which no static type can spell
    names: Any = Literal[tuple(engines())]
    return {"engine": TypeAdapter(names, config=_STRICT), "workload": TypeAdapter(Workload),
            **sections, "train_step": TypeAdapter(TrainStepOptions), "kernel": TypeAdapter(KernelOptions | None)}


def _section(spec: type[SpecBase], name: str) -> TypeAdapter:
    annotation = spec.model_fields[name].annotation
    assert annotation is not None  # a model's field always has its type
    return TypeAdapter(annotation)


@cache
def spec_fields() -> frozenset[str]:
    """A document's keys: every runner's fields."""
    return frozenset(name for spec in specs().values() for name in spec.model_fields)


def _located(error: ValidationError, *loc: str | int) -> list[InitErrorDetails]:
    return [_moved(item, loc) for item in error.errors(include_url=False)]


def _moved(item: ErrorDetails, loc: tuple[str | int, ...]) -> InitErrorDetails:
    details = InitErrorDetails(type=item["type"], loc=(*loc, *item["loc"]), input=item["input"])
    if "ctx" in item:
        details["ctx"] = item["ctx"]
    return details


def _runner(data: dict) -> str:
    """The runner a document names: its kind, or a generation's engine; ValidationError naming the field when it is
    not one benchd knows."""
    kind = data.get("kind", "generate")
    field, value, adapter = (("engine", data.get("engine", default_engine()), unused()["engine"])
                             if kind == "generate" else ("kind", kind, _KIND))
    if isinstance(value, str) and value in specs() and (field == "engine") == (value in engines()):
        return value
    try:
        return adapter.validate_python(value)  # refused: the line above took every name benchd knows
    except ValidationError as error:
        raise ValidationError.from_exception_data("RunSpec", _located(error, field)) from None


def _tag(value: Any) -> str | None:
    """The runner (specs()' key) a spec or a document names, None when it names none: how pydantic tells the
    union's members apart when it serializes a spec, and in the JSON schema (a oneOf)."""
    if isinstance(value, SpecBase):
        return value.runner
    try:
        return _runner(value) if isinstance(value, dict) else None
    except ValidationError:
        return None


def _read(data: Any, handler: ValidatorFunctionWrapHandler) -> SpecBase:
    """The spec of a document's kind (and engine); what another kind or engine would use is checked and left out.
    The union itself (handler) is never asked: its errors' places would start with the member's tag."""
    if isinstance(data, SpecBase):
        return data
    if not isinstance(data, dict):
        raise ValidationError.from_exception_data("RunSpec", [InitErrorDetails(
            type="model_type", loc=(), input=data, ctx={"class_name": "RunSpec"})])
    spec = specs()[_runner(data)]
    sections = unused()
    errors: list[InitErrorDetails] = []
    own = {}
    for key, value in data.items():
        if key in spec.model_fields or key not in sections:  # unknown keys go on, to be refused by name
            own[key] = value
            continue
        try:
            sections[key].validate_python(value)
        except ValidationError as error:
            errors.extend(_located(error, key))
    try:
        found = spec.model_validate(own)
    except ValidationError as error:
        errors[:0] = _located(error)
    if errors:
        raise ValidationError.from_exception_data("RunSpec", errors)
    return found


class _Runners:
    """The union's members, known once the engines are (spec/engines.py): pydantic asks when a model or adapter that
    holds a RunSpec is first built, so that an engine declared in a folder of its own is a member like the rest."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        members = tuple(Annotated[spec, Tag(runner)] for runner, spec in specs().items())
        return handler.generate_schema(Annotated[Union[members], Discriminator(_tag)])  # noqa: UP007


if TYPE_CHECKING:
    # What a type checker sees: the members are known only at run time (_Runners), but every engine's spec is a
    # GenerateSpec (spec/engines.py, EngineRecord.spec), so these three, told apart by kind, stand for them all.
    RunSpec: TypeAlias = GenerateSpec | TrainStepSpec | KernelSpec
else:
    RunSpec = Annotated[_Runners, WrapValidator(_read)]


@cache
def _run_spec() -> TypeAdapter:
    return TypeAdapter(RunSpec)


# ---- loading and error messages ----------------------------------------------------------------


class SpecError(ValueError):
    """A spec that cannot run; the message names each bad field and why."""


def format_validation_error(error: ValidationError) -> str:
    """A line per problem, naming the field; an unknown field gets the spec's nearest field names beside it."""
    lines = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "spec"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden" and item["loc"]:
            nearest = difflib.get_close_matches(str(item["loc"][-1]), _fields(item["loc"][:-1]), n=3, cutoff=0.6)
            message += f"; did you mean {' or '.join(map(repr, nearest))}?" if nearest else ""
        lines.append(f"{where}: {message}")
    return "\n".join(lines)


def _fields(loc: tuple) -> list[str]:
    """The field names a RunSpec has at loc (a union's tag in loc picks its member; a union the loc does not name
    gives every member's), from its JSON schema."""
    root = _run_spec().json_schema()
    defs = root.get("$defs", {})

    def members(node: dict) -> list[dict]:
        if "$ref" in node:
            return members(defs[node["$ref"].rsplit("/", 1)[-1]])
        alternatives = node.get("oneOf") or node.get("anyOf") or node.get("allOf")
        return [m for a in alternatives for m in members(a)] if alternatives else [node]

    nodes = members(root)
    for part in loc:
        if isinstance(part, int):
            nodes = [m for n in nodes for m in members(n.get("items", {}))]
        elif any(part in n.get("properties", {}) for n in nodes):
            nodes = [m for n in nodes for m in members(n.get("properties", {}).get(part, {}))]
        else:  # a union's tag (arrivals.poisson, kernel.matmul): the member it names
            nodes = [m for m in nodes if any(p.get("const") == part for p in m.get("properties", {}).values())]
    return sorted({name for n in nodes for name in n.get("properties", {})})


def validate_spec(data: Any) -> RunSpec:
    """The spec a document (or a stored spec, of any benchd since 0005) means; pydantic's ValidationError naming each
    bad field."""
    return _run_spec().validate_python(data)


def parse_spec(data: Any) -> RunSpec:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(f"spec: expected a mapping of fields, got {type(data).__name__}")
    try:
        return validate_spec(data)
    except ValidationError as error:
        raise SpecError(format_validation_error(error)) from None


def read_document(path: str | Path) -> Any:
    """A spec file's document, YAML or JSON (YAML is a superset: one loader for both), parsed within
    documents.DEPTH_MAX; SpecError naming the place."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise SpecError(f"spec file {path}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise SpecError(f"spec file {path}: not UTF-8 ({error.reason} at byte {error.start})") from None
    try:
        return load_yaml(text)
    except DocumentError as error:
        raise SpecError(str(error) if error.loc else f"spec file {path}: {error.reason}") from None
    except yaml.YAMLError as error:
        raise SpecError(f"spec file {path}: not valid YAML or JSON: {error}") from None


def load_spec(path: str | Path) -> RunSpec:
    return parse_spec(read_document(path))
