"""The monitoring stack: the compose files against the Compose specification, Prometheus' own checks, the
dashboards' structure, and end to end: benchd (tiny model, a PostgreSQL store, spans to an OTLP receiver, an
NVML stand-in) scraped by a real Prometheus using prometheus.yml; every PromQL expression of the live
dashboard and every recording rule must return data, the TTFT histogram must carry trace-id exemplars, and every
SQL query of the history dashboard must return rows from benchd's store."""

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
import yaml

from benchd.api import create_app
from benchd.daemon.settings import Settings
from tests.fake_nvml import FakeGPU, FakeNVML
from tests.hardware.helpers import reader
from tests.helpers import LiveServer, free_port, prometheus_query, spec, wait_for
from tests.otlp import HTTPReceiver

ROOT = Path(__file__).parents[2]
DASHBOARDS = ROOT / "grafana" / "dashboards"
RULES = ROOT / "prometheus-rules"


def compose_schema() -> dict:
    import check_jsonschema

    path = Path(check_jsonschema.__file__).parent / "builtin_schemas" / "vendor" / "compose-spec.json"
    return json.loads(path.read_text())


# ---- static checks -------------------------------------------------------------------------------


def test_compose_file_validates_against_the_compose_specification():
    executable = Path(sys.executable).parent / "check-jsonschema"  # installed with the test extras, beside python
    done = subprocess.run([str(executable), "--builtin-schema",
                           "vendor.compose-spec", str(ROOT / "docker-compose.yml")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_compose_file_requirements():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"benchd", "postgres", "prometheus", "tempo", "grafana"}
    gpu = services["benchd"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["driver"] == "nvidia" and gpu["capabilities"] == ["gpu"]
    for name, service in services.items():
        # benchd's health check is the image's (the Dockerfile's HEALTHCHECK), so it follows BENCHD_PORT.
        assert ("healthcheck" in service) == (name != "benchd"), name
        for dependency in service.get("depends_on", {}).values():
            assert dependency == {"condition": "service_healthy"}, name
    assert any(kind == "HEALTHCHECK" for kind, _ in dockerfile())
    # Every store on a named volume.
    mounts = {name: [v.split(":")[0] for v in s.get("volumes", [])] for name, s in services.items()}
    for name, store in (("postgres", "postgres-data"), ("prometheus", "prometheus-data"), ("tempo", "tempo-data"),
                        ("grafana", "grafana-data")):
        assert store in mounts[name] and store in compose["volumes"], name
    assert "--enable-feature=exemplar-storage" in services["prometheus"]["command"]
    # Worker processes: an init that reaps and forwards signals, shared memory beyond the default 64 MB.
    assert services["benchd"]["init"] is True and services["benchd"]["shm_size"]


def test_compose_is_safe_as_typed():
    """`docker compose up` needs no variable; what it publishes listens on loopback unless BIND_ADDRESS says
    otherwise; PostgreSQL is reachable on the stack's network only, so its default password exposes nothing;
    Grafana shows the dashboards read-only to anyone and keeps editing for its admin."""
    text = (ROOT / "docker-compose.yml").read_text()
    assert ":?" not in text  # no required variable
    services = yaml.safe_load(text)["services"]
    published = {name: s["ports"] for name, s in services.items() if "ports" in s}
    assert set(published) == {"benchd", "prometheus", "grafana"}
    for name, ports in published.items():
        for port in ports:
            assert re.fullmatch(r"\$\{BIND_ADDRESS:-127\.0\.0\.1\}:\$\{\w+_PORT:-\d+\}:\d+", port), (name, port)
    assert not any("network_mode" in s for s in services.values())
    # One PostgreSQL password, the variable's or the default, everywhere it is used; no literal secret.
    used = re.findall(r"\$\{POSTGRES_PASSWORD[^}]*\}", text)
    assert len(used) == 3 and set(used) == {"${POSTGRES_PASSWORD:-benchd}"}
    for line in text.splitlines():
        if re.search(r"PASSWORD\s*:", line.split("#")[0]):
            assert "${" in line, line
    grafana = services["grafana"]["environment"]
    assert grafana["GF_AUTH_ANONYMOUS_ENABLED"] == "true" and grafana["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    # Grafana's own default, which it asks to change at the first login.
    assert grafana["GF_SECURITY_ADMIN_PASSWORD"] == "${GRAFANA_ADMIN_PASSWORD:-admin}"


def test_the_cpu_override_validates_and_drops_the_gpu():
    """Compose's `!reset` tag is not YAML the schema validator reads: it is resolved here as Compose does."""
    import jsonschema

    class Loader(yaml.SafeLoader):
        pass

    reset = object()
    Loader.add_constructor("!reset", lambda loader, node: reset)
    override = yaml.load((ROOT / "compose.cpu.yml").read_text(), Loader=Loader)
    benchd = override["services"]["benchd"]
    assert benchd.pop("deploy") is reset
    assert benchd["build"]["args"]["BASE_IMAGE"] == "ubuntu:24.04"
    jsonschema.validate(override, compose_schema())


def parsed_dockerfile():
    from dockerfile_parse import DockerfileParser

    return DockerfileParser(path=str(ROOT / "Dockerfile"))


def dockerfile() -> list[tuple[str, str]]:
    return [(i["instruction"], i["value"]) for i in parsed_dockerfile().structure if i["instruction"] != "COMMENT"]


def test_dockerfile():
    instructions = dockerfile()
    kinds = [kind for kind, _ in instructions]
    assert instructions[0][0] == "ARG" and instructions[0][1].startswith("BASE_IMAGE=")
    assert ("FROM", "${BASE_IMAGE}") in instructions
    # Dependencies are installed from pyproject.toml alone, before the sources are copied; benchd is built from
    # a fresh copy of them and nothing of the build stays (tests/deploy/test_image.py starts what this builds).
    copies = [value for kind, value in instructions if kind == "COPY"]
    assert copies == ["pyproject.toml /tmp/benchd/", "pyproject.toml README.md /tmp/benchd/", "src /tmp/benchd/src"]
    first_install = next(i for i, (kind, value) in enumerate(instructions) if kind == "RUN" and "pip install" in value)
    assert first_install < kinds.index("COPY", kinds.index("COPY") + 1)
    assert "rm -rf /tmp/benchd" in instructions[kinds.index("RUN", kinds.index("COPY", first_install))][1]
    # A numeric user other than root, so that Kubernetes' runAsNonRoot can check it.
    user = next(value for kind, value in instructions if kind == "USER")
    assert re.fullmatch(r"\d+(:\d+)?", user) and int(user.split(":")[0]) != 0
    # The API on 8000, and the probe listener on 8001 (/metrics, /healthz, /readyz: what Prometheus and the health
    # check ask); the health check follows the variable (tests/deploy/test_image.py runs it on other ports).
    variables = parsed_dockerfile().envs
    assert (variables["BENCHD_PORT"], variables["BENCHD_HTTP__PROBE_PORT"]) == ("8000", "8001")
    assert ("EXPOSE", "8000 8001") in instructions
    healthcheck = next(value for kind, value in instructions if kind == "HEALTHCHECK")
    assert "/healthz" in healthcheck and "os.environ['BENCHD_HTTP__PROBE_PORT']" in healthcheck
    assert "BENCHD_PORT" not in healthcheck and "8000" not in healthcheck and "8001" not in healthcheck
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {"build", "**/*.egg-info", ".git"} <= set(ignored)


def test_the_cuda_image_is_the_stack_the_gpu_benchmarks_ran_on():
    """torch, its CUDA build, transformers and Python as docs/benchmarks.md and its history record them for the GPU
    runs."""
    pages = [ROOT / "docs" / "benchmarks.md", *sorted((ROOT / "docs" / "benchmarks").glob("*.md"))]
    ran = {found for page in pages for found in re.findall(
        r"torch (\d+\.\d+\.\d+)\+cu(\d+), transformers (\d+\.\d+\.\d+), Python (\d+\.\d+)", page.read_text())}
    assert len(ran) == 1, ran  # one stack for every GPU table
    torch, cuda, transformers, python = ran.pop()
    args = dict(value.split("=", 1) for kind, value in dockerfile() if kind == "ARG")
    assert args["TORCH_VERSION"] == torch and args["TRANSFORMERS_VERSION"] == transformers
    assert args["TORCH_INDEX"] == f"https://download.pytorch.org/whl/cu{cuda}"
    # The base declares the same CUDA (the driver requirement) on Ubuntu 24.04, whose python3 is 3.12.
    base = re.fullmatch(r"nvidia/cuda:(\d+)\.(\d+)\.\d+-base-ubuntu(\d+\.\d+)", args["BASE_IMAGE"])
    assert base and base.group(1) + base.group(2) == cuda, args["BASE_IMAGE"]
    assert {"24.04": "3.12"}[base.group(3)] == python
    assert re.search(r"NVIDIA driver.{0,40}580", (ROOT / "README.md").read_text(), re.DOTALL)


def test_promtool_checks_the_config_and_rules():
    config = subprocess.run(["promtool", "check", "config", str(ROOT / "prometheus.yml")],
                            capture_output=True, text=True)
    assert config.returncode == 0, config.stdout + config.stderr
    for path in RULES.glob("*.yml"):  # the config's rule_files pattern finds every rule file
        assert f"{RULES.name}/{path.name}" in config.stdout, config.stdout
    rules = subprocess.run(["promtool", "check", "rules", *map(str, RULES.glob("*.yml"))],
                           capture_output=True, text=True)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    # benchd's probe port, by the compose service's name.
    (job,) = yaml.safe_load((ROOT / "prometheus.yml").read_text())["scrape_configs"]
    assert job["static_configs"] == [{"targets": ["benchd:8001"]}] and job["metrics_path"] == "/metrics"


def test_alerts_fire_per_node_and_gpu_on_what_they_name():
    """promtool's rule unit tests (tests/data/promtool): the GPU-health alerts on XIDs (a code's first event
    included), uncorrectable ECC errors, row remapping and a stalled sampler, throttling on two nodes as two
    alerts, and a slow GPU on one of two nodes (its description reading that node's relative throughput); a change
    point for the worse, and a regression against a pinned baseline beside it."""
    tests = sorted((ROOT / "tests" / "data" / "promtool").glob("*.test.yml"))
    assert tests
    done = subprocess.run(["promtool", "test", "rules", *map(str, tests)], capture_output=True, text=True)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def dashboards() -> dict[str, dict]:
    return {path.name: json.loads(path.read_text()) for path in sorted(DASHBOARDS.glob("*.json"))}


def generator():
    """grafana/dashboards.py, which writes the dashboards."""
    import importlib.util

    loaded = importlib.util.spec_from_file_location("dashboards", ROOT / "grafana" / "dashboards.py")
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module


def test_dashboards_are_what_the_generator_writes():
    module = generator()
    for name, build in module.DASHBOARDS.items():
        assert (DASHBOARDS / name).read_text() == module.render(build), "run python grafana/dashboards.py"


def test_dashboards_are_well_formed():
    found = dashboards()
    assert set(found) == {"benchd-live.json", "benchd-fleet.json", "benchd-history.json"}
    uids = [d["uid"] for d in found.values()]
    assert len(set(uids)) == len(uids)
    provisioned = yaml.safe_load((ROOT / "grafana/provisioning/datasources/benchd.yml").read_text())
    datasources = {d["uid"] for d in provisioned["datasources"]}
    assert datasources == {"prometheus", "tempo", "benchd-postgres"}
    prometheus = next(d for d in provisioned["datasources"] if d["uid"] == "prometheus")
    assert prometheus["jsonData"]["exemplarTraceIdDestinations"] == [{"name": "trace_id", "datasourceUid": "tempo"}]
    for name, dashboard in found.items():
        ids = [p["id"] for p in dashboard["panels"]]
        assert len(set(ids)) == len(ids), name
        for panel in dashboard["panels"]:
            assert panel["datasource"]["uid"] in datasources, (name, panel["title"])
            assert panel["targets"], (name, panel["title"])
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == panel["datasource"]["uid"], (name, panel["title"])
        for variable in dashboard["templating"]["list"]:
            assert variable["datasource"]["uid"] in datasources
    live = found["benchd-live.json"]
    latency = [p for p in live["panels"] if (p["fieldConfig"]["defaults"]["unit"] == "s" and "latency" in
               p["title"].lower()) or "first token" in p["title"]]
    assert latency and all(any(t["exemplar"] for t in p["targets"]) for p in latency)


# ---- end to end ----------------------------------------------------------------------------------


def promql(expr: str) -> str:
    """A dashboard expression with Grafana's variables as "All", the rate interval at a minute and the dashboard's
    range at ten."""
    for name in ("model", "workload", "gpu", "node", "cluster"):
        expr = expr.replace(f'"${name}"', '".*"')
    return expr.replace("$__rate_interval", "1m").replace("$__range", "10m")


# The one merge of nodes a dashboard makes on purpose: the distribution of each node's place across the nodes of a GPU
# model (the fleet dashboard's quantiles over benchd_fleet_node_value).
ACROSS_NODES = re.compile(r"^quantile by \(device\) \(0\.\d+, benchd_fleet_node_value\{[^}]*\}\)$")


def test_dashboards_keep_the_nodes_apart():
    """A fleet's nodes never merge: every Prometheus selector keeps to the chosen nodes and every aggregation keeps
    hostname, but for the fleet's distribution across nodes; the history filters by node."""
    found = dashboards()
    for name in ("benchd-live.json", "benchd-fleet.json"):
        expressions = [t["expr"] for p in found[name]["panels"] for t in p["targets"]]
        for expr in expressions:
            assert 'hostname=~"$node"' in expr, (name, expr)
            if ACROSS_NODES.match(expr):
                continue
            for clause in re.findall(r"\b(?:by|on) \(([^)]*)\)", expr):
                assert "hostname" in clause.split(", "), (name, expr)
        assert [v["name"] for v in found[name]["templating"]["list"]].count("node") == 1
    assert sum(bool(ACROSS_NODES.match(t["expr"])) for p in found["benchd-fleet.json"]["panels"]
               for t in p["targets"]) == 3
    fleet = {v["name"]: v for v in found["benchd-fleet.json"]["templating"]["list"]}
    assert list(fleet) == ["cluster", "node", "workload"] and not fleet["workload"]["multi"]
    history = found["benchd-history.json"]
    queries = [t["rawSql"] for p in history["panels"] for t in p["targets"]]
    assert all("r.node IN ($node)" in q for q in queries)


def sql(query: str, nodes: list[str], models: list[str], workloads: list[str]) -> str:
    """A history query with Grafana's macros and multi-value variables expanded as Grafana does."""
    def quoted(values: list[str]) -> str:
        return ", ".join("'" + v.replace("'", "''") + "'" for v in values)

    query = re.sub(r"\$__timeFilter\(([^)]+)\)",
                   r"\1 BETWEEN now() - interval '1 day' AND now() + interval '1 day'", query)
    return query.replace("$node", quoted(nodes)).replace("$model", quoted(models)) \
        .replace("$workload", quoted(workloads))


@pytest.mark.timeout(600)
def test_live_and_history_dashboards_against_real_prometheus_and_postgresql(tmp_path, postgres_url, monkeypatch):
    with HTTPReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")
        probe_port = free_port()  # the probe listener's: what prometheus.yml scrapes
        # Two CPU workers: a run on every "GPU" feeds the per-GPU panels.
        settings = Settings(database_url=postgres_url, device="cpu", dtype="float32", default_schedule=False,
                            hardware_interval_s=0.2, node_name="e2e-node", devices=["cpu:0", "cpu:1"],
                            spool_dir=str(tmp_path / "spool"), workers={"log_dir": str(tmp_path / "workers")},
                            http={"probe_port": probe_port})
        gpu = FakeGPU("GPU-e2e-0", nvlink_kib={0: (1 << 20, 2 << 20), 1: (3 << 20, 4 << 20)})
        nvml = FakeNVML([gpu])
        app = create_app(settings, hardware_reader=lambda: reader(gpu, nvml=nvml))
        with LiveServer(app) as server:
            server.wait_ready()
            # No XID: the XID panels read 0 (every code together), not "no data", as on a healthy GPU.
            # This repository's prometheus.yml and rules, laid out as compose mounts them, the target pointed at
            # the live daemon's probe port.
            config_dir = tmp_path / "prometheus"
            shutil.copytree(RULES, config_dir / RULES.name)
            config = config_dir / "prometheus.yml"
            loaded = yaml.safe_load((ROOT / "prometheus.yml").read_text())
            (target,) = loaded["scrape_configs"][0]["static_configs"]
            assert target == {"targets": ["benchd:8001"]}
            # And a cluster label on the target, as a multi-cluster setup (Thanos, Mimir) gives every series.
            target.update(targets=[f"127.0.0.1:{probe_port}"], labels={"cluster": "e2e"})
            config.write_text(yaml.safe_dump(loaded))
            port = free_port()
            prometheus = subprocess.Popen(
                ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{port}", "--enable-feature=exemplar-storage"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            api = f"http://127.0.0.1:{port}/api/v1"
            try:
                # Traffic all along: a short workload back to back, and a second workload once.
                server.http.post("/schedules", json={"name": "live", "spec": spec(requests=8, output=6),
                                                     "interval_s": 0.5})
                server.http.post("/runs", json=spec(requests=6, output=4, name="other"))
                server.http.post("/runs", json={**spec(requests=6, output=4, name="fleet"), "placement": "every_gpu",
                                                "decide": {"max_rounds": 30}})  # its rounds bounded, beside the rest
                # A short capacity search (two probes up to max_rate) feeds the capacity panel.
                search = spec(duration=0.5, output=4, name="capacity")
                search["workload"].update({"arrivals": {"profile": "capacity", "start_rate": 2, "max_rate": 4},
                                           "slo": {"e2e_p99_s": 30}})
                assert server.http.post("/runs", json=search).status_code == 202
                # A matrix of two variants feeds the variants' panels.
                matrix = server.http.post("/matrices", json={**spec(requests=4, output=4, name="ab"), "repeats": 1,
                                                             "matrix": {"attn_implementation": ["sdpa", "eager"]}})
                assert matrix.status_code == 202, matrix.text
                started = time.time()

                def query(expr: str) -> list:
                    return prometheus_query(api, expr)

                rules = [rule["record"] for path in RULES.glob("*.yml")
                         for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]
                         if "record" in rule]
                assert len(rules) >= 13
                wait_for(lambda: all(query(rule) for rule in rules), 180, "every recording rule to return data")

                # Every expression of the live and fleet dashboards returns data (the run on every "GPU" feeds
                # the slow-GPU verdicts).
                # (Change points need a history that changed: tests/daemon/test_history_live.py queries that panel;
                # a node's place in the fleet needs other nodes: tests/daemon/test_fleet.py queries those.)
                expressions = [t["expr"] for name in ("benchd-live.json", "benchd-fleet.json")
                               for p in dashboards()[name]["panels"] for t in p["targets"]
                               if "benchd_change_point" not in t["expr"] and "benchd_fleet_" not in t["expr"]]
                assert len(expressions) >= 60
                missing = []

                def all_answer() -> bool:
                    missing[:] = [e for e in expressions if not query(promql(e))]
                    return not missing

                wait_for(all_answer, 120, "every live- and fleet-dashboard expression to return data")
                for expr in expressions:
                    query(promql(expr))  # a query Prometheus refuses fails here
                for name in ("benchd-live.json", "benchd-fleet.json"):
                    for variable in dashboards()[name]["templating"]["list"]:
                        found = re.match(r"label_values\((.*), (\w+)\)$", variable["definition"])
                        body = httpx.get(f"{api}/label/{found.group(2)}/values").json()
                        assert body["data"], variable["name"]
                        selector = promql(found.group(1)).replace('"$model"', '".*"')
                        assert query(f"count({selector})"), variable["definition"]

                def exemplars() -> list:
                    body = httpx.get(f"{api}/query_exemplars", params={
                        "query": "benchd_time_to_first_token_seconds_bucket", "start": started - 60,
                        "end": time.time() + 60}).json()
                    return [e for series in body["data"] for e in series["exemplars"]]

                wait_for(lambda: any("trace_id" in e["labels"] for e in exemplars()), 60, "TTFT exemplars")
                traced = {e["labels"]["trace_id"] for e in exemplars() if "trace_id" in e["labels"]}
                assert all(re.fullmatch(r"[0-9a-f]{32}", t) for t in traced)
            finally:
                prometheus.terminate()
                prometheus.wait(30)
                server.http.delete("/schedules/live")

            # The history dashboard's SQL, against the store the daemon wrote.
            wait_for(lambda: server.http.get("/runs", params={"workload": "other", "status": "succeeded"})
                     .json()["total"] == 1, 120, "the second workload's run")
        engine = sa.create_engine(postgres_url)
        with engine.connect() as db:
            nodes = [row[0] for row in db.execute(sa.text("SELECT DISTINCT node FROM runs"))]
            assert nodes == ["e2e-node"]
            models = [row[0] for row in db.execute(sa.text("SELECT DISTINCT model FROM runs"))]
            workloads = [row[0] for row in db.execute(sa.text("SELECT DISTINCT workload FROM runs"))]
            assert set(workloads) == {"short", "other", "fleet", "capacity", "ab"}
            history = dashboards()["benchd-history.json"]
            queries = [t["rawSql"] for p in history["panels"] for t in p["targets"]]
            queries += [v["query"] for v in history["templating"]["list"]]
            queries += [a["rawQuery"] for a in history["annotations"]["list"]]
            assert len(queries) == 9
            for query in queries:
                rows = db.execute(sa.text(sql(query, nodes, models, workloads))).fetchall()
                assert rows, query
                assert not db.execute(sa.text(sql(query, ["another-node"], models, workloads))).fetchall() or \
                    "SELECT DISTINCT node" in query, query  # filtered by node
            traced = db.execute(sa.text(sql(history["panels"][-1]["targets"][0]["rawSql"], nodes, models,
                                            workloads)))
            assert any(re.fullmatch(r"[0-9a-f]{32}", row.trace_id or "") for row in traced)
        engine.dispose()
