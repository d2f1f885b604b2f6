"""Validated field types shared by every part of a spec: bounds, numbers and the strict base model."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from benchd.spec.documents import nesting_problem

# Bounds of what a spec may hold, whoever sends it: numbers stay far inside what arithmetic, torch and the
# databases take, and strings fit the store's columns on SQLite and PostgreSQL alike.
INT_MAX = 2**31 - 1
FLOAT_MAX = 1e12
NAME_MAX = 100  # workload and schedule names
LABEL_MAX = 200
MODEL_MAX = 500
PATH_MAX = 4096
# Items a list of a spec may hold (lengths to draw from, a sweep's levels, shapes): every run's spec is stored and
# listed, so a spec stays small (4,096 lengths are about 24 KiB); admission holds levels and shapes to far fewer.
LIST_MAX = 4096

PositiveInt = Annotated[int, Field(ge=1, le=INT_MAX)]
PositiveFloat = Annotated[float, Field(gt=0, le=FLOAT_MAX)]
NonNegativeInt = Annotated[int, Field(ge=0, le=INT_MAX)]
NonNegativeFloat = Annotated[float, Field(ge=0, le=FLOAT_MAX)]
Fraction = Annotated[float, Field(ge=0, le=1)]
Name = Annotated[str, Field(min_length=1, max_length=NAME_MAX, pattern=r"^[A-Za-z0-9_.:\-]+$")]
FilePath = Annotated[str, Field(min_length=1, max_length=PATH_MAX)]


def _checked(value: Any, finite: bool) -> Any:
    if (problem := nesting_problem(value, finite=finite)) is not None:
        raise ValueError(str(problem))
    return value


# Values without a schema of their own, bounded as every document is (documents.DEPTH_MAX), so that validating,
# storing, copying and serializing them cannot recurse too deep. Free-form ones are passed on as they are (a server's
# extra body): finite too. Bounded ones are validated later as a spec's fields (a matrix's values).
def free_form(value: Any) -> Any:
    return _checked(value, finite=True)


def bounded(value: Any) -> Any:
    return _checked(value, finite=False)


FreeFormMapping = Annotated[dict[str, Any], AfterValidator(free_form)]
Bounded = Annotated[Any, AfterValidator(bounded)]
BoundedMapping = Annotated[dict[str, Any], AfterValidator(bounded)]


class Documented(BaseModel):
    """A model whose fields each say what they are: the docstring under a field is its description (in the OpenAPI
    document, docs/reference/http-api.md, a spec's JSON schema)."""

    model_config = ConfigDict(use_attribute_docstrings=True)


class Strict(Documented):
    # strict: true is not 1 and "5" is not 5; every float finite (NaN and infinities refused, 1e309 included).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
