"""Verdicts on real runs: the worker's stop rules against the controlled server (errors, over-saturation), the tiny
model closed and far beyond its capacity, a thermally slowed GPU; and the verdict through the daemon (stored,
exported, shown, never a baseline), with the rules its settings give."""


import pytest

from benchd.daemon.inprocess import run_local as run
from benchd.spec import parse_spec
from tests.measure.helpers import checks
from tests.openai_server import OpenAIServer

# ---- real runs -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer(served_dir):
    return str(served_dir)


# The test server's usage counts words and chunks, not the tokenizer's tokens: the check of benchd's counts against a
# server's (measure/records.py, TokenCounts) is tested against a real server (tests/engines/openai/test_serve.py).
UNCOUNTED = {"max_count_disagreement_share": None}


def served(base_url, tokenizer, model, arrivals, stop, output=8, validity=None, warmup=None):
    workload = {"arrivals": arrivals, "stop": stop, "prompt_tokens": {"dist": "fixed", "value": 8},
                "output_tokens": {"dist": "fixed", "value": output}, "validity": {**UNCOUNTED, **(validity or {})}}
    if warmup:
        workload["warmup"] = warmup
    return parse_spec({"name": "validity", "engine": "openai", "model": model, "workload": workload,
                       "openai": {"base_url": base_url, "tokenizer": tokenizer}})


@pytest.mark.timeout(120)
def test_max_errors_stops_the_stage_keeps_what_it_measured_and_the_next_stage_runs(tokenizer):
    with OpenAIServer(delay_s=0.002) as server:
        spec = served(server.base_url, tokenizer, "mixed", {"profile": "sweep", "over": "concurrent",
                                                            "values": [1, 2]},
                      {"requests": 40}, validity={"max_errors": 3})
        outcome = run(spec)
    assert outcome.status == "succeeded", outcome.error
    first, second = outcome.summaries()
    for s in (first, second):
        assert s.status == "stopped" and s.valid is False
        assert s.stop_reason == "4 measured requests failed, over max_errors 3"
        assert s.invalid[0].message == "stopped early: 4 measured requests failed, over max_errors 3"
        assert s.requests <= 2 and s.errors >= 4  # one request in four of "mixed" succeeds
    assert len(outcome.stages) == 2
    # Every request it sent is kept, each finished.
    assert all(r.finished_s is not None for stage in outcome.stages for r in stage.records)
    assert outcome.valid() is False
    assert outcome.to_json()["valid"] is False


@pytest.mark.timeout(120)
def test_an_over_saturated_open_loop_stops_early_and_says_so(tokenizer):
    # One slot, 8 tokens × 10 ms a request: the server holds 12 requests/s; 60/s are sent for up to 20 s.
    with OpenAIServer(delay_s=0.01) as server:
        spec = served(server.base_url, tokenizer, "slots-1", {"profile": "constant", "rate": 60},
                      {"duration_s": 20}, validity={"oversaturation_s": 1.5, "dispatch_lag_floor_s": 0.05})
        outcome = run(spec)
    assert outcome.status == "succeeded", outcome.error
    (s,) = outcome.summaries()
    assert s.status == "stopped" and s.valid is False
    assert s.stop_reason.startswith("over-saturated: requests in flight grew from")
    assert s.duration_s < 8  # stopped within a few windows, not at 20 s
    assert s.requests >= 10  # what was measured is kept
    assert outcome.valid() is False


@pytest.mark.engine
def test_a_closed_loop_on_the_tiny_model_gets_a_verdict(tiny):
    from tests.helpers import make_spec

    outcome = run(make_spec(workload={"validity": {"min_requests": 100}}), loaded=tiny)
    (s,) = outcome.summaries()
    assert s.valid is False and [i.check for i in s.invalid] == ["min_requests"]
    assert s.invalid[0].message == "12 measured requests finished, under the minimum of 100"


