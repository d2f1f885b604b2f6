"""The Helm chart without a cluster: helm lint and template over a values matrix, every manifest against the
Kubernetes API schemas and the Prometheus Operator's CRDs, what the manifests say, the PrometheusRule through
promtool, the dashboards, the packaged chart."""

import copy
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from benchd.daemon.settings import Settings
from benchd.hardware.devices import resolve
from tests.deploy.helpers import (
    CASES,
    CHART,
    CRDS,
    KUBERNETES,
    PROBES,
    ROOT,
    by_kind,
    container,
    env,
    ports,
    render,
    run_helm,
    secret_data,
)

# ---- lint and schemas ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_helm_lint(helm, case):
    values = ["--values", str(CHART / CASES[case])] if CASES[case] else []
    done = run_helm(helm, "lint", "--strict", str(CHART), f"--kube-version={KUBERNETES}", *values)
    assert done.returncode == 0 and "0 chart(s) failed" in done.stdout, done.stdout + done.stderr


def strict(schema: dict) -> dict:
    """A CRD's schema as the API server's strict field validation applies it: an object's unknown fields are
    refused unless it preserves them. Patterns are Go's: a flag group after ^ (RE2 takes it anywhere) moves to the
    front, where Python's re wants it."""
    if isinstance(schema, dict):
        schema = {key: strict(value) for key, value in schema.items()}
        if isinstance(schema.get("pattern"), str):
            schema["pattern"] = re.sub(r"^\^\(\?([a-z]+)\)", r"(?\1)^", schema["pattern"])
        if "properties" in schema and "additionalProperties" not in schema and \
                not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [strict(item) for item in schema]
    return schema


def crd_schemas() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) → the served version's openAPIV3Schema, from the vendored CRDs."""
    schemas = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        for version in crd["spec"]["versions"]:
            if version["served"]:
                key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
                schemas[key] = strict(version["schema"]["openAPIV3Schema"])
    return schemas


def validate(doc: dict, schemas: dict) -> None:
    key = (doc["apiVersion"], doc["kind"])
    if key in schemas:
        jsonschema.validate(doc, schemas[key])
    else:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)


