"""The Helm chart's rendered pod started for real by podman kube play with the CPU image: the probes and the scrape on
the probe port, the node and pod names, the token from the Secret, a declared schedule's runs."""

import copy
import json
import os
import re

import httpx
import pytest
import yaml

from tests import podman
from tests.deploy.helpers import PROBES, by_kind, container, render
from tests.deploy.test_image import until
from tests.helpers import free_port

# ---- the pod, for real ---------------------------------------------------------------------------


def as_pod(docs: list[dict], image: str, node: str, host_ports: dict[str, int]) -> dict:
    """The DaemonSet's pod template as a Pod of the image under test, each of its ports published on the host port
    host_ports gives by its name (where the test reaches it, as a kubelet's probes reach the pod's). podman 4.3
    resolves the downward API's metadata.name but not spec.nodeName: the node's name stands in for it, as the kubelet
    fills it. It also makes each emptyDir a named volume of the volume's own name, which every pod would share and
    which outlives the pod: each is named after the release here (a kubelet's emptyDir is the pod's own)."""
    (daemonset,) = by_kind(docs)["DaemonSet"]
    release = daemonset["metadata"]["name"]
    template = copy.deepcopy(daemonset["spec"]["template"])
    spec = template["spec"]
    renamed = {v["name"]: f"{release}-{v['name']}" for v in spec["volumes"] if "emptyDir" in v}
    for volume in spec["volumes"]:
        volume["name"] = renamed.get(volume["name"], volume["name"])
    for each in spec["containers"] + spec.get("initContainers", []):
        for mount in each.get("volumeMounts", []):
            mount["name"] = renamed.get(mount["name"], mount["name"])
    (benchd,) = spec["containers"]
    benchd["image"], benchd["imagePullPolicy"] = image, "Never"
    replaced = 0
    for entry in benchd["env"]:
        if entry.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
            entry.pop("valueFrom")
            entry["value"] = node
            replaced += 1
    assert replaced == 1
    assert {p["name"] for p in benchd["ports"]} == set(host_ports)
    for port in benchd["ports"]:
        port["hostPort"] = host_ports[port["name"]]
    name = daemonset["metadata"]["name"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-pod", "labels": template["metadata"]["labels"]}, "spec": spec}


KUBE_RELEASE = "benchd-kube-"  # + the test process's pid


def clear_killed_runs() -> None:
    """What a run of the test below that was killed before its cleanup left: its pod (still serving, its schedule
    still running on this machine's cores), its secret and its volumes, found by the pid in their name."""
    def dead(name: str) -> bool:
        pid = re.match(rf"{KUBE_RELEASE}(\d+)", name)
        if pid is None:
            return False
        try:
            os.kill(int(pid[1]), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    for kind, remove in (("pod", ("pod", "rm", "--force")), ("secret", ("secret", "rm")),
                         ("volume", ("volume", "rm", "--force"))):
        names = podman.podman(kind, "ls", "--format", "{{.Name}}", check=False).stdout.split()
        left = [name for name in names if dead(name)]
        if left:
            podman.podman(*remove, *left, check=False)


@pytest.mark.timeout(900)
@pytest.mark.xdist_group("podman")
def test_the_rendered_pod_runs_under_podman(helm, benchd_image, tmp_path):
    """The CPU values' pod spec, as rendered, started by podman kube play: the probes answer on their port and paths,
    and the PodMonitor's /metrics on its port, both the probe listener's, not the API's; the node and pod names reach
    the series and the stored runs, the token from the Secret guards the API, a declared schedule runs, and only the
    volumes are written."""
    clear_killed_runs()
    release, token, node = f"{KUBE_RELEASE}{os.getpid()}", "kube-play-token", "gpu-node-7"
    docs = render(helm, "cpu-only", "--set", f"apiToken.value={token}", release=release)
    host_ports = {p["name"]: free_port() for p in container(docs)["ports"]}
    pod = as_pod(docs, benchd_image, node, host_ports)
    volumes = [v["name"] for v in pod["spec"]["volumes"] if "emptyDir" in v]
    pod_file, configmap_file = tmp_path / "pod.yaml", tmp_path / "configmap.yaml"
    pod_file.write_text(yaml.safe_dump(pod))
    (config,) = [c for c in by_kind(docs)["ConfigMap"] if "config.yaml" in c["data"]]
    configmap_file.write_text(yaml.safe_dump(config))
    (secret,) = by_kind(docs)["Secret"]
    name = pod["metadata"]["name"]
    benchd = f"{name}-benchd"
    # podman 4.3 reads a secretKeyRef from a podman secret holding the Secret's data as JSON (its kube play of a
    # Secret stores another format, which its env lookup cannot read: podman issue 16269).
    podman.podman("secret", "create", secret["metadata"]["name"], "-", input=json.dumps(secret["data"]))
    try:
        podman.podman("kube", "play", f"--configmap={configmap_file}", str(pod_file))
        # Each probe, and the scrape, where the rendered manifests send them: the container port they name.
        probes = {kind: container(docs)[kind]["httpGet"] for kind in PROBES}
        (endpoint,) = by_kind(docs)["PodMonitor"][0]["spec"]["podMetricsEndpoints"]

        def ask(port_name: str, path: str) -> httpx.Response:
            return httpx.get(f"http://127.0.0.1:{host_ports[port_name]}{path}", timeout=10)

        def probe(kind: str) -> httpx.Response:
            return ask(probes[kind]["port"], probes[kind]["path"])

        with httpx.Client(base_url=f"http://127.0.0.1:{host_ports['http']}", timeout=10) as http:
            until(lambda: probe("livenessProbe").status_code == 200, 120, "liveness", benchd)
            until(lambda: probe("readinessProbe").status_code == 200, 180, "readiness", benchd)
            assert probe("startupProbe").json() == {"status": "ok"}
            # The probe listener answers them, apart from the API: it serves no /runs.
            assert {probes[kind]["port"] for kind in PROBES} == {endpoint["port"]} != {"http"}
            assert ask(endpoint["port"], "/runs").status_code == 404 and http.get("/runs").status_code == 200
            printed = podman.podman("exec", benchd, "printenv", "BENCHD_NODE_NAME", "BENCHD_POD_NAME").stdout
            assert printed.split() == [node, name]

            assert http.post("/runs", json={"name": "x"}).status_code == 401
            assert http.delete("/schedules/tiny-cpu").status_code == 401
            created = http.post("/runs", headers={"Authorization": f"Bearer {token}"}, json={
                "name": "by-hand", "device": "cpu", "workload": {"stop": {"requests": 2}}})
            assert created.status_code == 202, created.text

            found = {}

            def scheduled_run_done() -> bool:
                items = http.get("/runs", params={"schedule": "tiny-cpu"}).json()["items"]
                found.update(items[-1] if items else {})
                return found.get("status") in ("succeeded", "failed", "cancelled", "interrupted")

            until(scheduled_run_done, 180, "the declared schedule's first run", benchd)
            assert found["status"] == "succeeded", found
            assert (found["node"], found["pod"], found["workload"]) == (node, name, "tiny-fleet")
            metrics = ask(endpoint["port"], endpoint["path"]).text
            assert re.search(rf'^benchd_runs_total\{{.*hostname="{node}".*workload="tiny-fleet".*\}} 1\.0$', metrics,
                             re.MULTILINE), metrics[:2000]
        user = podman.podman("exec", benchd, "id", "-u").stdout.strip()
        assert user == "10001"
        assert podman.podman("exec", benchd, "touch", "/opt/venv/x", check=False).returncode != 0  # read-only root
        written = podman.podman("exec", benchd, "ls", "/var/lib/benchd").stdout.split()
        assert {"benchd.db", "spool", "workers"} <= set(written)
    finally:
        podman.podman("kube", "down", str(pod_file), check=False)
        podman.podman("secret", "rm", secret["metadata"]["name"], check=False)
        podman.podman("volume", "rm", "--force", config["metadata"]["name"], *volumes, check=False)  # + ConfigMap's
