"""The image and the stack under podman: the CPU image from this Dockerfile, started and checked; benchd,
PostgreSQL and Prometheus from docker-compose.yml under podman-compose with Debian-built images."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests import podman
from tests.helpers import free_port

ROOT = Path(__file__).parents[2]
OPENMETRICS = "application/openmetrics-text; version=1.0.0"

# A spawned worker (as the daemon's engines will be) gets a 32 MiB tensor and sends back another, both through
# /dev/shm: what the image must allow its worker processes. A file, since spawn imports the main module again.
SPAWN_AND_SHARE = """
import torch, torch.multiprocessing as mp

def worker(inbox, outbox, done):
    outbox.put(inbox.get() * 2)
    done.wait(60)  # the receiver takes the tensor's shared memory from this process


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    inbox, outbox, done = ctx.Queue(), ctx.Queue(), ctx.Event()
    process = ctx.Process(target=worker, args=(inbox, outbox, done))
    process.start()
    inbox.put(torch.ones(8 << 20))
    print(int(outbox.get(timeout=120).sum()))
    done.set()
    process.join(60)
    assert process.exitcode == 0, process.exitcode
"""


# Under pytest-xdist every test that builds or starts an image runs on one worker: podman's storage, the base
# image and the tags are shared by the whole host (the chart's pod test carries the same group).
pytestmark = pytest.mark.xdist_group("podman")


def test_the_debian_mirror_is_the_one_apt_uses(tmp_path):
    """deb822 stanzas first (Debian 12's default), then one-line lists; a suite apt does not use has none."""
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text("# deb http://commented.example/debian bookworm main\n"
                                           "deb [arch=amd64] http://list.example/debian bookworm main contrib\n")
    assert podman.debian_mirror("bookworm", tmp_path) == "http://list.example/debian"
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n"
        "Components: main\n")
    assert podman.debian_mirror("bookworm", tmp_path) == "http://mirror.example/debian"
    assert podman.debian_mirror("trixie", tmp_path) is None


def until(condition, timeout_s: float, what: str, container: str) -> None:
    """Polls `condition`; fails with the container's last logs when it stops or time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition():
                return
        except httpx.TransportError:
            pass
        state = podman.podman("inspect", "--format={{.State.Status}}", container, check=False).stdout.strip()
        if state != "running" or time.monotonic() > deadline:
            logs = podman.podman("logs", "--tail=40", container, check=False)
            raise AssertionError(f"{what}: gave up, container {state or 'gone'}\n{logs.stdout}{logs.stderr}")
        time.sleep(0.5)


def first_default_run(http: httpx.Client, container: str) -> dict:
    """The default schedule's first run, once it has finished."""
    found = {}

    def finished() -> bool:
        items = http.get("/runs", params={"schedule": "default", "limit": 100}).json()["items"]
        done = [r for r in items if r["status"] in ("succeeded", "failed", "cancelled", "interrupted")]
        found.update(done[-1] if done else {})
        return bool(done)

    until(finished, 180, "the default schedule's first run", container)
    assert found["status"] == "succeeded", found
    return found


def healthy(container: str) -> None:
    """The health check the container was given (the image's, or the compose file's) passes inside it."""
    done = podman.podman("healthcheck", "run", container, check=False)
    assert done.returncode == 0, f"{container}: {done.stdout}{done.stderr}"


def health_check_with(container: str, **variables: str) -> int:
    """The container's health check command run in it with some of its variables changed: its exit status."""
    check = json.loads(podman.podman("inspect", "--format={{json .Config.Healthcheck}}", container).stdout)
    assert check["Test"][0] == "CMD", check
    changed = [f"--env={key}={value}" for key, value in variables.items()]
    return podman.podman("exec", *changed, container, *check["Test"][1:], check=False).returncode


