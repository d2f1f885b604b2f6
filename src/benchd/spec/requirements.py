"""Requirements a spec brings for its worker's Python environment (`requirements:`), where the daemon's settings allow
it (BENCHD_ENVIRONMENTS_FROM_SPECS): each one PEP 508 requirement (a name with its version, extras and markers, or a
name @ a URL), never a pip option or a bare path; over HTTP, a URL only of a remote source
(docs/guides/environments.md)."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated

from packaging.requirements import InvalidRequirement, Requirement
from pydantic import AfterValidator, Field

REQUIREMENT_MAX = 500  # characters of one requirement
REQUIREMENTS_MAX = 16  # requirements of one environment
REMOTE = ("https://", "git+https://")  # the sources a requirement given over HTTP may name
PREFIX = "requirements-"  # the name of the environment a spec's requirements build


def _pep508(value: str) -> str:
    try:
        Requirement(value)
    except InvalidRequirement as error:
        first = str(error).splitlines()[0] if str(error) else "cannot be read"
        raise ValueError(f"not a requirement (PEP 508: a name with its version, or name @ URL): {first}") from None
    return value


RequirementText = Annotated[str, Field(min_length=1, max_length=REQUIREMENT_MAX), AfterValidator(_pep508)]
Requirements = Annotated[list[RequirementText], Field(min_length=1, max_length=REQUIREMENTS_MAX)]


def environment_name(requirements: list[str]) -> str:
    """The environment a spec's requirements build: named by them (in their order), so every run that brings the
    same list shares its one venv, and the run's stored environment says which."""
    digest = hashlib.sha256(json.dumps(list(requirements)).encode()).hexdigest()[:12]
    return PREFIX + digest


def remote_problem(requirement: str) -> str | None:
    """Why a requirement given over HTTP may not be built: a URL of a local file or of a plain-HTTP source."""
    url = Requirement(requirement).url
    if url is not None and not url.startswith(REMOTE):
        return (f"{requirement!r}: a requirement over HTTP names a release, or a source at "
                f"{' or '.join(REMOTE)}; a local path is the operator's to declare (BENCHD_ENVIRONMENTS)")
    return None
