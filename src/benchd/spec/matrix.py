"""A matrix: one spec and the fields it varies, expanded into variants (their cross-product, on one seed and one
workload) that run interleaved, round after round, against a baseline variant."""

from __future__ import annotations

import copy
import itertools
import json
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from benchd.spec import GenerateSpec, SpecError, spec_fields, validate_spec
from benchd.spec.fields import Bounded, BoundedMapping

MAX_VARIANTS = 64  # whatever the daemon's limits: a matrix is one comparison, not a sweep of a space
MAX_REPEATS = 100
LABEL_MAX = 200  # a variant's label is a Prometheus label value and a table heading
FIXED = {"name": "every variant runs the one workload", "seed": "every variant runs on the one seed",
         "kind": "a matrix compares generation runs",
         # on every GPU a run's requests are the GPUs' side by side: its greedy tokens would not pair by request
         "placement": "a matrix runs each variant on one device (placement one)"}
RESERVED = ("matrix", "repeats", "baseline")  # a matrix document's own keys beside the spec's


class MatrixProblem(SpecError):
    """Bad matrix input: each problem's place (loc, from the document's top) and why."""

    def __init__(self, problems: list[tuple[tuple, str]]) -> None:
        self.problems = problems
        super().__init__("\n".join(f"{'.'.join(map(str, loc))}: {msg}" for loc, msg in problems))


@dataclass(frozen=True, slots=True)
class Variant:
    index: int
    label: str  # path=value, …: what sets it apart
    values: dict[str, Any]  # dotted path → value
    spec: GenerateSpec


class MatrixSpec(BaseModel):
    """What POST /matrices and a spec file with `matrix:` hold: the spec's fields, the matrix (dotted field path →
    the values it takes, in order), how many rounds, and the baseline (a variant's index or its values; default the
    first)."""

    # strict: true is not 1 and "5" is not 5; numbers finite; every value bounded (documents.DEPTH_MAX) before a
    # variant's copy is made of it
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    spec: BoundedMapping  # the base spec as given (unset fields stay unset: the daemon fills them in)
    matrix: dict[Annotated[str, Field(min_length=1, max_length=200)], Annotated[list[Bounded], Field(min_length=1)]]
    repeats: Annotated[int, Field(ge=1, le=MAX_REPEATS)] = 3
    baseline: Bounded = None  # a variant's index, or its values (a mapping of paths to values)

    @field_validator("baseline")
    @classmethod
    def _index_or_values(cls, value: Any) -> Any:
        if (isinstance(value, int) and not isinstance(value, bool) and value >= 0) or isinstance(value, dict | None):
            return value
        raise ValueError(f"a variant's index (a whole number, 0 or more) or its values (a mapping), not {value!r}")

    def variants(self) -> list[Variant]:
        return expand(self)

    def baseline_index(self, variants: list[Variant]) -> int:
        return baseline_index(self.baseline, variants)

    def document(self) -> dict[str, Any]:
        """The matrix as one document again: the spec's fields with the matrix's keys beside them."""
        out = dict(self.spec)
        out.update(matrix=self.matrix, repeats=self.repeats)
        if self.baseline is not None:
            out["baseline"] = self.baseline
        return out


def parse_matrix(data: Any) -> MatrixSpec:
    """A matrix document: a spec's fields with `matrix`, `repeats` and `baseline` beside them; every variant is
    checked as a spec. MatrixProblem names each bad place."""
    if not isinstance(data, dict):
        raise MatrixProblem([((), f"expected a mapping of fields, got {type(data).__name__}")])
    spec = {k: v for k, v in data.items() if k not in RESERVED}
    try:
        matrix = MatrixSpec.model_validate({"spec": spec, **{k: data[k] for k in RESERVED if k in data}})
    except ValidationError as error:
        raise MatrixProblem([(tuple(p for p in e["loc"] if p != "spec"), e["msg"].removeprefix("Value error, "))
                             for e in error.errors()]) from None
    matrix.variants()  # every variant must be a valid spec, and the baseline one of them
    return matrix


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    node = data
    for part in parts[:-1]:
        if node.get(part) is None:
            node[part] = {}
        if not isinstance(node[part], dict):
            raise ValueError(f"{part} is not a mapping of fields")
        node = node[part]
    node[parts[-1]] = copy.deepcopy(value)


