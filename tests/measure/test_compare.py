"""Regressions: the statistics on known samples, real runs through the daemon, and the alert in Prometheus."""

import itertools
import subprocess
import sys

import httpx
import numpy as np
import pytest
import yaml

from benchd.measure.compare import Side, compare
from benchd.report.comparison import comparison_page
from tests.helpers import NODE, ROOT, daemon, free_port, spec, submit, wait_for

RUN_IDS = itertools.count()


def side(values, name="ttft_s", runs=(), run_id=None):
    """One run (its own id, unless given: sides that share a run get no verdict)."""
    return Side(run_ids=[run_id or f"r{next(RUN_IDS)}"], samples={name: [list(values)]},
                output_tokens_per_s=list(runs), energy_per_token_j=[])


def verdicts(result, prefix):
    return {m.metric: m for m in result.metrics if m.metric.startswith(prefix)}


def test_same_distribution_is_no_significant_change():
    rng = np.random.default_rng(1)
    a, b = rng.lognormal(-3, 0.3, 2000), rng.lognormal(-3, 0.3, 2000)
    for metric in verdicts(compare(side(a), side(b)), "ttft_s").values():
        assert metric.verdict == "no significant change", metric
        assert metric.ci_low < 0.05 and metric.ci_high > -0.05


def test_a_real_shift_has_the_right_sign_and_size():
    rng = np.random.default_rng(2)
    a = rng.lognormal(-3, 0.3, 2000)
    slower = verdicts(compare(side(a), side(a * 1.5)), "ttft_s")["ttft_s.p50"]
    assert slower.verdict == "slower" and slower.relative_change == pytest.approx(0.5)
    assert slower.ci_low <= 0.5 <= slower.ci_high and slower.ci_low > 0.3
    faster = verdicts(compare(side(a), side(a * 0.7)), "ttft_s")["ttft_s.p50"]
    assert faster.verdict == "faster" and faster.relative_change == pytest.approx(-0.3)


def test_small_but_real_change_below_the_threshold_is_not_flagged():
    rng = np.random.default_rng(3)
    a = rng.lognormal(-3, 0.05, 5000)
    result = verdicts(compare(side(a), side(a * 1.03), threshold=0.05), "ttft_s")["ttft_s.p50"]
    assert result.ci_low > 0  # significant…
    assert result.verdict == "no significant change"  # …but within the threshold


def test_too_few_samples_is_inconclusive():
    result = compare(side([0.1] * 5), side([0.2] * 5))
    ttft = verdicts(result, "ttft_s")["ttft_s.p50"]
    assert ttft.verdict == "inconclusive" and "too few samples" in ttft.reason
    tail = verdicts(compare(side([0.1] * 500), side([0.2] * 500)), "ttft_s")
    assert tail["ttft_s.p50"].verdict == tail["ttft_s.p90"].verdict == "slower"
    assert tail["ttft_s.p99"].verdict == "inconclusive"  # 500 samples hold 5 beyond p99: not enough
    throughput = verdicts(compare(side([0.1] * 5, runs=[100]), side([0.2] * 5, runs=[90])),
                          "output_tokens_per_s")["output_tokens_per_s"]
    assert throughput.verdict == "inconclusive"  # one run a side says nothing about run-to-run spread
    assert "too few samples: 1 and 1" in throughput.reason and "run-to-run spread" in throughput.reason
    runs = compare(side([], runs=[100, 101, 99]), side([], runs=[60, 61, 59]), min_runs=3)
    assert verdicts(runs, "output_tokens_per_s")["output_tokens_per_s"].verdict == "slower"


def test_no_data_is_na_and_every_verdict_that_is_not_decided_says_why():
    rng = np.random.default_rng(5)
    result = compare(side(rng.lognormal(-3, 0.3, 200), runs=[100]), side([], runs=[90]))
    by_metric = {m.metric: m for m in result.metrics}
    assert by_metric["ttft_s.p50"].verdict == "n/a" and by_metric["ttft_s.p50"].reason == "no data on B"
    assert by_metric["itl_s.p50"].verdict == "n/a" and by_metric["itl_s.p50"].reason == "no data on either side"
    assert by_metric["energy_per_token_j"].verdict == "n/a"  # no GPU energy counter: nothing to compare
    assert all(m.reason for m in result.metrics if not m.decided)
    # One name a figure, with its unit, in the JSON as on the page and in the terminal.
    dumped = {m["metric"]: m for m in result.model_dump(mode="json")["metrics"]}
    assert (dumped["ttft_s.p99"]["name"], dumped["ttft_s.p99"]["unit"]) == ("TTFT p99", "s")
    assert (dumped["output_tokens_per_s"]["name"], dumped["output_tokens_per_s"]["unit"]) == ("output throughput",
                                                                                              "tok/s")