@pytest.mark.engine
def test_a_run_on_a_thermally_slowed_gpu_is_throttled_and_one_at_its_power_cap_is_valid(tiny):
    """The lifecycle judges each stage with its GPU's clock events over its span: the sampler's reads of the GPU
    its worker runs on (an NVML stand-in here, the worker labelled as its GPU 0)."""
    from benchd.daemon.inprocess import LocalPool
    from benchd.hardware.devices import Slot
    from benchd.hardware.host import HostReader
    from benchd.hardware.nvml import NVMLReader
    from benchd.hardware.reader import HardwareReader
    from benchd.hardware.sampler import HardwareSampler
    from tests.fake_nvml import FakeGPU, FakeNVML

    gpus = [FakeGPU("GPU-0", throttle_mask=0x4 | 0x40), FakeGPU("GPU-1", throttle_mask=0x4 | 0x8)]
    nvml = NVMLReader(FakeNVML(gpus))
    nvml.start()
    sampler = HardwareSampler(HardwareReader(nvml, HostReader()), interval_s=0.05)
    sampler.start()
    pool = LocalPool(tiny)
    pool.slots = [Slot("cpu", "cpu", "0")]
    spec = parse_spec({"name": "hot", "model": "tiny", "device": "cpu", "dtype": "float32",
                       "transformers": {"block_size": 16, "num_blocks": 64, "max_batch_tokens": 128},
                       "workload": {"arrivals": {"profile": "concurrent", "concurrency": 2}, "stop": {"requests": 8},
                                    "prompt_tokens": {"dist": "fixed", "value": 8},
                                    "output_tokens": {"dist": "fixed", "value": 32}}})
    try:
        hot = run(spec, loaded=tiny, hardware=sampler, pool=pool)
        gpus[0].throttle_mask = 0x4  # at its power cap only: a heavy workload's own state
        capped = run(spec, loaded=tiny, hardware=sampler, pool=pool)
    finally:
        pool.stop()
        sampler.stop()
    (summary,) = hot.summaries()
    (clocks,) = summary.clocks  # GPU 0's, not GPU 1's
    assert clocks.gpu == "0" and clocks.samples >= 1
    assert clocks.events["hw_thermal"] == 1.0 and clocks.events["power_cap"] == 1.0
    assert hot.status == "succeeded" and hot.valid() is False and [i.check for i in summary.invalid] == ["throttled"]
    assert "GPU 0: thermal slowdown (HW) (hw_thermal) in 100% of" in summary.invalid[0].message
    (summary,) = capped.summaries()
    assert capped.valid() is True and summary.clocks[0].events == {**dict.fromkeys(summary.clocks[0].events, 0.0),
                                                                    "power_cap": 1.0}


@pytest.mark.timeout(120)
def test_a_server_that_completes_half_what_it_is_offered_is_oversaturated_by_default(tokenizer):
    # The finding through the openai engine: one slot, 8 tokens × 10 ms a request (12.5 requests/s at
    # most), offered 30/s for 4 s with the default rules: the verdict was "valid".
    with OpenAIServer(delay_s=0.01) as server:
        spec = served(server.base_url, tokenizer, "slots-1", {"profile": "poisson", "rate": 30}, {"duration_s": 4},
                      validity={"dispatch_lag_floor_s": 0.05})
        outcome = run(spec)
    assert outcome.status == "succeeded", outcome.error
    (s,) = outcome.summaries()
    assert s.status == "succeeded" and checks(s) == ["oversaturated"]  # it ran to its end: a verdict, not a stop
    assert s.completed_requests_per_s == pytest.approx(12.5, rel=0.25)
    assert s.invalid[0].message.startswith("over-saturated: completed ")  # the window's rates (the summary's: stage's)
    assert " requests/s against " in s.invalid[0].message


