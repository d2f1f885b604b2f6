"""What route handlers depend on: the daemon's services, the bearer token, and spec admission."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CollectorRegistry

from benchd.config import Settings
from benchd.events import RunEvents
from benchd.models import PRESETS
from benchd.scheduler import Scheduler
from benchd.spec import Concurrent, Constant, Gamma, Poisson, RunSpec, Sweep, length_upper_bound
from benchd.store import Store


@dataclass(slots=True)
class Services:
    settings: Settings
    store: Store
    scheduler: Scheduler
    events: RunEvents
    registry: CollectorRegistry


def get_services(request: Request) -> Services:
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(get_services)]

_bearer = HTTPBearer(auto_error=False)


def require_token(
    services: ServicesDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Mutating endpoints need the bearer token when one is configured."""
    token = services.settings.api_token
    if token is None:
        return
    given = credentials.credentials if credentials is not None else ""
    if not secrets.compare_digest(given.encode(), token.get_secret_value().encode()):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "a valid bearer token is required",
                            headers={"WWW-Authenticate": "Bearer"})


AuthDep = Depends(require_token)


def _problem(loc: tuple, message: str) -> dict:
    return {"type": "value_error", "loc": ("body", *loc), "msg": message, "input": None}


def admit(spec: RunSpec, settings: Settings, loc: tuple = ()) -> None:
    """Checks a spec from HTTP against the daemon's limits and model rules; 422 naming each field."""
    problems = []
    limits = settings.limits
    workload = spec.workload

    def over(value: float, limit: float, *field: str, setting: str) -> None:
        if value > limit:
            problems.append(_problem((*loc, *field), f"{value:g} exceeds the limit of {limit:g} "
                                                     f"(BENCHD_LIMITS__{setting.upper()})"))

    if spec.trust_remote_code:
        problems.append(_problem((*loc, "trust_remote_code"), "cannot be enabled over HTTP"))
    loads_model = spec.kind == "train_step" or (spec.kind == "generate" and spec.engine != "openai")
    if loads_model and "model" in spec.model_fields_set and spec.model not in PRESETS:  # (a served name is not)
        reason = _local_model_problem(spec.model, settings.model_roots)
        if reason:
            problems.append(_problem((*loc, "model"), reason))
    if workload.stop.requests is not None:
        over(workload.stop.requests, limits.max_requests, "workload", "stop", "requests", setting="max_requests")
    over(workload.warmup.requests, limits.max_requests, "workload", "warmup", "requests", setting="max_requests")
    duration = (workload.stop.duration_s or 0) + workload.warmup.seconds
    over(duration, limits.max_duration_s, "workload", "stop", "duration_s", setting="max_duration_s")
    over(length_upper_bound(workload.prompt_tokens), limits.max_prompt_tokens, "workload", "prompt_tokens",
         setting="max_prompt_tokens")
    over(length_upper_bound(workload.output_tokens), limits.max_output_tokens, "workload", "output_tokens",
         setting="max_output_tokens")
    stages = workload.stages()
    if isinstance(workload.arrivals, Sweep):
        over(len(stages), limits.max_stages, "workload", "arrivals", "values", setting="max_stages")
    for profile in stages:
        if isinstance(profile, Concurrent):
            over(profile.concurrency, limits.max_concurrency, "workload", "arrivals", setting="max_concurrency")
        elif isinstance(profile, Constant | Poisson | Gamma):
            over(profile.rate, limits.max_rate, "workload", "arrivals", setting="max_rate")
    if spec.engine == "openai":  # files the daemon would read on the submitter's behalf stay under the roots
        if spec.openai.tokenizer is not None and (reason := _path_problem(spec.openai.tokenizer, settings.model_roots)):
            problems.append(_problem((*loc, "openai", "tokenizer"), reason))
        if workload.dataset is not None and (reason := _path_problem(workload.dataset.path, settings.model_roots)):
            problems.append(_problem((*loc, "workload", "dataset", "path"), reason))
    if spec.kind == "train_step":
        train = spec.train_step
        for warmup in train.warmup_study or [train.warmup_steps]:
            over(warmup + train.steps, limits.max_steps, "train_step", "steps", setting="max_steps")
        over(len(train.warmup_study or [0]), limits.max_stages, "train_step", "warmup_study", setting="max_stages")
    if spec.kind == "kernel" and spec.kernel is not None:
        kernel = spec.kernel
        over(kernel.warmup + kernel.repeats, limits.max_repeats, "kernel", "repeats", setting="max_repeats")
        over(len(kernel.shapes) * len(kernel.chosen()), limits.max_stages, "kernel", "shapes",
             setting="max_stages")
    if problems:
        raise RequestValidationError(problems)


def _path_problem(ref: str, roots: list[Path]) -> str | None:
    allowed = "not under BENCHD_MODEL_ROOTS"
    if not roots or not os.path.isabs(ref):
        return f"{ref!r} is {allowed}" + ("" if roots else " (no roots are configured)")
    path = Path(os.path.normpath(ref))
    real = Path(os.path.realpath(path))
    if not any(path.is_relative_to(root) and real.is_relative_to(Path(os.path.realpath(root))) for root in roots):
        return f"{ref!r} is {allowed}"
    return None


def _local_model_problem(ref: str, roots: list[Path]) -> str | None:
    """A non-preset model must be a directory under an allowed root, judged on the text of the path first so
    that nothing outside the roots is ever looked at."""
    allowed = "neither a preset nor a directory under BENCHD_MODEL_ROOTS"
    if not roots or not os.path.isabs(ref):
        return f"{ref!r} is {allowed}" + ("" if roots else " (no roots are configured)")
    path = Path(os.path.normpath(ref))
    if not any(path.is_relative_to(root) for root in roots):
        return f"{ref!r} is {allowed}"
    real = Path(os.path.realpath(path))  # a link inside a root must not lead outside it
    if not any(real.is_relative_to(Path(os.path.realpath(root))) for root in roots):
        return f"{ref!r} leads outside BENCHD_MODEL_ROOTS"
    if not (real / "config.json").is_file():
        return f"{ref!r} has no config.json"
    return None