@pytest.mark.timeout(1200)  # a cold start: debootstrap, then the image's build (about 2.5 minutes here)
def test_the_image_starts_serves_and_stops_cleanly(benchd_image):
    """On a read-only root with a volume on its home, and on ports other than 8000 and 8001, which the health check
    must follow: it asks the probe listener's port, and Prometheus' /metrics answers there."""
    port, probe_port, name = free_port(), free_port(), f"benchd-image-test-{os.getpid()}"
    home = f"{name}-home"
    podman.podman("run", "--detach", f"--name={name}", "--network=host", "--read-only",
                  f"--volume={home}:/home/benchd", "--env=BENCHD_HOST=127.0.0.1", f"--env=BENCHD_PORT={port}",
                  f"--env=BENCHD_HTTP__PROBE_PORT={probe_port}", benchd_image)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http, \
                httpx.Client(base_url=f"http://127.0.0.1:{probe_port}", timeout=10) as probes:
            until(lambda: probes.get("/readyz").status_code == 200, 180, "/readyz on the probe port", name)
            run = first_default_run(http, name)
            assert probes.get("/runs").status_code == 404  # the probe listener: /metrics, /healthz, /readyz alone

            metrics = probes.get("/metrics", headers={"Accept": OPENMETRICS})
            assert metrics.headers["content-type"].startswith("application/openmetrics-text")
            assert metrics.text.endswith("# EOF\n")
            exemplars = re.findall(r'^benchd_time_to_first_token_seconds_bucket\{.*\} \S+ # \{(.*)\} \S+',
                                   metrics.text, re.MULTILINE)
            assert any(f'run_id="{run["id"]}"' in labels for labels in exemplars), exemplars[:3]

        healthy(name)
        # The image's check asks the probe port: it passes with the API's port variable wrong, fails with its own.
        assert health_check_with(name, BENCHD_PORT="1") == 0
        assert health_check_with(name, BENCHD_HTTP__PROBE_PORT=str(free_port())) != 0
        status = podman.podman("exec", name, "cat", "/proc/1/status").stdout
        uids = re.search(r"^Uid:\s+(.*)$", status, re.MULTILINE)
        assert set(uids.group(1).split()) == {"10001"}  # real, effective, saved and filesystem ids of PID 1
        workers = podman.podman("exec", "--interactive", name, "sh", "-c",
                                "cat > /tmp/spawn_and_share.py && exec python3 /tmp/spawn_and_share.py",
                                input=SPAWN_AND_SHARE, timeout=300)
        assert workers.stdout.split() == [str(2 << 23)], workers.stderr

        stopping = time.monotonic()
        podman.podman("stop", "--time=30", name)
        state = json.loads(podman.podman("inspect", "--format={{json .State}}", name).stdout)
        assert state["ExitCode"] == 0 and time.monotonic() - stopping < 30, state  # SIGTERM, not SIGKILL
        logs = podman.podman("logs", name)
        assert "Application shutdown complete" in logs.stdout + logs.stderr
    finally:
        podman.podman("rm", "--force", name, check=False)
        podman.podman("volume", "rm", "--force", home, check=False)


# ---- the stack --------------------------------------------------------------------------------------------

# Only the images change: the compose file's networks, ports, volumes, variables and health checks stay.
# Leaving Grafana and Tempo out takes a profile no one enables and benchd's wait for Tempo.
OVERRIDE = """
services:
  benchd:
    image: {benchd}
    deploy: !reset {{}}
    depends_on: !override [postgres]
  postgres:
    image: {postgres}
  prometheus:
    image: {prometheus}
  tempo:
    profiles: [left-out]
  grafana:
    profiles: [left-out]
"""


@pytest.fixture(scope="module")
def stack_images(base, benchd_image) -> dict[str, str]:
    """Debian's PostgreSQL 15 and Prometheus 2.42 in place of the registry's images."""
    images = {name: podman.build(f"localhost/benchd-test-{name}", podman.IMAGES / name, BASE_IMAGE=base)
              for name in ("postgres", "prometheus")}
    return {"benchd": benchd_image, **images}