@pytest.mark.engine
@pytest.mark.timeout(300)
def test_the_tiny_model_offered_far_beyond_its_capacity_is_oversaturated_and_under_it_valid(tiny):
    # Prompts of 16 tokens and outputs of 128: the tiny model completes about 30 requests/s on this CPU (of 16
    # tokens, about 200). The rules are the defaults (the client's aside: a loaded 2-core machine is late by more
    # than 1 ms).
    from tests.helpers import make_spec

    def stage(rate, output_tokens):
        spec = make_spec(workload={"arrivals": {"profile": "poisson", "rate": rate}, "stop": {"duration_s": 3},
                                   "prompt_tokens": {"dist": "fixed", "value": 16},
                                   "output_tokens": {"dist": "fixed", "value": output_tokens},
                                   "validity": {"dispatch_lag_floor_s": 0.05, "min_sent_rate_ratio": 0.5}})
        outcome = run(spec, loaded=tiny)
        assert outcome.status == "succeeded", outcome.error
        return outcome

    # 150/s of 128 tokens, five times what it completes; 15/s of 16 tokens, a tenth.
    outcome = stage(150, 128)
    (over,) = outcome.summaries()
    assert over.valid is False and "oversaturated" in checks(over)
    assert over.completed_requests_per_s < 0.5 * over.offered_requests_per_s
    message = next(i.message for i in over.invalid if i.check == "oversaturated")
    assert message.startswith("over-saturated: completed ") and " offered (" in message
    assert outcome.valid() is False
    (under,) = stage(15, 16).summaries()
    assert under.valid is True, under.invalid
    assert under.completed_requests_per_s == pytest.approx(under.offered_requests_per_s, rel=0.3)


# ---- the verdict through the daemon: stored, exported, shown, and never a baseline ------------------------


def gauge(server, name, labels):
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(server.http.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


def test_the_verdict_is_stored_exported_shown_and_keeps_an_invalid_run_from_being_a_baseline(tmp_path):
    from benchd.measure.summary import StageSummary
    from benchd.report.tables import summary_rows
    from tests.helpers import NODE, daemon, spec, submit

    labels = {"model": "tiny", "engine": "transformers", "workload": "short", "gpu": "", "hostname": NODE}
    with daemon(tmp_path) as server:
        server.wait_ready()
        cold = server.wait_status(submit(server, spec()), "succeeded")  # its engine's first run
        refused = server.http.put("/baselines/short", json={"run_id": cold["id"]})
        assert refused.status_code == 422 and "ran cold" in refused.text and "a baseline is a warm run" in refused.text
        invalid = spec()
        invalid["workload"]["validity"] = {"min_requests": 100}
        bad = server.wait_status(submit(server, invalid), "succeeded")
        assert bad["valid"] is False
        assert bad["summary"][0]["invalid"][0]["message"] == \
            "6 measured requests finished, under the minimum of 100"
        assert gauge(server, "benchd_run_valid", labels) == 0.0
        refused = server.http.put("/baselines/short", json={"run_id": bad["id"]})
        assert refused.status_code == 422
        assert "an invalid run is never a baseline" in refused.text

        good = server.wait_status(submit(server, spec()), "succeeded")
        assert good["valid"] is True
        assert server.http.put("/baselines/short", json={"run_id": good["id"]}).status_code == 200
        assert gauge(server, "benchd_run_valid", labels) == 1.0
        compared = server.http.get("/compare", params={"a": good["id"], "b": bad["id"]}).json()
        assert compared["invalid"] == [bad["id"]]
    rows = dict(summary_rows([StageSummary.model_validate(bad["summary"][0]),
                              StageSummary.model_validate(good["summary"][0])]))
    assert rows["verdict"] == ["INVALID: min_requests", "valid"]


def test_the_daemons_settings_give_the_rules_a_workload_leaves_unset(tmp_path, monkeypatch):
    from benchd.daemon.settings import Settings
    from tests.helpers import daemon, spec, submit

    monkeypatch.setenv("BENCHD_VALIDITY__MIN_COMPLETION_RATIO", "0.8")  # as the environment gives it: text
    assert Settings().validity.min_completion_ratio == 0.8
    with daemon(tmp_path, validity={"min_completion_ratio": 0.5, "max_errors": 3}) as server:
        server.wait_ready()
        own = spec()
        own["workload"]["validity"] = {"min_completion_ratio": 0.95}
        for body, ratio in ((spec(), 0.5), (own, 0.95)):
            run = server.wait_status(submit(server, body), "succeeded")
            rules = run["spec"]["workload"]["validity"]
            assert (rules["min_completion_ratio"], rules["max_errors"]) == (ratio, 3)
            assert rules["max_dispatch_lag_ttft_share"] == 0.1  # the default, where neither sets it
