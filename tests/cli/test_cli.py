"""benchd run as a user runs it: a subprocess, its exit code, its files."""

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def benchd(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "benchd.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, **kwargs)


def test_run_example_writes_summary_and_requests(tmp_path):
    result = benchd("run", "examples/tiny-poisson.yaml", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "TTFT ms" in result.stdout and "poisson@20/s" in result.stdout
    # Before it starts, how long it can take: 44 requests at 20/s, then its drain (30 s at least) and the cut's 2 s;
    # and when it drains, how soon it ends.
    assert "its stages end within 34 s of its first request (each stage's sending and drain)" in result.stderr
    assert "poisson@20/s (1/1) draining, ends within 3" in result.stderr, result.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "succeeded"
    (stage,) = summary["stages"]
    assert stage["requests"] == 40 and stage["warmup_requests"] == 4 and stage["errors"] == 0
    assert stage["ttft_s"]["count"] == 40 and stage["slo_attainment"] is not None
    assert summary["metadata"]["model"] == "tiny"
    # the attention continuous batching ran and its kernel's source: the CPU's paged sdpa, in the table and the page
    assert summary["metadata"]["attn_implementation"] == "paged|sdpa"
    assert "stack: attention paged|sdpa (torch " in result.stdout
    assert "attention kernel" in (tmp_path / "report.html").read_text()
    rows = list(csv.DictReader((tmp_path / "requests.csv").open()))
    assert len(rows) == 44
    for row in rows:
        times = row["token_times_s"].split()
        assert len(times) == int(row["output_tokens"]) == int(row["max_new_tokens"])
        assert float(row["ttft_s"]) > 0


def test_quick_flags(tmp_path):
    result = benchd("run", "--model", "tiny", "--device", "cpu", "--engine", "static", "--requests", "3",
                    "--prompt-tokens", "8", "--output-tokens", "4", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["spec"]["engine"] == "static"
    assert summary["stages"][0]["output_tokens"] == 12


def test_bad_spec_exits_nonzero_naming_the_field(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("workload:\n  arrivals: {profile: poisson, rate: -2}\n")
    result = benchd("run", str(spec))
    assert result.returncode == 2
    assert "workload.arrivals.poisson.rate" in result.stderr and "greater than 0" in result.stderr


def test_spec_beyond_the_model_is_rejected_before_running():
    result = benchd("run", "--model", "tiny", "--device", "cpu", "--prompt-tokens", "4000", "--output-tokens", "200")
    assert result.returncode == 2
    assert "workload.prompt_tokens" in result.stderr and "4096" in result.stderr


def test_ctrl_c_keeps_and_writes_what_was_measured(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "benchd.cli", "run", "--model", "tiny", "--device", "cpu", "--concurrency", "2",
         "--duration", "120", "--prompt-tokens", "16", "--output-tokens", "4000", "--warmup-requests", "0",
         "--out", str(tmp_path)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines = []  # a warning (no NVML on this machine) may come before benchd's lines
    while not any("measuring" in line for line in lines):
        lines.append(process.stderr.readline())
        assert len(lines) < 20 and lines[-1], lines
    # "measuring" comes with the first progress report, at the first request's end. Both requests are of one length
    # and end together, and the next two start at once: one second later both are under way, with tokens, for a
    # request of 4,000 tokens takes 4 s or more here. (With 1,024 tokens, about 1 s at best, an interrupt two
    # seconds in once landed between one pair and the next, and no request in flight had a token.)
    time.sleep(1)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    stage = summary["stages"][0]
    assert stage["status"] == "interrupted" and stage["requests"] > 0 and stage["output_tokens"] > 0
    rows = list(csv.DictReader((tmp_path / "requests.csv").open()))
    assert any(row["error"] == "interrupted" and int(row["output_tokens"]) > 0 for row in rows), \
        [(row["error"], row["output_tokens"]) for row in rows]  # what was there, if it ever fails again
    assert "status: interrupted" in stdout


# ---- results without a daemon, and failures in one line ---------------------------------------------


def quick_run(out, *extra):
    result = benchd("run", "--model", "tiny", "--device", "cpu", "--concurrency", "2", "--requests", "24",
                    "--prompt-tokens", "8", "--output-tokens", "8", "--out", str(out), *extra)
    assert result.returncode == 0, result.stderr
    return result


def nobody_listening() -> str:
    from tests.helpers import free_port

    return f"http://127.0.0.1:{free_port()}"


def test_compare_reads_result_directories_with_no_daemon(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    quick_run(a)
    quick_run(b)
    rows = [json.loads(line) for line in (a / "requests.jsonl").read_text().splitlines()]
    assert len(rows) == 24 and all(sum(r["arrival_tokens"]) == r["output_tokens"] == 8 for r in rows)
    env = {**os.environ, "BENCHD_SERVER": nobody_listening()}  # a daemon would not be reached: none is needed
    page = tmp_path / "compare.html"
    result = benchd("compare", str(a), str(b), "--json", "--html", str(page), env=env)
    assert result.returncode == 0, result.stderr
    comparison = json.loads(result.stdout)
    assert comparison["a"] == [str(a)] and comparison["b"] == [str(b)]
    metrics = {m["metric"]: m for m in comparison["metrics"]}
    ttft = metrics["ttft_s.p50"]
    assert ttft["samples_a"] == ttft["samples_b"] == 24
    # One run a side, nothing stored beside them (issue 53: exit 1 and five "slower" on two runs of one spec): no
    # figure is decided, and --fail-on-regression does not trip.
    assert {m["verdict"] for m in comparison["metrics"]} <= {"inconclusive", "n/a"}
    assert ttft["reason"].startswith("one run a side and no run-to-run spread of the same stack")
    assert benchd("compare", str(a), str(b), "--fail-on-regression", env=env).returncode == 0
    assert metrics["itl_s.p50"]["samples_a"] == 24 * 7  # per token, from the stored chunks
    summary = json.loads((a / "summary.json").read_text())["stages"][0]
    assert ttft["a"] == summary["ttft_s"]["p50"]  # the same records the summary came from
    assert page.read_text().startswith("<!doctype html>")
    table = benchd("compare", f"{a},{b}", str(b), "--threshold", "0.5", env=env)
    assert table.returncode == 0 and "TTFT p50" in table.stdout, table.stderr
    assert "A and B share 1 of their runs" in table.stdout  # b is on both sides: no verdict
    # The daemon's settings hold for the command line too: its threshold, where no flag gives one.
    settled = benchd("compare", str(a), str(b), env={**env, "BENCHD_COMPARE_THRESHOLD": "0.5"})
    assert settled.returncode == 0 and "beyond ±50%" in settled.stdout, settled.stdout
    assert "beyond ±5%" in benchd("compare", str(a), str(b), env=env).stdout
    bad = benchd("compare", str(a), str(b), env={**env, "BENCHD_COMPARE_THRESHOLD": "-1"})
    assert bad.returncode == 2 and "compare_threshold: Input should be greater than or equal to 0" in bad.stderr


def test_compare_says_what_a_directory_lacks(tmp_path):
    (tmp_path / "empty").mkdir()
    for args, says in (
        ((str(tmp_path / "missing"), str(tmp_path / "empty")), "missing: no such directory"),
        ((str(tmp_path / "empty"), str(tmp_path)), "empty: no summary.json there"),
        ((str(tmp_path / "empty"), "0123abcd"), "on both sides"),
    ):
        result = benchd("compare", *args)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert says in result.stderr.splitlines()[-1], result.stderr
    bad = benchd("compare", "a", "b", "--confidence", "1.5")
    assert bad.returncode == 2 and "between 0.5 and 1" in bad.stderr


@pytest.mark.parametrize("command", [
    ("runs", "list"), ("runs", "show", "0123abcd"), ("compare", "0123abcd", "4567ef01"),
    ("baseline", "nightly", "0123abcd"), ("run", "--model", "tiny", "--requests", "2"),
])
def test_client_commands_without_a_daemon_end_in_one_line(command):
    server = nobody_listening()
    result = benchd(*command, env={**os.environ, "BENCHD_SERVER": server}) if command[0] != "run" else \
        benchd(*command, "--server", server)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [result.stderr.strip()], result.stderr  # one line, no traceback
    assert result.stderr.startswith(f"benchd: cannot reach the benchd daemon at {server} (Connection refused): "
                                    "start one with `benchd serve`"), result.stderr
    if command[0] == "compare":
        assert "result directories written by `benchd run --out`" in result.stderr
    debug = benchd(*command[:1], "--debug", *command[1:], env={**os.environ, "BENCHD_SERVER": server}) \
        if command[0] != "run" else benchd(*command, "--server", server, "--debug")
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.splitlines()[-1] == result.stderr.strip()


def test_a_model_that_cannot_be_loaded_ends_in_one_line(tmp_path):
    """A directory that holds no loadable model (a config.json transformers cannot read): its error, said in one
    line with what to give instead; nothing measured, so no table."""
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    result = benchd("run", "--model", str(broken), "--device", "cpu", "--requests", "2")
    assert result.returncode == 1 and result.stdout == "", result.stdout
    assert "Traceback" not in result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"benchd: could not load model '{broken}': "), result.stderr
    assert "the directory must hold a transformers model" in last
    debug = benchd("--debug", "run", "--model", str(broken), "--device", "cpu", "--requests", "2")
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
    assert "no-such-architecture" in debug.stderr  # the full error, past its first line


def test_a_model_or_field_that_does_not_exist_is_refused_before_anything_loads(tmp_path):
    """`model: tinyy` waited 52 s for the hub's lookups to give up; a misspelt field got no suggestion."""
    started = time.monotonic()
    typo = benchd("run", "--model", "tinyy", "--requests", "2")
    assert typo.returncode == 2 and "loading" not in typo.stderr, typo.stderr
    assert "model: 'tinyy' is neither a preset (tiny, " in typo.stderr and "did you mean 'tiny'?" in typo.stderr
    offline = benchd("run", "--model", "nobody/no-such-model", "--requests", "2",
                     env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    assert offline.returncode == 2 and "not in the Hugging Face cache, and the hub is offline" in offline.stderr
    unreachable = benchd("run", "--model", "nobody/no-such-model", "--requests", "2",
                         env={**os.environ, "HF_ENDPOINT": nobody_listening(), "HF_HOME": str(tmp_path / "hf")})
    assert unreachable.returncode == 2 and "did not answer in 5 s (Connection refused)" in unreachable.stderr
    assert time.monotonic() - started < 60  # four interpreters' start, no model loaded, no hub waited for
    spec = tmp_path / "typo.yaml"
    spec.write_text("modle: tiny\nworkload: {arrivals: {profile: poisson, rat: 3}}\n")
    fields = benchd("run", str(spec))
    assert fields.returncode == 2
    assert "modle: Extra inputs are not permitted; did you mean 'model'?" in fields.stderr
    assert "workload.arrivals.poisson.rat: Extra inputs are not permitted; did you mean 'rate'?" in fields.stderr


def test_run_alone_is_refused_and_a_quick_workload_says_what_it_runs():
    alone = benchd("run")
    assert alone.returncode == 2 and alone.stderr.startswith("benchd: run: nothing to run: give a spec file")
    assert alone.stderr.count("\n") == 1


def test_every_option_is_described_and_global_options_go_anywhere():
    import argparse

    from benchd.cli.main import build_parser

    def parsers(parser):
        yield parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    yield from parsers(child)

    for parser in parsers(build_parser()):
        for action in parser._actions:
            assert action.help, (parser.prog, action.option_strings or action.dest)
    version = benchd("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"benchd {benchd_version()}"
    # --server after the command (docs/guides/matrices.md puts it there): parsed, and the daemon is asked
    server = nobody_listening()
    for command in (("runs", "list", "--server", server), ("matrices", "show", "abc", "--server", server),
                    ("--server", server, "runs", "list"), ("baseline", "--server", server)):
        result = benchd(*command)
        assert result.returncode == 1 and f"cannot reach the benchd daemon at {server}" in result.stderr, command


def benchd_version() -> str:
    import benchd as package

    return package.__version__


# ---- issue 32: what the daemon refuses, the command line refuses too (unless --force), and says what failed ------


def test_what_the_daemon_would_refuse_exits_2_unless_forced(tmp_path):
    """The daemon's own admission (src/benchd/admission/, not remote): a kernel run that could not end within
    BENCHD_LIMITS__MAX_DURATION_S at the speed its worker measured, requests the model cannot hold, or a model the
    memory a run may use cannot hold; --force runs it anyway."""
    kernel = tmp_path / "kernel.yaml"
    kernel.write_text("kind: kernel\ndevice: cpu\nkernel: {op: matmul, shapes: [{m: 8, n: 8, k: 8}, {m: 128, n: 128, "
                      "k: 128}], warmup: 1, repeats: 20, flush_bytes: 1048576}\n")
    env = {**os.environ, "BENCHD_LIMITS__MAX_DURATION_S": "0.000001"}
    refused = benchd("run", str(kernel), env=env)
    assert refused.returncode == 2, refused.stderr
    assert "kernel.shapes.1: the run should take" in refused.stderr and "GFLOP/s float32" in refused.stderr
    assert "BENCHD_LIMITS__MAX_DURATION_S" in refused.stderr and "(--force runs it anyway)" in refused.stderr
    forced = benchd("run", str(kernel), "--force", env=env)
    assert forced.returncode == 0, forced.stderr
    assert benchd("run", str(kernel)).returncode == 0  # within the default hour
    long = benchd("run", "--model", "tiny", "--device", "cpu", "--prompt-tokens", "4090", "--output-tokens", "8")
    assert long.returncode == 2 and "workload.prompt_tokens: prompt + output may reach 4098 tokens, beyond the " \
                                   "model's 4096 positions" in long.stderr and "--force" in long.stderr
    small = benchd("run", "--model", "tiny", "--device", "cpu", "--requests", "2",
                   env={**os.environ, "BENCHD_LIMITS__MEMORY_BYTES": "1000"})
    assert small.returncode == 2, small.stderr
    assert re.search(r"model: needs about .* more than the 0\.00 GiB it may use \(BENCHD_LIMITS__MEMORY_BYTES\)",
                     small.stderr), small.stderr


def test_a_spec_file_nested_too_deep_exits_2_naming_the_field(tmp_path):
    """The CLI printed a traceback (a spec) or exited 1 (a matrix) where the daemon answered 500."""
    deep = tmp_path / "deep.yaml"
    deep.write_text("openai:\n  extra_body:\n    x: " + "[" * 70 + "]" * 70 + "\n")
    result = benchd("run", str(deep))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "openai.extra_body.x.0.0.0.0.0… (64 levels down): nested too deeply" in result.stderr
    deeper = tmp_path / "deeper.json"
    deeper.write_text('{"openai": {"extra_body": ' + '{"a": ' * 5000 + "1" + "}" * 5002)
    result = benchd("run", str(deeper))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"spec file {deeper}: line 1, column" in result.stderr and "nested too deeply" in result.stderr
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("matrix:\n  openai.extra_body:\n    - " + "[" * 100 + "]" * 100 + "\n")
    result = benchd("run", str(matrix))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "matrix.openai.extra_body.0.0.0" in result.stderr and "nested too deeply" in result.stderr


def test_an_openai_run_that_no_server_answers_says_so(tmp_path):
    """It said "could not load the tokenizer None: ConnectionError" of a run with a dataset and no tokenizer."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "hello"}\n')
    server = nobody_listening()
    path = tmp_path / "openai.yaml"
    path.write_text(f"engine: openai\nopenai: {{base_url: '{server}/v1', connect_timeout_s: 2}}\n"
                    f"workload: {{dataset: {{format: jsonl, path: '{prompts}'}}, stop: {{requests: 1}}}}\n")
    result = benchd("run", str(path))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"benchd: the server at {server}/v1 (openai.base_url) did not answer: "), last
    assert "Connection refused" in last and "tokenizer" not in last


# ---- issue 43: scripts and terminals ---------------------------------------------------------------------------


def test_an_invalid_stage_exits_3_with_fail_on_invalid_and_the_settings_hold_here(tmp_path):
    """BENCHD_VALIDITY__MIN_REQUESTS applies to `benchd run` as it does to the daemon's runs: 4 requests are under
    it, so the run is INVALID; --fail-on-invalid makes that exit 3. A CPU run says nothing of NVML."""
    env = {**os.environ, "BENCHD_VALIDITY__MIN_REQUESTS": "1000"}
    args = ("run", "--model", "tiny", "--device", "cpu", "--requests", "4", "--prompt-tokens", "8",
            "--output-tokens", "4", "--out", str(tmp_path))
    failing = benchd(*args, "--fail-on-invalid", env=env)
    assert failing.returncode == 3, failing.stderr
    assert "INVALID: min_requests" in failing.stdout and "under the minimum of 1000" in failing.stdout
    assert "quick workload: synchronous, stop at requests 4; 8 prompt and 4 output tokens" in failing.stderr
    assert "NVML" not in failing.stderr and "nvidia" not in failing.stderr.lower()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["valid"] is False and summary["spec"]["workload"]["validity"]["min_requests"] == 1000
    passing = benchd(*args, env=env)
    assert passing.returncode == 0 and "INVALID" in passing.stdout


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A daemon holding five runs of one workload: a run's history beside it, as a scheduled workload's."""
    from tests.helpers import daemon, spec, submit

    with daemon(tmp_path_factory.mktemp("cli-daemon")) as server:
        server.wait_ready()
        ids = [server.wait_status(submit(server, spec(requests=24, output=8, name="nightly")), "succeeded")["id"]
               for _ in range(5)]
        yield server, ids


def test_runs_show_is_the_table_benchd_run_prints_within_the_terminals_width(stored):
    server, ids = stored
    env = {**os.environ, "COLUMNS": "80"}
    shown = benchd("runs", "show", ids[0], "--server", server.url, env=env)
    assert shown.returncode == 0, shown.stderr
    assert f"benchd · nightly · tiny · transformers · run {ids[0]}" in " ".join(shown.stdout.split())
    assert " · test-node · created " in " ".join(shown.stdout.split()) and "cpu (" in shown.stdout
    assert "TTFT ms p50 / p90 / p99" in shown.stdout and "valid" in shown.stdout and '"summary"' not in shown.stdout
    assert max(map(len, shown.stdout.splitlines())) <= 80
    whole = json.loads(benchd("runs", "show", ids[0], "--json", "--server", server.url).stdout)
    assert whole["id"] == ids[0] and whole["summary"][0]["ttft_s"]["count"] == 24
    listed = benchd("runs", "list", "--workload", "nightly", "--server", server.url, env=env)
    assert listed.returncode == 0 and all(i in listed.stdout for i in ids) and "(5 in all" in listed.stdout
    assert max(map(len, listed.stdout.splitlines())) <= 80


def test_compare_through_a_daemon_gives_its_context_and_the_workloads_spread(stored):
    server, ids = stored
    # ids[0] was its engine's first run (cold): the two after it are compared
    result = benchd("compare", ids[1], ids[2], "--server", server.url, env={**os.environ, "COLUMNS": "120"})
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "what was compared" in text and "nightly" in text and max(map(len, result.stdout.splitlines())) <= 120
    # one run a side: its interval rests on the spread of the warm runs of its stack, the compared ones among them
    assert "the interval rests on the run-to-run spread of 4 runs of the same stacks" in text
    compared = json.loads(benchd("compare", ids[1], ids[2], "--json", "--server", server.url).stdout)
    ttft = next(m for m in compared["metrics"] if m["metric"] == "ttft_s.p50")
    assert ttft["name"] == "TTFT p50" and ttft["unit"] == "s" and ttft["spread"] > 0 and ttft["spread_runs"] == 4
    # a reader that stops early: the command ends quietly, as it would have
    process = subprocess.Popen([sys.executable, "-m", "benchd.cli", "compare", ids[0], ids[1], "--json", "--server",
                                server.url], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout.read(10).startswith(b"{")
    process.stdout.close()
    assert process.wait(60) == 0 and process.stderr.read() == b""


def test_a_baseline_is_shown_set_and_cleared_from_the_command_line_and_over_http(stored):
    server, ids = stored
    url = ("--server", server.url)
    assert benchd("baseline", "nightly", ids[2], *url).stdout.strip() == f"run {ids[2]} is the baseline of nightly"
    shown = benchd("baseline", "nightly", "--json", *url)
    assert json.loads(shown.stdout) == {"workload": "nightly", "run_id": ids[2]}
    assert ids[2] in benchd("baseline", *url).stdout
    assert server.http.get("/baselines/nightly").json() == {"workload": "nightly", "run_id": ids[2]}
    cleared = benchd("baseline", "nightly", "--clear", *url)
    assert cleared.returncode == 0 and cleared.stdout.strip() == "nightly has no baseline now"
    gone = benchd("baseline", "nightly", *url)
    assert gone.returncode == 1 and gone.stderr.strip() == "benchd: 404: nightly has no baseline"
    assert server.http.delete("/baselines/nightly").status_code == 404
    server.http.put("/baselines/nightly", json={"run_id": ids[3]})
    assert server.http.delete("/baselines/nightly").status_code == 204 and server.http.get("/baselines").json() == []
