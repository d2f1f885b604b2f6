"""Quality beside speed on the real model (smollm2-135m on the CPU), through the lifecycle: real requests ending at
EOS with their tokens' log-probabilities, the probe under each variant's stack, and a matrix in which a correct
kernel is the same and a broken one different (its outputs and its probe), told in Prometheus, the CLI's table and
the matrix page."""

import math

import pytest
from prometheus_client import CollectorRegistry
from rich.console import Console

from benchd.cli.matrix import comparison_table
from benchd.daemon.inprocess import LocalPool
from benchd.daemon.lifecycle import Lifecycle
from benchd.daemon.matrices import run_matrix, stored_variants
from benchd.engines import attention, varlen
from benchd.report.matrix import matrix_page
from benchd.spec.matrix import parse_matrix
from benchd.stopping import StopSignal
from benchd.telemetry import comparisons
from benchd.telemetry.metrics import Metrics
from benchd.telemetry.run import Telemetry
from tests.helpers import CPU_CACHE

pytestmark = pytest.mark.timeout(600)

# Questions alone (their chat turn is about 40 tokens); seed 14 draws two with short answers ("What is the capital of
# France?", "What is the largest mammal on Earth?"), which end at EOS within 40 tokens.
WORKLOAD = {"arrivals": {"profile": "concurrent", "concurrency": 4}, "stop": {"requests": 4},
            "prompt_tokens": {"dist": "uniform", "min": 36, "max": 48}, "output_tokens": {"dist": "fixed", "value": 40}}


def broken(q, k, v, cu_q, cu_k, max_q, max_k, scale, window):
    """A kernel with a wrong softmax scale: every output still a number, every answer wrong."""
    return varlen.reference(q, k, v, cu_q, cu_k, max_q, max_k, scale * 0.5, window)


@pytest.fixture(scope="module")
def matrix(real_model):
    """paged sdpa (the baseline), paged eager (another correct kernel) and torch's varlen path with a broken kernel
    in place of FlashAttention (the CPU has none: tests/engines/test_attention.py), one round, each with its probe."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    m = parse_matrix({"name": "quality", "model": "smollm2-135m", "engine": "transformers", "device": "cpu",
                      "transformers": CPU_CACHE, "workload": WORKLOAD, "seed": 14,
                      "matrix": {"attn_implementation": ["paged|sdpa", "paged|eager", "paged|torch_varlen"]},
                      "repeats": 1})
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(varlen.KERNEL, varlen.VARLEN, broken)
        patch.setattr(attention, "runs_here", lambda base, model, device: None)
        pool = LocalPool()
        lifecycle = Lifecycle(pool, Telemetry(metrics))
        try:
            result = run_matrix(m, lambda run_id, v: lifecycle.execute(run_id, v.spec, v.spec.device, StopSignal()))
        finally:
            pool.stop()
    comparisons.matrix(metrics, "quality", result.comparison)
    return m, result, registry


def test_real_requests_end_at_eos_with_their_log_probabilities_and_the_probe_is_scored(matrix):
    _, result, registry = matrix
    assert result.status == "succeeded", [r.error for *_, r in result.runs]
    (_, _, _, baseline), *_ = result.runs
    meta = baseline.metadata
    assert (meta.prompts, meta.ignore_eos, meta.logprobs) == ("real", False, True)
    records = baseline.stages[0].records
    assert any(r.output_tokens < r.max_new_tokens for r in records)  # a turn ended at EOS, under its cap
    for r in records:
        assert len(r.logprobs) == len(r.token_ids) == r.output_tokens
        assert all(x <= 0 and math.isfinite(x) for x in r.logprobs)
    probe = meta.probe
    assert probe.attention == "sdpa" and probe.nonfinite == 0 and 5 < probe.perplexity < 30  # real text: ~12.9
    assert probe.noise_kl == 0.0 and probe.seconds > 0  # float32 on a CPU: batch arrangements agree exactly
    quality = baseline.ended().quality
    assert quality.ended_at_eos >= 1 and quality.probe_tokens == probe.tokens and quality.logprob_mean < 0
    labels = {"model": "smollm2-135m", "engine": "transformers", "workload": "quality", "gpu": ""}
    assert registry.get_sample_value("benchd_quality_perplexity", labels) > 0  # the last run's (the broken one's)
    assert registry.get_sample_value("benchd_quality_probe_seconds", labels) > 0


def test_a_correct_kernel_is_the_same_and_a_broken_one_different(matrix):
    m, result, registry = matrix
    base, eager, broken_ = result.comparison.variants
    assert base.quality is None and base.baseline
    assert eager.quality.verdict == "same", eager.quality.reason
    assert eager.quality.kl < 1e-6 and eager.quality.exact_match == 1.0  # float32: the same tokens
    q = broken_.quality
    assert q.verdict == "different" and q.kl > 0.1 and q.perplexity > 2 * q.baseline_perplexity, q
    assert q.exact_match < 0.5 and q.first_divergence_p50 is not None
    assert broken_.stack["attn_implementation"] == "paged|torch_varlen"
    for variant, different in ((eager, 0.0), (broken_, 1.0)):
        labels = {"workload": "quality", "variant": variant.label}
        assert registry.get_sample_value("benchd_quality_variant_different", labels) == different
        assert registry.get_sample_value("benchd_quality_variant_kl", labels) == pytest.approx(variant.quality.kl)
    console = Console(record=True, width=200)
    console.print(comparison_table("quality", result.comparison, result.status))
    text = console.export_text()
    assert "DIFFERENT" in text and "wrong" not in text and "probe KL" in text
    row = {"id": None, "status": result.status, "document": m.document(), "variants": stored_variants(m.variants()),
           "baseline": 0, "runs": [{"run_id": r, "round": i, "variant": v} for i, v, r, _ in result.runs],
           "comparison": result.comparison.model_dump(mode="json")}
    page = matrix_page(row, {r: res.stages[0].records for *_, r, res in result.runs})
    assert "<section id=quality>" in page and "different" in page and "probe KL" in page
