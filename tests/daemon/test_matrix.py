"""Matrices: expansion, interleaving, the comparison with its greedy-token agreement, the 422 for a stack this host
cannot run, and a matrix through a live daemon (stored, linked, exported, drawn), on the tiny model."""

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from benchd.daemon.inprocess import LocalPool, run_local
from benchd.daemon.lifecycle import Lifecycle
from benchd.daemon.matrices import run_matrix
from benchd.spec.matrix import MatrixProblem, interleaved, parse_matrix
from benchd.spec.stack import installed, unavailable
from benchd.stopping import StopSignal
from benchd.telemetry.run import Telemetry
from tests.browser import Chromium
from tests.helpers import ROOT, daemon, make_spec, spec, wait_for

BASE = make_spec().model_dump(mode="json", exclude_unset=True)


def matrix(dims, **extra):
    return parse_matrix({**BASE, "matrix": dims, **extra})


# ---- expansion ---------------------------------------------------------------------------------------


def test_a_matrix_expands_into_the_cross_product_on_one_seed_and_one_workload():
    m = matrix({"quantization": ["none", "int8_weight_only"], "attn_implementation": ["sdpa", "eager"],
                "transformers.num_blocks": [32]}, repeats=2)
    variants = m.variants()
    assert [(v.spec.quantization, v.spec.attn_implementation) for v in variants] == [
        ("none", "sdpa"), ("none", "eager"), ("int8_weight_only", "sdpa"), ("int8_weight_only", "eager")]
    assert {v.spec.seed for v in variants} == {0} and {v.spec.name for v in variants} == {"test"}
    assert {v.spec.transformers.num_blocks for v in variants} == {32}  # a dotted path sets a nested field
    assert {v.spec.workload for v in variants} == {variants[0].spec.workload}
    assert variants[2].label == "quantization=int8_weight_only,attn_implementation=sdpa,transformers.num_blocks=32"
    assert m.baseline_index(variants) == 0
    named = matrix({"quantization": ["none", "int8_weight_only"]},
                   baseline={"quantization": "int8_weight_only"})
    assert named.baseline_index(named.variants()) == 1
    # What the document said is what is stored: the spec's fields with the matrix's keys beside them
    assert named.document()["matrix"] == {"quantization": ["none", "int8_weight_only"]}
    arrivals = matrix({"workload.arrivals": [{"profile": "concurrent", "concurrency": 2}, {"profile": "synchronous"}]})
    assert [v.spec.workload.arrivals.profile for v in arrivals.variants()] == ["concurrent", "synchronous"]


@pytest.mark.parametrize("dims, extra, where, why", [
    ({"seed": [1, 2]}, {}, "matrix.seed", "one seed"),
    ({"name": ["a", "b"]}, {}, "matrix.name", "one workload"),
    ({"nonsense.field": [1]}, {}, "matrix.nonsense.field", "no spec field"),
    ({"quantization": ["none", "none"]}, {}, "matrix.quantization", "each value may appear once"),
    ({"quantization": ["none", "int3"]}, {}, "quantization", "variant quantization=int3"),
    ({"engine": ["static"], "attn_implementation": ["paged|sdpa"]}, {}, "matrix", "for continuous batching"),
    ({"compile": ["default"]}, {}, "matrix", "applies to the static engine"),
    ({"placement": ["one", "every_gpu"]}, {}, "matrix.placement", "one device"),
    ({"quantization": ["none"]}, {"placement": "every_gpu"}, "placement", "one device"),
    ({"quantization": ["none"]}, {"baseline": 3}, "baseline", "does not exist"),
    ({"static.batch_size": [1, 2], "quantization": ["none", "int8_weight_only"]},
     {"baseline": {"quantization": "none"}}, "baseline", "matches 2 variants"),
    ({"static.batch_size": list(range(1, 66))}, {}, "matrix", "more than the 64"),
])
def test_a_bad_matrix_names_the_place_and_the_reason(dims, extra, where, why):
    with pytest.raises(MatrixProblem) as raised:
        matrix(dims, **extra)
    assert any(".".join(map(str, loc)) == where and why in msg for loc, msg in raised.value.problems), \
        raised.value.problems


def deep(levels: int):
    value = 1
    for _ in range(levels):
        value = [value]
    return value


