"""Admission's policy on its own, as the API and the command line share it (src/benchd/admission/): each field
refused with its reason in benchd's own error, nothing of fastapi; a spec over HTTP judged as hostile, the operator's
own at its terminal only on whether it can run here."""

import subprocess
import sys

import pytest

from benchd.admission import Memory, Problem, Refused, Unmeasured, admit
from benchd.daemon.settings import Settings
from benchd.hardware.devices import resolve
from benchd.spec import validate_spec
from tests.helpers import ROOT, make_spec

CPU = resolve(["cpu"], [])
PLENTY = Memory(lambda slot: 64 << 30)


def refused(spec, settings=None, memory=PLENTY, remote=True) -> dict[str, str]:
    try:
        admit(spec, settings or Settings(device="cpu", model="tiny"), memory, CPU, remote=remote)
    except Refused as refusal:
        return {".".join(map(str, p.field)): p.reason for p in refusal.problems}
    return {}


def test_a_refusal_names_each_field_and_its_reason_once():
    spec = make_spec(workload={"stop": {"requests": 50}, "warmup": {"requests": 50}}, trust_remote_code=True)
    settings = Settings(device="cpu", model="tiny", limits={"max_requests": 10})
    with pytest.raises(Refused) as caught:
        admit(spec, settings, PLENTY, CPU)
    problems = caught.value.problems
    assert Problem(("workload", "stop", "requests"),
                   "50 exceeds the limit of 10 (BENCHD_LIMITS__MAX_REQUESTS)") in problems
    assert Problem(("trust_remote_code",), "cannot be enabled over HTTP") in problems
    assert len(problems) == len(set(problems))
    # as the command line prints it: the field dotted, then why
    assert "workload.stop.requests: 50 exceeds the limit of 10 (BENCHD_LIMITS__MAX_REQUESTS)" in str(caught.value)


def test_the_policy_imports_nothing_of_the_http_framework():
    check = "import sys, benchd.admission; print(sorted(m for m in ('fastapi', 'starlette') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_operators_own_spec_is_judged_only_on_whether_it_can_run_here():
    """remote=False (`benchd run`): no HTTP limits, remote code allowed; still its threads against the cores, its
    requests against the model and its memory against what the device may give."""
    spec = make_spec(workload={"stop": {"requests": 50}}, trust_remote_code=True)
    settings = Settings(device="cpu", model="tiny", limits={"max_requests": 10})
    assert set(refused(spec, settings)) == {"workload.stop.requests", "trust_remote_code"}
    assert refused(spec, settings, remote=False) == {}
    threads = make_spec(transformers={"block_size": 16, "num_blocks": 64, "max_batch_tokens": 128,
                                      "cpu_threads": 4096})
    assert "more than the" in refused(threads, remote=False)["transformers.cpu_threads"]
    long = make_spec(workload={"prompt_tokens": {"dist": "fixed", "value": 4090},
                               "output_tokens": {"dist": "fixed", "value": 8}})
    assert "beyond the model's 4096 positions" in refused(long, remote=False)["workload.prompt_tokens"]
    small = Settings(device="cpu", model="tiny", limits={"memory_bytes": 1000})
    assert "(BENCHD_LIMITS__MEMORY_BYTES)" in refused(make_spec(), small, remote=False)["model"]


def test_a_timed_run_on_an_unmeasured_device_is_judged_later():
    kernel = validate_spec({"kind": "kernel", "device": "cpu", "kernel": {"op": "matmul",
                                                                          "shapes": [{"m": 8, "n": 8, "k": 8}]}})
    with pytest.raises(Unmeasured, match="has not measured its device yet"):
        admit(kernel, Settings(device="cpu", model="tiny"), PLENTY, CPU)