def test_a_figure_that_is_zero_on_a_is_inconclusive_not_an_error():
    """An energy counter that never moved (a stand-in GPU) gave 0 J a token on every run: the bootstrap's ratios
    were all NaN and /compare answered 500."""
    zero = compare(Side(run_ids=["a1", "a2"], samples={}, output_tokens_per_s=[1.0, 1.0], energy_per_token_j=[0, 0]),
                   Side(run_ids=["b1", "b2"], samples={}, output_tokens_per_s=[1.0, 1.0], energy_per_token_j=[0, 0]))
    energy = verdicts(zero, "energy")["energy_per_token_j"]
    assert energy.verdict == "inconclusive" and energy.reason == "A's value is 0: no relative change"


def test_sides_that_share_runs_get_a_warning_and_no_verdict():
    rng = np.random.default_rng(6)
    both = side(rng.lognormal(-3, 0.3, 2000), runs=[100], run_id="same")
    result = compare(both, both.model_copy(update={"run_ids": ["same"]}))
    assert {m.verdict for m in result.metrics} == {"n/a"} and not result.regressions
    assert all(m.ci_low is None and m.reason == "A and B share runs" for m in result.metrics)
    assert result.warnings[0].startswith("A and B share 1 of their runs (same): a run compared with itself says "
                                         "nothing, so no verdict is given")
    apart = compare(side(rng.lognormal(-3, 0.3, 2000)), side(rng.lognormal(-3, 0.3, 2000)))
    assert not any("share" in w for w in apart.warnings)


def test_one_run_a_side_says_what_its_interval_covers_and_takes_the_workloads_spread():
    """A single run's percentile moves from run to run more than the bootstrap within it can see: without a
    stored spread the verdict says so; with one (here 10 % a run) the interval widens by z·√2·spread and a 10 %
    change is no longer called slower."""
    rng = np.random.default_rng(7)
    values = rng.lognormal(-3, 0.3, 4000)
    a, b = side(values, runs=[100]), side(values * 1.10, runs=[85])
    plain = verdicts(compare(a, b), "ttft_s")["ttft_s.p50"]
    assert plain.verdict == "slower" and plain.spread is None
    assert plain.reason.startswith("one run on each side: the interval covers the variation within the run, not "
                                   "from run to run")
    # Eight stored runs besides these two, whose TTFT p50 and throughput vary by 10 % and 2 % (sample standard
    # deviation over mean); the runs compared are left out of it.
    tenth, fiftieth = np.array([-1, 1] * 4), np.array([-1, 1] * 4)
    scale = 0.10 / tenth.std(ddof=1)
    history = {f"h{i}": {"ttft_s.p50": 0.05 * (1 + scale * tenth[i]),
                         "output_tokens_per_s": 100 * (1 + 0.02 / fiftieth.std(ddof=1) * fiftieth[i])}
               for i in range(8)}
    history[b.run_ids[0]] = {"ttft_s.p50": 1.0, "output_tokens_per_s": 1.0}  # B itself: never part of the spread
    widened = compare(a.model_copy(update={"history": history}), b)
    ttft = verdicts(widened, "ttft_s")["ttft_s.p50"]
    extra = 1.959964 * 0.10 * 2 ** 0.5
    assert ttft.ci_low == pytest.approx(ttft.relative_change - np.hypot(plain.relative_change - plain.ci_low, extra))
    assert ttft.verdict == "no significant change" and ttft.spread == pytest.approx(0.10)
    assert "widened by the workload's run-to-run spread (±10.0% a run, over 8 stored runs)" in ttft.reason
    assert any("widened" in w for w in widened.warnings)
    # A run-level figure with one run a side: the spread gives its interval, (85 − 100) / 100 ± z·2 %·√2.
    throughput = verdicts(widened, "output_tokens_per_s")["output_tokens_per_s"]
    assert throughput.verdict == "slower" and throughput.ci_high == pytest.approx(-0.15 + 1.959964 * 0.02 * 2 ** 0.5)
    assert "1 and 1 runs: the interval is the workload's run-to-run spread" in throughput.reason