@pytest.mark.parametrize("case", CASES)
def test_every_manifest_validates_against_the_cluster_schemas(helm, case):
    docs = render(helm, case)
    schemas = crd_schemas()
    assert set(schemas) == {("monitoring.coreos.com/v1", kind)
                            for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule")}
    for doc in docs:
        validate(doc, schemas)
    kinds = {kind: len(found) for kind, found in by_kind(docs).items()}
    expected = {"DaemonSet": 1, "Service": 1, "ServiceAccount": 1, "ConfigMap": 4, "PrometheusRule": 1}
    expected |= {"PodMonitor": 1} if case == "cpu-only" else {"ServiceMonitor": 1}
    expected |= {} if case == "existing-secret" else {"Secret": 1}
    assert kinds == expected


def test_the_validators_refuse_what_a_cluster_refuses(helm):
    """A misspelt field anywhere fails: in a DaemonSet (Kubernetes' schemas) and in a custom resource (the CRD's)."""
    docs = by_kind(render(helm))
    schemas = crd_schemas()
    daemonset = copy.deepcopy(docs["DaemonSet"][0])
    daemonset["spec"]["template"]["spec"]["tolerationz"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(daemonset, schemas)
    monitor = copy.deepcopy(docs["ServiceMonitor"][0])
    monitor["spec"]["endpoints"][0]["scrapeInterval"] = "15s"
    with pytest.raises(jsonschema.ValidationError):
        validate(monitor, schemas)
    rule = copy.deepcopy(docs["PrometheusRule"][0])
    rule["spec"]["groups"][0]["rules"][0]["expr"] = {"not": "a string"}
    with pytest.raises(jsonschema.ValidationError):
        validate(rule, schemas)


# ---- what the manifests say ----------------------------------------------------------------------


def settings_from(docs: list[dict], tmp_path: Path, monkeypatch) -> Settings:
    """benchd's Settings as the pod would build them: the container's environment (secrets resolved from the
    rendered Secret, the downward API as a kubelet fills it) and the ConfigMap's file as BENCHD_CONFIG."""
    for name in [n for n in os.environ if n.startswith("BENCHD_")]:
        monkeypatch.delenv(name)
    secrets = secret_data(docs) if "Secret" in by_kind(docs) else {}
    downward = {"spec.nodeName": "gpu-node-7", "metadata.name": "benchd-x7k2p"}
    for name, entry in env(docs).items():
        source = entry.get("valueFrom", {})
        if "value" in entry:
            value = entry["value"]
        elif "fieldRef" in source:
            value = downward[source["fieldRef"]["fieldPath"]]
        else:
            value = secrets.get(source["secretKeyRef"]["key"], f"sqlite:///{tmp_path}/from-an-existing-secret.db")
        monkeypatch.setenv(name, value)
    (config,) = [c for c in by_kind(docs)["ConfigMap"] if "config.yaml" in c["data"]]
    (tmp_path / "config.yaml").write_text(config["data"]["config.yaml"])
    monkeypatch.setenv("BENCHD_CONFIG", str(tmp_path / "config.yaml"))
    return Settings()


def on_the_probe_port(docs: list[dict], api: int, probe: int) -> None:
    """The API on the container's port `http` (BENCHD_PORT); the three probes, and the Service port the
    ServiceMonitor scrapes or the PodMonitor's endpoint, on its port `metrics`, which BENCHD_HTTP__PROBE_PORT opens:
    the probe listener (api/probes.py)."""
    variables = env(docs)
    assert (variables["BENCHD_PORT"]["value"], variables["BENCHD_HTTP__PROBE_PORT"]["value"]) == (str(api), str(probe))
    assert ports(docs) == {"http": api, "metrics": probe}
    assert all(p["protocol"] == "TCP" for p in container(docs)["ports"])
    asked = {kind: container(docs)[kind]["httpGet"] for kind in PROBES}
    assert asked == {"startupProbe": {"path": "/healthz", "port": "metrics"},
                     "livenessProbe": {"path": "/healthz", "port": "metrics"},
                     "readinessProbe": {"path": "/readyz", "port": "metrics"}}
    kinds = by_kind(docs)
    (service,) = kinds["Service"]
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == \
        [("http", api, "http"), ("metrics", probe, "metrics")]
    if "ServiceMonitor" in kinds:
        (endpoint,) = kinds["ServiceMonitor"][0]["spec"]["endpoints"]  # a port of the Service, by name
    else:
        (endpoint,) = kinds["PodMonitor"][0]["spec"]["podMetricsEndpoints"]  # a port of the container, by name
    assert (endpoint["port"], endpoint["path"]) == ("metrics", "/metrics")


def test_defaults_every_gpu_node_nonroot_read_only_sqlite_and_a_generated_token(helm, tmp_path, monkeypatch):
    docs = render(helm)
    kinds = by_kind(docs)
    spec = kinds["DaemonSet"][0]["spec"]["template"]["spec"]
    benchd = container(docs)
    variables = env(docs)
    # Every GPU node (either discovery's label), GPU taints tolerated, every GPU seen and none reserved.
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [t["matchExpressions"][0]["key"] for t in terms] == ["nvidia.com/gpu.present",
                                                                "feature.node.kubernetes.io/pci-10de.present"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["runtimeClassName"] == "nvidia" and variables["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert variables["BENCHD_DEVICES"]["value"] == "all"
    assert "nvidia.com/gpu" not in json.dumps(benchd["resources"])
    # Node identity from the downward API.
    assert variables["BENCHD_NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert variables["BENCHD_POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # Non-root on a read-only root; every place benchd writes is a volume.
    assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["runAsUser"] == 10001
    context = benchd["securityContext"]
    assert context["readOnlyRootFilesystem"] and not context["allowPrivilegeEscalation"]
    assert context["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"]: m["name"] for m in benchd["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert set(mounts.values()) == set(volumes)
    assert {"/var/lib/benchd", "/home/benchd", "/tmp", "/dev/shm"} <= set(mounts)
    assert volumes["shm"]["emptyDir"]["medium"] == "Memory"
    for name in ("BENCHD_SPOOL_DIR", "BENCHD_WORKERS__LOG_DIR"):
        assert variables[name]["value"].startswith("/var/lib/benchd/")
    assert variables["BENCHD_DATABASE_URL"]["value"] == "sqlite:////var/lib/benchd/benchd.db"
    # The API on 8000; the probes and the scrape on the probe listener's 8001.
    on_the_probe_port(docs, api=8000, probe=8001)
    assert spec["automountServiceAccountToken"] is False
    # A token of the chart's own, from its Secret; new at each render without a cluster to look the old one up.
    assert variables["BENCHD_API_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "benchd", "key": "api-token"}
    token = secret_data(docs)["api-token"]
    assert re.fullmatch(r"[A-Za-z0-9]{40}", token) and token != secret_data(render(helm))["api-token"]
    assert set(secret_data(docs)) == {"api-token"}
    # The headless Service, the ServiceMonitor that finds it, with job="benchd" as the rules expect.
    (service,) = kinds["Service"]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"]
    (monitor,) = kinds["ServiceMonitor"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "benchd"
    pod_labels = kinds["DaemonSet"][0]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    # What benchd makes of it.
    settings = settings_from(docs, tmp_path, monkeypatch)
    assert (settings.node_name, settings.pod_name, settings.host) == ("gpu-node-7", "benchd-x7k2p", "0.0.0.0")
    assert (settings.port, settings.http.probe_port) == (8000, 8001)
    assert settings.api_token.get_secret_value() == token and settings.schedules == [] and settings.default_schedule


def test_external_postgresql_and_declared_schedules(helm, tmp_path, monkeypatch):
    docs = render(helm, "external-postgresql")
    variables = env(docs)
    url = "postgresql+psycopg://benchd:s3cret@postgres.databases.svc:5432/benchd"
    assert variables["BENCHD_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "benchd", "key": "database-url"}
    assert secret_data(docs) == {"api-token": "a-token-given-in-values", "database-url": url}
    assert url not in json.dumps([d for d in docs if d["kind"] != "Secret"])  # the password only in the Secret
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert by_kind(docs)[kind][0]["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert variables["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == "http://tempo.monitoring.svc:4317"
    settings = settings_from(docs, tmp_path, monkeypatch)
    assert settings.database_url == url and settings.label == "v1.2.3" and settings.limits.max_requests == 2000
    (schedule,) = settings.schedules
    assert (schedule.name, schedule.interval_s, schedule.spec.model, schedule.spec.workload.stop.requests) == \
        ("nightly-llama", 3600, "llama-3.2-1b", 256)


def test_an_existing_secret_and_reserved_gpus(helm):
    docs = render(helm, "existing-secret")
    kinds = by_kind(docs)
    assert "Secret" not in kinds
    variables = env(docs)
    assert variables["BENCHD_API_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "benchd-credentials", "key": "token"}
    assert variables["BENCHD_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "benchd-credentials",
                                                                             "key": "postgres-url"}
    resources = container(docs)["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == 2 and resources["limits"] == {"memory": "32Gi",
                                                                                    "nvidia.com/gpu": 2}
    assert "NVIDIA_VISIBLE_DEVICES" not in variables  # the device plugin says which GPUs
    # A value the daemon takes: the two GPUs the device plugin gives, as CUDA numbers them in the container.
    assert variables["BENCHD_DEVICES"]["value"] == "cuda:0,cuda:1"
    gpus = [("3", "GPU-a", "H100"), ("5", "GPU-b", "H100")]
    assert [s.gpu for s in resolve(variables["BENCHD_DEVICES"]["value"], gpus)] == ["3", "5"]
    dashboards = [c for c in kinds["ConfigMap"] if c["metadata"]["labels"].get("grafana_dashboard") == "1"]
    assert {c["metadata"]["namespace"] for c in dashboards} == {"monitoring"}
    assert all(c["metadata"]["annotations"] == {"grafana_folder": "benchd"} for c in dashboards)
    text = json.dumps([c["data"] for c in dashboards])
    assert '\\"uid\\": \\"mimir\\"' in text and '\\"uid\\": \\"fleet-runs\\"' in text
    assert '\\"uid\\": \\"prometheus\\"' not in text and '\\"uid\\": \\"benchd-postgres\\"' not in text


def test_cpu_only_runs_anywhere_on_the_cpu(helm, tmp_path, monkeypatch):
    docs = render(helm, "cpu-only")
    spec = by_kind(docs)["DaemonSet"][0]["spec"]["template"]["spec"]
    assert not {"affinity", "tolerations", "runtimeClassName"} & set(spec)
    variables = env(docs)
    assert variables["BENCHD_DEVICE"]["value"] == "cpu"
    assert not {"BENCHD_DEVICES", "NVIDIA_VISIBLE_DEVICES"} & set(variables)
    assert "nvidia" not in json.dumps(container(docs))
    on_the_probe_port(docs, api=8000, probe=8001)
    (monitor,) = by_kind(docs)["PodMonitor"]
    pod_labels = by_kind(docs)["DaemonSet"][0]["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pod_labels[monitor["spec"]["jobLabel"]] == "benchd"
    settings = settings_from(docs, tmp_path, monkeypatch)
    assert settings.device == "cpu" and not settings.default_schedule and settings.schedules[0].name == "tiny-cpu"


def test_a_port_set_before_the_probe_port_keeps_the_api_there(helm, tmp_path, monkeypatch):
    """Values from before the probe port: benchd.port still moves the API; the probes and the scrape stay on the probe
    port, which moves with benchd.probePort."""
    docs = render(helm, None, "--set", "benchd.port=9000")
    on_the_probe_port(docs, api=9000, probe=8001)
    settings = settings_from(docs, tmp_path, monkeypatch)
    assert (settings.port, settings.http.probe_port) == (9000, 8001)
    on_the_probe_port(render(helm, "cpu-only", "--set", "benchd.probePort=9101"), api=8000, probe=9101)


def test_values_that_cannot_work_together_fail_naming_them(helm):
    for args, message in (
        (["--set", "benchd.port=8001"], "benchd.probePort: a port of its own for /metrics and the probes, not "
                                        "benchd.port's (8001)"),
        (["--set", "database.url=postgresql://x", "--set", "database.existingSecret=s"],
         "database: set url or existingSecret, not both"),
        (["--set", "podMonitor.enabled=true"], "serviceMonitor.enabled and podMonitor.enabled: choose one"),
    ):
        done = run_helm(helm, "template", "benchd", str(CHART), *args)
        assert done.returncode != 0 and message in done.stderr, done.stderr


# ---- rules and dashboards: the repository's own files --------------------------------------------


def repository_groups() -> list[dict]:
    return [group for path in sorted((ROOT / "prometheus-rules").glob("*.yml"))
            for group in yaml.safe_load(path.read_text())["groups"]]


def test_the_prometheus_rule_carries_the_repository_rules_and_promtool_accepts_them(helm, tmp_path):
    (rule,) = by_kind(render(helm))["PrometheusRule"]
    assert rule["spec"]["groups"] == repository_groups()
    rendered = tmp_path / "rendered-rules.yml"
    rendered.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    checked = subprocess.run(["promtool", "check", "rules", str(rendered)], capture_output=True, text=True)
    assert checked.returncode == 0 and "SUCCESS" in checked.stdout, checked.stdout + checked.stderr
    # The alerts' unit tests, against the rules as the chart renders them.
    tests = (ROOT / "tests" / "data" / "promtool" / "gpu-health.test.yml").read_text()
    unit = tmp_path / "gpu-health.test.yml"
    unit.write_text(re.sub(r"rule_files:\n(  - .*\n)+", f"rule_files:\n  - {rendered}\n", tests))
    done = subprocess.run(["promtool", "test", "rules", str(unit)], capture_output=True, text=True)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_the_dashboards_are_configmaps_for_grafanas_sidecar(helm):
    configmaps = [c for c in by_kind(render(helm))["ConfigMap"] if "grafana_dashboard" in c["metadata"]["labels"]]
    assert {c["metadata"]["labels"]["grafana_dashboard"] for c in configmaps} == {"1"}
    data = {name: text for c in configmaps for name, text in c["data"].items()}
    committed = {p.name: p.read_text() for p in (ROOT / "grafana" / "dashboards").glob("*.json")}
    assert set(data) == set(committed) == {"benchd-live.json", "benchd-fleet.json", "benchd-history.json"}
    for name, text in data.items():
        assert text == committed[name].rstrip("\n"), name


def test_the_packaged_chart_carries_the_files_it_links(helm, tmp_path):
    """helm package follows files/'s links: the .tgz holds the rules and dashboards themselves, and renders the same
    as the chart's directory."""
    done = run_helm(helm, "package", str(CHART), f"--destination={tmp_path}")
    assert done.returncode == 0, done.stderr
    (packaged,) = tmp_path.glob("benchd-*.tgz")
    with tarfile.open(packaged) as tar:
        members = {m.name: m for m in tar.getmembers()}
        for path in (ROOT / "prometheus-rules").glob("*.yml"):
            member = members[f"benchd/files/prometheus-rules/{path.name}"]
            assert member.isfile() and tar.extractfile(member).read() == path.read_bytes()
        assert {f"benchd/files/dashboards/{p.name}" for p in (ROOT / "grafana/dashboards").glob("*.json")} <= \
            set(members)
    fixed = ["--set", "apiToken.value=same"]
    assert render(helm, None, *fixed, chart=packaged) == render(helm, None, *fixed)