def test_a_matrix_value_nested_too_deep_is_named_not_copied_into_a_recursion_error():
    """copy.deepcopy of a value 495 levels deep raised RecursionError in the expansion (a 500 on POST /matrices)."""
    # 64 levels with its mapping: the limit
    at_limit = matrix({"openai.extra_body": [{"x": deep(63)}]}, engine="openai", openai={"tokenizer": "/served-model"})
    assert at_limit.variants()[0].spec.openai.extra_body["x"] == deep(63)
    for levels in (64, 495, 100_000):
        with pytest.raises(MatrixProblem) as raised:
            matrix({"openai.extra_body": [{"x": deep(levels)}]})
        (loc, why), = raised.value.problems
        assert loc == ("matrix", "openai.extra_body", 0) and "nested too deeply" in why
    with pytest.raises(MatrixProblem) as raised:
        matrix({"static.batch_size": [1]}, baseline={"x": deep(100)})
    assert raised.value.problems[0][0] == ("baseline",)


@pytest.mark.parametrize("extra, where", [({"repeats": True}, "repeats"), ({"repeats": "5"}, "repeats"),
                                          ({"repeats": 2.0}, "repeats"), ({"baseline": True}, "baseline"),
                                          ({"baseline": "0"}, "baseline")])
def test_a_matrix_is_strict_as_a_spec_is(extra, where):
    """true is not 1 and "5" is not 5: each was taken."""
    with pytest.raises(MatrixProblem) as raised:
        matrix({"static.batch_size": [1, 2]}, **extra)
    assert [".".join(map(str, loc)) for loc, _ in raised.value.problems] == [where]


def test_variants_run_interleaved_every_variant_once_a_round():
    assert interleaved(3, 2) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


# ---- availability ---------------------------------------------------------------------------------


def test_availability_is_decided_from_the_packages_and_the_device_type():
    assert unavailable("none", "sdpa", "cpu") == [] and unavailable("none", "paged|eager", "cpu") == []
    assert unavailable("float8", None, "cpu") == [("quantization", unavailable("float8", None, "cpu")[0][1])]
    assert "does not run on cpu" in unavailable("float8", None, "cpu")[0][1]
    assert ("bitsandbytes is not installed" in unavailable("bnb_4bit", None, "cuda")[0][1]) != installed("bitsandbytes")
    flash = unavailable("none", "paged|flash_attention_2", "cuda")
    assert bool(flash) != installed("flash_attn") and (not flash or flash[0][0] == "attn_implementation")


@pytest.mark.engine
def test_the_worker_checks_again_as_it_loads_and_fails_the_run_clearly():
    # Admission refuses these over HTTP; a spec that reaches a worker anyway fails at load, naming what is missing.
    result = run_local(make_spec(quantization="int4_weight_only"))
    assert result.status == "failed" and result.error_stage == "load"
    assert "int4_weight_only needs" in result.error and "does not run on cpu" in result.error


# ---- a matrix in this process -------------------------------------------------------------------


@pytest.fixture(scope="module")
def outcome(tiny):
    """sdpa and eager attention, float32 and int8 weight-only, on continuous batching: 2 rounds."""
    pool = LocalPool(tiny)
    lifecycle = Lifecycle(pool, Telemetry())
    order = []
    m = matrix({"attn_implementation": ["sdpa", "eager"], "quantization": ["none", "int8_weight_only"]}, repeats=2)
    try:
        result = run_matrix(m, lambda run_id, v: lifecycle.execute(run_id, v.spec, v.spec.device, StopSignal()),
                            on_run=lambda round_, variant, _: order.append((round_, variant.index)))
    finally:
        pool.stop()
    result.order = order
    return result


@pytest.mark.engine
def test_a_matrix_runs_in_the_interleaved_order_and_records_the_stack_in_effect(outcome):
    assert outcome.order == interleaved(4, 2) and outcome.status == "succeeded"
    stacks = {v: r.metadata for _, v, _, r in outcome.runs}
    assert [stacks[v].attn_implementation for v in range(4)] == ["paged|sdpa", "paged|sdpa", "paged|eager",
                                                                 "paged|eager"]
    assert "scaled_dot_product_attention" in stacks[0].attention_kernel and "eager" in stacks[2].attention_kernel
    assert stacks[0].quantized_layers == 0 and stacks[1].quantized_layers == 14  # 2 layers × 7 linear, lm_head kept
    assert "Int8WeightOnlyConfig" in stacks[1].quantization_method
    assert stacks[1].weight_bytes < 0.7 * stacks[0].weight_bytes
    assert all(r.metadata.model_load_s is not None for *_, r in outcome.runs)  # each run loaded its variant


