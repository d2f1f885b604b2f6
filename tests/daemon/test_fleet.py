"""The fleet end to end: three daemons as three nodes (their own names and ports) running the same scheduled workload
and writing to one real PostgreSQL, one of them slowed (every forward pass of its worker 20 ms longer); the slowed
node flagged as the outlier by every daemon's GET /fleet with the cause named, its page, `benchd fleet`, each node's
place on its own /metrics, and the fleet dashboard's every query and the outlier alert's expression run against a
real Prometheus scraping the three."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.deploy.test_deploy import RULES, dashboards, promql
from tests.helpers import ROOT, daemon, free_port, prometheus_query, spec, wait_for

NODES = ("node-a", "node-b", "node-c")
SLOWED = "node-c"
WORKLOAD = "fleet"


def settings(node: str, url: str) -> dict:
    """Each node's settings: the shared store, a schedule of the same small workload back to back, its place read
    every second, a price per device-hour; the slowed node's worker 20 ms longer at every forward pass."""
    body = spec(requests=8, output=8, concurrency=2, name=WORKLOAD)
    return {"database_url": url, "node_name": node, "schedules": [{"name": WORKLOAD, "spec": body, "interval_s": 0.5}],
            "fleet": {"refresh_s": 1}, "prices": {"gpu_hour": 2.5, "currency": "EUR"},
            **({"faults": {"workload": WORKLOAD, "action": "slow", "delay_s": 0.02}} if node == SLOWED else {})}


@pytest.mark.timeout(600)
def test_three_nodes_on_one_postgresql_find_the_slowed_one(tmp_path, postgres_url):
    with contextlib.ExitStack() as stack:
        servers = {}
        for node in NODES:
            (tmp_path / node).mkdir()
            servers[node] = stack.enter_context(daemon(tmp_path / node, **settings(node, postgres_url)))
        for server in servers.values():
            server.wait_ready()
        first = servers["node-a"]

        def flagged() -> dict | None:
            found = first.http.get("/fleet", params={"workload": WORKLOAD}).json()
            groups = found["groups"]
            return found if groups and groups[0]["nodes"] == 3 and groups[0]["outliers"] == [SLOWED] else None

        wait_for(lambda: flagged() is not None, 300, "the slowed node to be decided the fleet's outlier")
        (group,) = flagged()["groups"]
        places = {p["node"]: p for p in group["places"]}
        slow = places[SLOWED]
        # Decided slower on output tok/s or ITL p50 (the judged figures), whichever decided first.
        judged = [f for f in ("output_tokens_per_s", "itl_s.p50") if slow["decisions"][f]["verdict"] == "slower"]
        assert judged and slow["decisions"][judged[0]]["ci_high"] < 1 / 1.1, slow["decisions"]
        assert slow["relative"]["output_tokens_per_s"] < 0.8 and slow["relative"]["itl_s.p50"] > 1.25
        assert len(slow["reasons"]) == len(judged) and all(r.startswith(("output tok/s per GPU ÷ the fleet's median",
                                                                         "ITL p50 ")) for r in slow["reasons"])
        # The cause: what sets its runs apart from the other nodes', the fault their metadata records.
        assert {"field": "fault", "before": None, "after": "slow: +0.02 s a forward pass (injected)",
                "mixed": False} in slow["stack"]
        for node in ("node-a", "node-b"):
            assert not places[node]["outlier"] and places[node]["stack"] == [], places[node]
            assert places[node]["decisions"]["output_tokens_per_s"]["verdict"] != "slower"
        # What a good token costs: no GPU energy on a CPU, its device-hours at 2.5 EUR.
        assert all(p["cost_per_million_good_tokens"] > 0 and p["energy_per_good_token_j"] is None
                   for p in places.values())
        assert slow["cost_per_million_good_tokens"] > 1.5 * places["node-a"]["cost_per_million_good_tokens"]
        assert flagged()["currency"] == "EUR" and group["distribution"]["output_tokens_per_s"]["nodes"] == 3
        # Every node's daemon reads the same fleet; each exports its own place.
        other = servers["node-b"].http.get("/fleet", params={"node": SLOWED}).json()
        assert [p["node"] for g in other["groups"] for p in g["places"]] == [SLOWED]
        wait_for(lambda: f'benchd_fleet_node_outlier{{device="{group["device"]}",hostname="{SLOWED}",workload="'
                         f'{WORKLOAD}"}} 1.0' in servers[SLOWED].http.get("/metrics").text, 60, "the outlier gauge")
        assert f'benchd_fleet_node_outlier{{device="{group["device"]}",hostname="node-a",workload="{WORKLOAD}"}} 0.0' \
            in first.http.get("/metrics").text
        run = first.http.get("/runs", params={"workload": WORKLOAD, "status": "succeeded", "limit": 1}).json()
        good = run["items"][0]["good_tokens"]
        assert good["good_output_tokens"] == 64 and good["currency"] == "EUR" and \
            good["cost_per_million_good_tokens"] > 0
        assert "benchd_run_cost_per_million_good_tokens{" in first.http.get("/metrics").text
        page = first.http.get("/fleet", params={"format": "html"}).text
        assert "node-c" in page and "slow: +0.02 s a forward pass (injected)" in page and "Node or stack" in page
        done = subprocess.run([sys.executable, "-m", "benchd.cli", "fleet", WORKLOAD, "--server", first.url,
                               "--fail-on-outlier"], capture_output=True, text=True, cwd=ROOT, timeout=60,
                              env={**os.environ, "COLUMNS": "200"})
        assert done.returncode == 1 and "OUTLIER" in done.stdout and SLOWED in done.stdout, done.stdout + done.stderr
        prometheus(tmp_path, [s.port for s in servers.values()], group["device"])