def test_the_terminal_table_names_each_figure_with_its_unit_and_says_why_a_verdict_is_weak():
    from rich.console import Console

    from benchd.report.outputs import comparison_table

    rng = np.random.default_rng(8)
    result = compare(side(rng.lognormal(-3, 0.3, 60)), side(rng.lognormal(-2.5, 0.3, 60)))
    console = Console(width=100, record=True)
    console.print(comparison_table(result))
    text = console.export_text()
    assert "TTFT p50" in text and " ms " in text and "ttft_s" not in text and "output throughput" in text
    assert max(map(len, text.splitlines())) <= 100
    assert "inconclusive [" in text and "too few samples: 60 and 60, at least 1000 per side needed" in text
    assert "n/a [" in text and "no data on either side" in text


def test_html_report_has_the_table_and_the_distributions():
    rng = np.random.default_rng(4)
    a, b = side(rng.lognormal(-3, 0.3, 100)), side(rng.lognormal(-2.5, 0.3, 100))
    page = comparison_page(compare(a, b), a, b)
    assert page.startswith("<!doctype html>") and "<td>TTFT p99</td>" in page and page.count("<svg") == 1
    assert '<span class="verdict slower">slower</span>' in page and 'data-chart="ttft"' in page


# ---- real runs -----------------------------------------------------------------------------------

WORKLOAD = spec(requests=40, output=24, concurrency=4)