def format_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def label_of(values: dict[str, Any]) -> str:
    label = ",".join(f"{path}={format_value(value)}" for path, value in values.items())
    return label if len(label) <= LABEL_MAX else label[:LABEL_MAX - 1] + "…"


def expand(matrix: MatrixSpec) -> list[Variant]:
    """The cross-product, the first path varying slowest; each variant validated as a spec."""
    problems: list[tuple[tuple, str]] = []
    for path, values in matrix.matrix.items():
        head = path.split(".")[0]
        if head in FIXED:
            problems.append((("matrix", path), FIXED[head]))
        elif head not in spec_fields() or not all(path.split(".")):
            problems.append((("matrix", path), f"no spec field {head!r}"))
        seen = [format_value(v) for v in values]
        if len(set(seen)) != len(seen):
            problems.append((("matrix", path), "each value may appear once"))
    count = 1
    for values in matrix.matrix.values():
        count *= len(values)
    if count > MAX_VARIANTS:
        problems.append((("matrix",), f"{count} variants, more than the {MAX_VARIANTS} a matrix may have"))
    if problems:
        raise MatrixProblem(problems)
    paths = list(matrix.matrix)
    variants = []
    for index, combination in enumerate(itertools.product(*matrix.matrix.values())):
        chosen = dict(zip(paths, combination))
        data = copy.deepcopy(matrix.spec)
        try:
            for path, value in chosen.items():
                _set(data, path, value)
            spec = validate_spec(data)
        except ValueError as error:  # pydantic's ValidationError is one
            problems.extend(_variant_problems(chosen, error))
            continue
        if not isinstance(spec, GenerateSpec):
            problems.append((("kind",), FIXED["kind"]))
            break
        if spec.placement != "one":
            problems.append((("placement",), FIXED["placement"]))
            break
        variants.append(Variant(index, label_of(chosen), chosen, spec))
    if problems:
        raise MatrixProblem(problems)
    baseline_index(matrix.baseline, variants)
    return variants


def _variant_problems(values: dict[str, Any], error: ValueError) -> list[tuple[tuple, str]]:
    """A variant that is no valid spec: named by its values; the field is given from the spec's top."""
    label = label_of(values)
    if not isinstance(error, ValidationError):
        return [(("matrix",), f"variant {label}: {error}")]
    return [(tuple(item["loc"]) or ("matrix",), f"variant {label}: {item['msg'].removeprefix('Value error, ')}")
            for item in error.errors()]


def baseline_index(baseline: int | dict[str, Any] | None, variants: list[Variant]) -> int:
    if baseline is None:
        return 0
    if isinstance(baseline, int):
        if baseline >= len(variants):
            raise MatrixProblem([(("baseline",), f"variant {baseline} does not exist: there are {len(variants)}")])
        return baseline
    matching = [v.index for v in variants
                if all(format_value(v.values.get(k)) == format_value(x) for k, x in baseline.items())]
    if len(matching) != 1:
        raise MatrixProblem([(("baseline",), f"matches {len(matching)} variants, not one: name a value of every "
                                             "path in the matrix, or give the variant's index")])
    return matching[0]


def interleaved(variants: int, repeats: int) -> list[tuple[int, int]]:
    """(round, variant) in the order runs execute: every variant once per round (A B C A B C …), so that slow drift
    (a warming GPU, a neighbour's load) falls on every variant alike."""
    return [(r, v) for r in range(repeats) for v in range(variants)]