def prometheus(tmp_path, ports: list[int], device: str) -> None:
    """The repository's prometheus.yml and rules scraping the three daemons: every query of the fleet dashboard's
    fleet panels returns data, and the outlier alert's expression names the slowed node alone."""
    config_dir = tmp_path / "prometheus"
    shutil.copytree(RULES, config_dir / RULES.name)
    loaded = yaml.safe_load((ROOT / "prometheus.yml").read_text())
    loaded["scrape_configs"][0]["static_configs"][0]["targets"] = [f"127.0.0.1:{p}" for p in ports]
    # every second (the repository's: 5 s, with a 4-s timeout), for the test's time
    loaded["scrape_configs"][0].update(scrape_interval="1s", scrape_timeout="1s")
    (config_dir / "prometheus.yml").write_text(yaml.safe_dump(loaded))
    port = free_port()
    process = subprocess.Popen(["prometheus", f"--config.file={config_dir / 'prometheus.yml'}",
                                f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api = f"http://127.0.0.1:{port}/api/v1"

    def query(expr: str) -> list:
        return prometheus_query(api, expr)

    try:
        # (A CPU worker has no GPU energy: the energy per good token is the one figure these nodes lack.)
        expressions = [t["expr"] for p in dashboards()["benchd-fleet.json"]["panels"] for t in p["targets"]
                       if "benchd_fleet_" in t["expr"] and "energy_per_good_token" not in t["expr"]]
        assert len(expressions) >= 12
        missing = []

        def all_answer() -> bool:
            missing[:] = [e for e in expressions if not query(promql(e))]
            return not missing

        try:
            wait_for(all_answer, 120, "every fleet expression to return data")
        except TimeoutError:
            raise AssertionError(f"no data: {missing}") from None
        rule = next(r for g in yaml.safe_load((RULES / "benchd-fleet.yml").read_text())["groups"]
                    for r in g["rules"] if r.get("alert") == "BenchdFleetOutlierNode")
        found: list = []

        def fired() -> bool:  # every panel answering says one node's series is in, not the slowed node's yet
            found[:] = query(rule["expr"])
            return bool(found)

        wait_for(fired, 60, "the outlier rule's expression to name a node")
        assert [(r["metric"]["hostname"], r["metric"]["device"]) for r in found] == [(SLOWED, device)]
        across = query('quantile by (device) (0.5, benchd_fleet_node_value{figure="output_tokens_per_s"})')
        assert len(across) == 1
    finally:
        process.terminate()
        process.wait(30)