@pytest.mark.engine
def test_a_matrix_over_continuous_batchings_attention_compares_torchs_varlen_kernel_with_paged_sdpa(tiny, monkeypatch):
    """attn_implementation is a matrix dimension like any: paged sdpa against torch's varlen kernel, interleaved. The
    CPU has no FlashAttention: its reference stands in for the kernel (tests/engines/test_attention.py), so the
    greedy tokens must agree exactly, and each variant records the attention and its kernel's source."""
    from benchd.engines import attention, varlen

    if not attention.batching_takes_registered():
        pytest.skip("this transformers' continuous batching runs no registered attention")
    monkeypatch.setitem(varlen.KERNEL, varlen.VARLEN, varlen.reference)
    monkeypatch.setattr(attention, "runs_here", lambda base, model, device: None)
    pool = LocalPool(tiny)
    lifecycle = Lifecycle(pool, Telemetry())
    try:
        result = run_matrix(matrix({"attn_implementation": ["paged|sdpa", "torch_varlen"]}, repeats=1),
                            lambda run_id, v: lifecycle.execute(run_id, v.spec, v.spec.device, StopSignal()))
    finally:
        pool.stop()
    assert result.status == "succeeded"
    varlen_run = result.comparison.variants[1]
    assert varlen_run.stack["attn_implementation"] == "paged|torch_varlen"
    assert "torch.nn.attention.varlen" in varlen_run.stack["attention_kernel"]
    assert varlen_run.tokens.ratio == 1.0


@pytest.mark.engine
def test_the_comparison_puts_each_variant_against_the_baseline(outcome):
    comparison = outcome.comparison
    baseline, int8, eager, eager_int8 = comparison.variants
    assert baseline.baseline and baseline.metrics == [] and baseline.tokens is None
    for variant in (int8, eager, eager_int8):
        names = [m.metric for m in variant.metrics]
        assert {"output_tokens_per_s", "ttft_s.p50", "itl_s.p99", "tpot_s.p90", "energy_per_token_j",
                "peak_memory_bytes", "weight_bytes"} <= set(names)
        assert all(m.verdict in ("faster", "slower", "equivalent", "inconclusive", "n/a")
                   for m in variant.metrics)
        assert len(variant.run_ids) == 2 and variant.statuses == ["succeeded"] * 2
    weights = next(m for m in int8.metrics if m.metric == "weight_bytes")
    assert weights.relative_change < -0.3 and weights.verdict == "faster"  # smaller (the page says so)
    energy = next(m for m in int8.metrics if m.metric == "energy_per_token_j")
    assert energy.verdict == "n/a" and energy.reason == "no data on either side"  # no GPU energy counter on a CPU
    # Eager and sdpa compute the same function: in float32 on the tiny model their greedy tokens agree
    assert eager.tokens.requests == 2 * 12 and eager.tokens.ratio >= 0.99
    assert 0 < int8.tokens.ratio <= 1 and int8.tokens.tokens == eager.tokens.tokens
    # How far from the hardware: each variant's MBU and MFU, and which ceiling a variant moved toward (by noise on a
    # shared CPU: only that it is named when either rose)
    from benchd.report.matrix import STACK_HEAD, stack_rows

    assert all(v.roofline is not None and 0 < v.roofline["mbu"] < 1 and 0 < v.roofline["mfu"] < 1
               for v in comparison.variants)
    assert baseline.moved_toward is None
    for variant in (int8, eager, eager_int8):
        rose = max(variant.roofline["mbu"] - baseline.roofline["mbu"],
                   variant.roofline["mfu"] - baseline.roofline["mfu"])
        assert (variant.moved_toward in ("bandwidth", "compute")) == (rose > 0)
    cells = [row[STACK_HEAD.index("MBU / MFU (of bound)")] for row in stack_rows(comparison)]
    assert all("%" in cell for cell in cells)


# ---- through the daemon ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    with daemon(tmp_path_factory.mktemp("matrix")) as server:
        server.wait_ready()
        yield server


def test_a_variant_whose_runs_were_oversaturated_is_marked_in_the_comparison_and_its_page():
    from benchd.measure.matrix import compare_matrix, run_figures
    from benchd.report.matrix import SUMMARY_HEAD, matrix_page, summary_rows

    saturated = {"output_tokens_per_s": 50.0, "invalid": [{"check": "oversaturated", "message": "over-saturated: …"}]}
    ok = {"output_tokens_per_s": 90.0, "invalid": []}
    variants = [{"index": 0, "label": "sdpa", "values": {}}, {"index": 1, "label": "eager", "values": {}}]
    runs = {0: [run_figures("a1", "succeeded", [], ok, None, None), run_figures("a2", "succeeded", [], ok, None, None)],
            1: [run_figures("b1", "succeeded", [], saturated, None, None),
                run_figures("b2", "succeeded", [], ok, None, None)]}
    comparison = compare_matrix(variants, runs, baseline=0)
    base, eager = comparison.variants
    assert (base.invalid, base.oversaturated) == ([], []) and (eager.invalid, eager.oversaturated) == (["b1"], ["b1"])
    verdicts = [row[SUMMARY_HEAD.index("runs")] for row in summary_rows(comparison)]
    assert verdicts == ["2/2 valid", "2/2 OVERSATURATED (1/2 runs)"]
    page = matrix_page({"id": "m", "baseline": 0, "variants": [{**v, "spec": {"name": "ab"}} for v in variants],
                        "runs": [], "comparison": comparison.model_dump(mode="json")}, {})
    assert "variant 1 (eager): completions fell behind the offers in 1 of its 2 runs" in page