@pytest.mark.quiet
def test_identical_runs_and_an_injected_delay_through_the_daemon(tmp_path):
    # A real slowdown in the engine's path: 16 ms more per forward pass, for runs labelled "slow". 4 ms was lost in
    # the noise of a CI machine whose runs differ by tens of percent (the interval reached below the 5 % threshold).
    faults = {"workload": "short", "label": "slow", "action": "slow", "delay_s": 0.016}
    with daemon(tmp_path, faults=faults) as server:
        server.wait_ready()
        side_a = [server.wait_status(submit(server, WORKLOAD), "succeeded")["id"] for _ in range(3)]
        side_b = [server.wait_status(submit(server, WORKLOAD), "succeeded")["id"] for _ in range(3)]
        first, second = side_a[0], side_a[1]
        # Same seed, same engine: only this machine's noise differs, run to run tens of percent in the tails on a
        # shared 2-core VM. Three runs a side let the interval take that in.
        same = server.http.get("/compare", params={"a": ",".join(side_a), "b": ",".join(side_b),
                                                  "threshold": 0.5}).json()
        for metric in same["metrics"]:
            assert metric["verdict"] in ("no significant change", "inconclusive", "n/a"), metric

        slow = server.wait_status(submit(server, {**WORKLOAD, "label": "slow"}), "succeeded")["id"]
        result = server.http.get("/compare", params={"a": f"{first},{second}", "b": slow}).json()
        itl = next(m for m in result["metrics"] if m["metric"] == "itl_s.p50")
        assert itl["verdict"] == "slower" and itl["relative_change"] > 0.3, itl
        assert 0.010 < itl["b"] - itl["a"] < 0.024, itl  # the 16 ms, give or take the step's own variation
        tpot = next(m for m in result["metrics"] if m["metric"] == "tpot_s.p50")
        assert tpot["verdict"] == "slower"
        by_workload = server.http.get("/compare", params={"workload": "short", "last": 1, "b": slow}).json()
        assert by_workload["a"] == [slow]  # the latest run of the workload
        page = server.http.get("/compare", params={"a": first, "b": slow, "format": "html"})
        assert page.headers["content-type"].startswith("text/html") and "slower" in page.text
        cli = subprocess.run([sys.executable, "-m", "benchd.cli", "compare", first, slow, "--server", server.url],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert cli.returncode == 0 and "slower" in cli.stdout, cli.stderr
        assert server.http.get("/compare", params={"a": "nope", "b": slow}).status_code == 404


@pytest.mark.quiet
def test_a_regression_against_the_baseline_fires_the_alert_in_prometheus(tmp_path):
    # 12 ms more per forward pass: well past the 0.5 threshold on any machine (4 ms was +35 % on a machine whose
    # tiny-model step takes 7 ms, and the alert never fired), while unslowed runs differ by ~15 %.
    faults = {"workload": "short", "label": "slow", "action": "slow", "delay_s": 0.012}
    with daemon(tmp_path, faults=faults, compare_threshold=0.5) as server:
        prometheus_port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(ROOT / "prometheus-rules" / "benchd-regressions.yml")],
            "scrape_configs": [{"job_name": "benchd", "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}]}],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prometheus_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        api = f"http://127.0.0.1:{prometheus_port}/api/v1"
        try:
            server.wait_ready()
            server.http.post("/schedules", json={"name": "watch", "spec": WORKLOAD, "interval_s": 0.2})
            wait_for(lambda: server.http.get("/runs", params={"schedule": "watch", "status": "succeeded"})
                     .json()["total"] >= 1, 60)
            baseline = server.http.get("/runs", params={"schedule": "watch", "status": "succeeded"}).json()["items"][-1]
            assert server.http.put("/baselines/short", json={"run_id": baseline["id"]}).status_code == 200

            def gauge() -> float | None:
                for line in server.http.get("/metrics").text.splitlines():
                    series = f'benchd_regression_detected{{hostname="{NODE}",metric="itl_s.p50",workload="short"}}'
                    if line.startswith(series):
                        return float(line.split()[-1])
                return None

            wait_for(lambda: gauge() == 0.0, 60, "a scheduled run compared with the baseline")
            # On a CPU no clock states: none differ (the alert would say so; tests/data/promtool has that case).
            assert (f'benchd_regression_clock_states_differ{{hostname="{NODE}",workload="short"}} 0.0'
                    in server.http.get("/metrics").text)
            # The schedule's runs from now on are slowed: same workload, labelled for the fault.
            server.http.post("/schedules", json={"name": "watch", "spec": {**WORKLOAD, "label": "slow"},
                                                 "interval_s": 0.2})
            wait_for(lambda: gauge() == 1.0, 60, "the regression to be detected")

            def firing() -> bool:
                try:
                    alerts = httpx.get(f"{api}/alerts").json()["data"]["alerts"]
                except httpx.TransportError:
                    return False
                return any(a["labels"]["alertname"] == "BenchdRegression" and a["state"] == "firing"
                           and a["labels"]["metric"] == "itl_s.p50" for a in alerts)

            wait_for(firing, 60, "Prometheus to fire BenchdRegression")
            changes = httpx.get(f"{api}/query", params={
                "query": 'benchd_regression_relative_change{metric="itl_s.p50"}'}).json()["data"]["result"]
            assert float(changes[0]["value"][1]) > 0.5
        finally:
            prometheus.terminate()
            prometheus.wait(30)


def test_a_result_directory_gives_the_records_the_store_gives(tiny, tmp_path):
    """`benchd run --out` and a daemon's store keep a run's requests in one form (RequestRecord.to_row): a side read
    from the directory is the side read from the store, sample for sample."""
    from benchd.daemon.inprocess import LocalPool
    from benchd.daemon.lifecycle import Lifecycle
    from benchd.measure.sides import side_from_directories, side_from_store
    from benchd.report.outputs import write_outputs
    from benchd.stopping import StopSignal
    from benchd.store.database import Store
    from benchd.telemetry.run import Telemetry
    from tests.helpers import make_spec

    store = Store(f"sqlite:///{tmp_path}/benchd.db", spool_dir=tmp_path / "spool")
    store.start()
    assert store.wait_ready(30)
    spec = make_spec(workload={"warmup": {"requests": 2}, "stop": {"requests": 12},
                               "arrivals": {"profile": "concurrent", "concurrency": 3}})
    store.create_run("r1", spec.model_dump(mode="json"))
    pool = LocalPool(tiny)
    try:
        outcome = Lifecycle(pool, Telemetry(), store=store).execute("r1", spec, spec.device, StopSignal())
    finally:
        pool.stop()
    assert outcome.status == "succeeded" and store.flush()
    write_outputs(outcome, tmp_path / "out")
    stored, read = side_from_store(store, ["r1"]), side_from_directories([tmp_path / "out"])
    store.close()
    assert read.samples == stored.samples and len(read.samples["itl_s"][0]) == sum(
        r.output_tokens - 1 for r in outcome.stages[0].records if not r.warmup)
    assert read.output_tokens_per_s == stored.output_tokens_per_s == [outcome.summaries()[0].output_tokens_per_s]
    assert compare(read, read).metrics == compare(stored, stored).metrics