class Stack:
    """docker-compose.yml and the test override under podman-compose, as one project."""

    def __init__(self, tmp_path: Path, images: dict[str, str]) -> None:
        self.project = f"benchd-stack-test-{os.getpid()}"
        self.override = tmp_path / "compose.test.yml"
        self.override.write_text(OVERRIDE.format(**images))
        self.ports = {"benchd": free_port(), "prometheus": free_port()}
        # As typed: no password or address variable, only the two published ports moved off the defaults.
        unset = ("POSTGRES_PASSWORD", "GRAFANA_ADMIN_PASSWORD", "BIND_ADDRESS", "BENCHD_MODEL")
        self.env = {key: value for key, value in podman.environment().items() if key not in unset}
        self.env |= {"BENCHD_PORT": str(self.ports["benchd"]),
                     "PROMETHEUS_PORT": str(self.ports["prometheus"])}

    def compose(self, *args: str) -> None:
        command = [str(Path(sys.executable).parent / "podman-compose"), f"--project-name={self.project}",
                   f"--file={ROOT / 'docker-compose.yml'}", f"--file={self.override}", *args]
        done = subprocess.run(command, check=False, cwd=ROOT, env=self.env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, f"podman-compose {' '.join(args)}:\n{done.stdout}\n{done.stderr}"

    def containers(self) -> dict[str, str]:
        listed = podman.podman("ps", "--all", f"--filter=label=io.podman.compose.project={self.project}",
                               "--format=json").stdout
        return {c["Labels"]["com.docker.compose.service"]: c["Names"][0] for c in json.loads(listed or "[]")}

    def published(self, container: str) -> list[dict]:
        inspected = podman.podman("inspect", "--format={{json .NetworkSettings.Ports}}", container)
        ports = json.loads(inspected.stdout)
        return [binding for bindings in (ports or {}).values() for binding in bindings or []]

    def psql(self, query: str) -> str:
        postgres = self.containers()["postgres"]
        done = podman.podman("exec", postgres, "psql", "--username=benchd", "--dbname=benchd", "-Atc", query)
        return done.stdout.strip()


def prometheus_api(port: int, path: str, **params) -> dict:
    body = httpx.get(f"http://127.0.0.1:{port}/api/v1/{path}", params=params, timeout=10).json()
    assert body["status"] == "success", body
    return body["data"]


def check_prometheus(port: int, container: str) -> None:
    """Prometheus scrapes benchd in its container by the service's name, on the probe port (the image's 8001, not
    published), and evaluates every rule: alerts and recording rules, each recording rule with data."""

    def scraped() -> bool:
        targets = prometheus_api(port, "targets")["activeTargets"]
        return [(t["scrapeUrl"], t["health"]) for t in targets] == [("http://benchd:8001/metrics", "up")]

    until(scraped, 60, "Prometheus to scrape benchd", container)
    files = (ROOT / "prometheus-rules").glob("*.yml")
    groups = [group for path in files for group in yaml.safe_load(path.read_text())["groups"]]
    records = [rule["record"] for group in groups for rule in group["rules"] if "record" in rule]

    def evaluated() -> bool:
        rules = [r for g in prometheus_api(port, "rules")["groups"] for r in g["rules"]]
        assert all(r["health"] != "err" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
        return len(rules) > len(records) and all(r["health"] == "ok" for r in rules) and \
            all(prometheus_api(port, "query", query=record)["result"] for record in records)

    until(evaluated, 120, "every rule evaluated, every recording rule with data", container)
    assert prometheus_api(port, "query", query='ALERTS{alertname="BenchdDown"}')["result"] == []


@pytest.mark.timeout(900)
def test_the_stack_runs_under_podman_compose(tmp_path, stack_images):
    stack = Stack(tmp_path, stack_images)
    benchd = httpx.Client(base_url=f"http://127.0.0.1:{stack.ports['benchd']}", timeout=10)

    def ready() -> bool:
        return benchd.get("/readyz").status_code == 200

    try:
        stack.compose("up", "--detach")
        containers = stack.containers()
        assert set(containers) == {"benchd", "postgres", "prometheus"}
        # Published on loopback only; PostgreSQL not at all.
        for service in ("benchd", "prometheus"):
            assert stack.published(containers[service]) == [
                {"HostIp": "127.0.0.1", "HostPort": str(stack.ports[service])}], service
        assert stack.published(containers["postgres"]) == []

        until(ready, 180, "benchd's /readyz", containers["benchd"])
        run = first_default_run(benchd, containers["benchd"])
        for container in containers.values():  # the image's check for benchd, the compose file's for the rest
            healthy(container)
        check_prometheus(stack.ports["prometheus"], containers["prometheus"])

        # The run is in the PostgreSQL container, and stays there across down and up (named volumes).
        assert stack.psql(f"SELECT status FROM runs WHERE id = '{run['id']}'") == "succeeded"
        assert stack.psql("SHOW server_encoding") == "UTF8"
        # Scraped since the run ended (a scrape from before it has no runs counter): there is a sample to keep
        until(lambda: prometheus_api(stack.ports["prometheus"], "query", query="benchd_runs_total")["result"], 60,
              "Prometheus to scrape the run's counter", containers["prometheus"])
        before_down = time.time()
        stack.compose("down")
        assert stack.containers() == {}
        stack.compose("up", "--detach")
        containers = stack.containers()
        until(ready, 180, "benchd's /readyz after down and up", containers["benchd"])
        assert benchd.get(f"/runs/{run['id']}").json()["status"] == "succeeded"
        query = {"query": "benchd_runs_total", "time": before_down}
        until(lambda: prometheus_api(stack.ports["prometheus"], "query", **query)["result"], 60,
              "Prometheus' samples from before down", containers["prometheus"])
    finally:
        benchd.close()
        stack.compose("down", "--volumes")