def test_a_method_this_host_cannot_run_is_refused_with_what_it_needs(live):
    body = {**spec(), "quantization": "bnb_8bit"}
    if installed("bitsandbytes"):
        pytest.skip("bitsandbytes is installed here")
    refused = live.http.post("/runs", json=body)
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["body", "quantization"]
    assert "bitsandbytes is not installed" in refused.json()["detail"][0]["msg"]
    refused = live.http.post("/matrices", json={**spec(), "matrix": {"quantization": ["none", "float8"],
                                                                       "attn_implementation": ["sdpa", "eager"]}})
    assert refused.status_code == 422
    detail = refused.json()["detail"]
    assert {tuple(d["loc"]) for d in detail} == {("body", "quantization")} and len(detail) == 2  # one a variant
    assert all("float8 needs" in d["msg"] and "does not run on cpu" in d["msg"] for d in detail)
    assert "variant quantization=float8,attn_implementation=sdpa" in detail[0]["msg"]
    bad = live.http.post("/matrices", json={**spec(), "matrix": {"seed": [1, 2]}})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "matrix", "seed"]


@pytest.mark.engine
def test_a_matrix_through_the_daemon_is_stored_linked_compared_exported_and_drawn(live, tmp_path):
    body = {**spec(requests=6, output=8), "name": "ab",
            "matrix": {"attn_implementation": ["sdpa", "eager"], "quantization": ["none", "int8_weight_only"]},
            "repeats": 2}
    created = live.http.post("/matrices", json=body)
    assert created.status_code == 202, created.text
    matrix_id, run_ids = created.json()["id"], created.json()["runs"]
    assert len(run_ids) == 8 and created.headers["location"].endswith(f"/matrices/{matrix_id}")
    wait_for(lambda: live.http.get(f"/matrices/{matrix_id}").json()["status"] not in ("queued", "running"), 300,
             "the matrix to end")
    row = live.http.get(f"/matrices/{matrix_id}").json()
    assert row["status"] == "succeeded", row["error"]
    assert [(r["round"], r["variant"]) for r in row["runs"]] == interleaved(4, 2)
    runs = [live.http.get(f"/runs/{r}").json() for r in run_ids]
    assert all(r["matrix_id"] == matrix_id and r["status"] == "succeeded" for r in runs)
    started = [r["started_at"] for r in runs]
    assert started == sorted(started)  # they ran in the interleaved order
    assert [r["metadata"]["attn_implementation"] for r in runs[:4]] == ["paged|sdpa", "paged|sdpa", "paged|eager",
                                                                        "paged|eager"]
    assert [r["spec"]["quantization"] for r in runs[:4]] == ["none", "int8_weight_only"] * 2
    stored = live.app.state.services.store.records(run_ids[0])
    assert all(len(r.token_ids) == r.output_tokens for r in stored)
    variants = row["comparison"]["variants"]
    assert [v["baseline"] for v in variants] == [True, False, False, False]
    assert variants[2]["tokens"]["ratio"] >= 0.99  # eager against sdpa
    # Exported: one series per variant of the workload's latest matrix
    page = live.http.get("/metrics").text
    for v in variants:
        assert f'benchd_matrix_variant_output_tokens_per_second{{hostname="test-node",variant="{v["label"]}",' \
               f'workload="ab"}}' in page
    assert 'benchd_matrix_variant_relative_change{hostname="test-node",metric="weight_bytes",' \
           f'variant="{variants[1]["label"]}",workload="ab"}}' in page
    # Drawn: the matrix page in a real browser
    html = live.http.get(f"/matrices/{matrix_id}/report")
    assert html.status_code == 200 and "<section id=quality>" in html.text and 'data-chart="tradeoff-ttft"' in html.text
    # The command line's table: `--server` after the command (as docs/guides/matrices.md writes it), within an
    # 80-column terminal, each figure's change and verdict mark in its cell; the whole comparison in --json.
    shown = subprocess.run([sys.executable, "-m", "benchd.cli", "matrices", "show", matrix_id, "--server", live.url],
                           cwd=ROOT, capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    assert max(map(len, shown.stdout.splitlines())) <= 80
    assert "attn_implementation=sdpa, quantization=none (baseline)" in shown.stdout
    assert re.search(r"[+-]\d+\.\d% [✓✗≈?]", shown.stdout) and "what each variant ran with" in shown.stdout
    whole = subprocess.run([sys.executable, "-m", "benchd.cli", "matrices", "show", matrix_id, "--json", "--server",
                            live.url], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert json.loads(whole.stdout)["comparison"]["variants"][1]["metrics"][0]["name"] == "TTFT p50"
    with Chromium() as chromium:
        loaded = chromium.load(f"{live.url}/matrices/{matrix_id}/report", "matrix-report.png")
    assert loaded.console == [] and [u for u in loaded.fetched if not u.startswith("data:")] == [loaded.url]
    for name in ("ttft", "itl", "runs"):
        assert not loaded.charts[name]["empty"] and loaded.charts[name]["marks"] > 0
    # The workload's next matrix replaces its variants' series: bounded by one matrix's size
    again = live.http.post("/matrices", json={**spec(requests=4, output=4), "name": "ab",
                                              "matrix": {"static.batch_size": [2, 4]}, "repeats": 1})
    second = again.json()["id"]
    wait_for(lambda: live.http.get(f"/matrices/{second}").json()["status"] not in ("queued", "running"), 120,
             "the second matrix to end")
    page = live.http.get("/metrics").text
    assert variants[1]["label"] not in page and 'variant="static.batch_size=4"' in page


@pytest.mark.engine
def test_static_generate_compiles_when_asked_and_computes_the_same_tokens(tiny):
    # compile alone sets the variants apart: one warm model, and the worker must still start each variant's engine
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    small = {"arrivals": {"profile": "concurrent", "concurrency": 4}, "stop": {"requests": 4},
             "prompt_tokens": {"dist": "fixed", "value": 8}, "output_tokens": {"dist": "fixed", "value": 3}}
    pool = LocalPool(tiny)
    lifecycle = Lifecycle(pool, Telemetry())
    m = parse_matrix({**BASE, "engine": "static", "workload": small, "matrix": {"compile": ["off", "default"]},
                      "repeats": 1})
    try:
        result = run_matrix(m, lambda run_id, v: lifecycle.execute(run_id, v.spec, v.spec.device, StopSignal()))
    finally:
        pool.stop()
    (_, _, _, plain), (_, _, _, compiled) = result.runs
    assert result.status == "succeeded", [r.error for *_, r in result.runs]
    assert compiled.metadata.engine_settings["compile"] == "default"
    assert compiled.metadata.compile == "default" and plain.metadata.compile == "off"
    assert plain.metadata.engine_settings["compile"] == "off"
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1  # the forward pass went through dynamo
    tokens = lambda run: {r.index: r.token_ids for r in run.stages[0].records}  # noqa: E731
    assert tokens(compiled) == tokens(plain)
    assert result.comparison.variants[1].tokens.ratio == 1.0


@pytest.mark.engine
def test_benchd_run_of_a_matrix_file_runs_it_on_a_worker_process_and_writes_the_comparison(tmp_path):
    document = {**BASE, "engine": "static", "static": {"batch_size": 2},
                "workload": {"arrivals": {"profile": "concurrent", "concurrency": 2}, "stop": {"requests": 4},
                             "prompt_tokens": {"dist": "fixed", "value": 8},
                             "output_tokens": {"dist": "fixed", "value": 4}},
                "matrix": {"attn_implementation": ["sdpa", "eager"]}, "repeats": 2}
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(document))
    done = subprocess.run([sys.executable, "-m", "benchd.cli", "run", str(path), "--out", str(tmp_path / "out")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "2 variants × 2 rounds" in done.stdout and "attn_implementation=sdpa (baseline)" in done.stdout
    assert "attn_implementation=eager" in done.stdout
    row = json.loads((tmp_path / "out" / "matrix.json").read_text())
    assert row["status"] == "succeeded" and [(r["round"], r["variant"]) for r in row["runs"]] == interleaved(2, 2)
    eager = row["comparison"]["variants"][1]
    assert eager["stack"]["attn_implementation"] == "eager" and eager["tokens"]["ratio"] >= 0.99
    # random weights, no probe: the outputs against the baseline's repeats decide (the same tokens: the same)
    assert eager["quality"]["verdict"] == "same" and eager["quality"]["exact_match"] >= 0.99
    assert "<section id=quality>" in (tmp_path / "out" / "matrix.html").read_text()
