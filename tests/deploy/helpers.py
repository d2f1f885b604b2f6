"""What the chart's tests share: the chart, the cluster it is rendered for, and its rendered documents."""

import base64
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).parents[2]
CHART = ROOT / "charts" / "benchd"
CRDS = Path(__file__).parents[1] / "data" / "prometheus-operator-crds"
# The cluster version the manifests are rendered for and checked against: kubectl's in the npm package that brings
# Helm, and the oldest minor the chart's kubeVersion admits after it.
KUBERNETES = "1.30.0"
NAMESPACE = "gpu-bench"
CASES = {"defaults": None, "external-postgresql": "ci/external-postgresql-values.yaml",
         "existing-secret": "ci/existing-secret-values.yaml", "cpu-only": "ci/cpu-only-values.yaml"}
PROBES = ("startupProbe", "livenessProbe", "readinessProbe")  # the container's, each an httpGet


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=120)


def render(helm: str, case: str | None = None, *args: str, chart: Path = CHART, release: str = "benchd") -> list[dict]:
    values = ["--values", str(CHART / CASES[case])] if case and CASES[case] else []
    done = run_helm(helm, "template", release, str(chart), f"--namespace={NAMESPACE}", f"--kube-version={KUBERNETES}",
                    *values, *args)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def by_kind(docs: list[dict]) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for doc in docs:
        found.setdefault(doc["kind"], []).append(doc)
    return found


def container(docs: list[dict]) -> dict:
    (daemonset,) = by_kind(docs)["DaemonSet"]
    (benchd,) = daemonset["spec"]["template"]["spec"]["containers"]
    return benchd


def ports(docs: list[dict]) -> dict[str, int]:
    """The container's ports by name."""
    return {p["name"]: p["containerPort"] for p in container(docs)["ports"]}


def env(docs: list[dict]) -> dict[str, dict]:
    return {e["name"]: e for e in container(docs)["env"]}


def secret_data(docs: list[dict]) -> dict[str, str]:
    (secret,) = by_kind(docs)["Secret"]
    return {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}
