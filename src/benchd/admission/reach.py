"""What a spec from HTTP may make the daemon reach on its submitter's behalf: no remote code, environments the
operator declared (or built from requirements where the settings allow), a model from a preset or under the roots,
files under the roots, and only the hosts and key variables the settings allow (docs/guides/daemon.md, "Who can do
what")."""

from __future__ import annotations

from benchd.admission.refusal import Problems
from benchd.admission.traces import TRACE_PATH
from benchd.daemon.settings import Settings
from benchd.models.packaged import weights_problem
from benchd.models.presets import PRESETS
from benchd.models.roots import model_problem, path_problem
from benchd.models.sources import loads_model
from benchd.spec import GenerateSpec, RunSpec
from benchd.spec.requirements import remote_problem
from benchd.supervisor.environments import Environments


def source_problems(spec: RunSpec, settings: Settings, problems: Problems) -> None:
    """What the run would load: never remote code, and a model from a preset or under the roots (a served model's
    name is not a path; the daemon's own model is the operator's choice)."""
    if spec.trust_remote_code:
        problems.add(("trust_remote_code",), "cannot be enabled over HTTP")
    if reason := Environments(settings.environments).problem(spec.environment):
        problems.add(("environment",), reason)
    if spec.requirements is not None and not settings.environments_from_specs:
        problems.add(("requirements",), "building an environment from requirements given over HTTP is off (the "
                                        "daemon's BENCHD_ENVIRONMENTS_FROM_SPECS allows it); name a declared "
                                        "environment instead")
    elif spec.requirements is not None:
        for index, requirement in enumerate(spec.requirements):
            if reason := remote_problem(requirement):
                problems.add(("requirements", index), reason)
    if (loads_model(spec) and spec.model not in PRESETS and spec.model != settings.model
            and (reason := model_problem(spec.model, settings.model_roots))):
        problems.add(("model",), reason)
    if loads_model(spec) and (reason := weights_problem(spec.model)):  # a real preset's package, before the 202
        problems.add(("model",), reason)


def engine_problems(spec: GenerateSpec, settings: Settings, problems: Problems) -> None:
    """What its engine's spec says the run sends and reads (engines/<name>/spec.py): only key variables and hosts the
    settings allow, and files under the roots (a trace's: admission/traces.py)."""
    for field, name in spec.key_envs().items():
        if reason := settings.openai.key_problem(name):
            problems.add(tuple(field.split(".")), reason)
    for field, url in spec.urls().items():
        if reason := settings.openai.url_problem(url):
            problems.add(tuple(field.split(".")), reason)
    for field, path in spec.paths().items():
        if field != TRACE_PATH and (reason := path_problem(path, settings.model_roots)):
            problems.add(tuple(field.split(".")), reason)
