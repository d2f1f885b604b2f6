"""Quality beside speed, its arithmetic (measure/quality.py, measure/drift.py): what differs between two runs'
outputs and probes, the baseline's own noise, the verdict, and a server's counts against benchd's."""

import math

import pytest

from benchd.measure.drift import Outputs, first_divergence, kl_top, outputs_drift, probe_drift
from benchd.measure.quality import KL_FLOOR, QualitySummary, RunQuality, compare_quality
from benchd.measure.records import RequestRecord, TokenCounts
from benchd.protocol.probe import Probe, ProbeSequence


def probe(shift=0.0, top=(-0.1, -2.5, -3.0), text=(-2.0, -3.0), nan=False, noise=0.0):
    """A probe of one answer (three positions, their three likeliest tokens) and the reference text; shift moves the
    answer's likeliest token's log-probability (its mass to the rest)."""
    first = math.log(math.exp(top[0]) * (1 - shift)) if shift else top[0]
    tops = [[first, *top[1:]]] * 3
    logprobs = [None if nan else first] * 3
    answer = ProbeSequence(name="answer-0", logprobs=logprobs, top_ids=[[5, 6, 7]] * 3,
                           top_logprobs=[[None if nan else x for x in row] for row in tops])
    return Probe(set="v1-test", attention="sdpa", seconds=0.1, tokens=5,
                 sequences=[answer, ProbeSequence(name="text", logprobs=list(text))], nonfinite=3 if nan else 0,
                 perplexity=None if nan else math.exp(-sum(text) / len(text)), answer_logprob=first,
                 noise_logprob=noise, noise_kl=noise)


def run(run_id, tokens, probe_=None, logprobs=None):
    return RunQuality(run_id, Outputs(tokens, logprobs or {}), probe_)


def test_kl_over_the_likeliest_tokens_is_zero_for_the_same_distribution_and_grows_with_the_difference():
    p = ([1, 2, 3], [math.log(0.6), math.log(0.3), math.log(0.05)])
    assert kl_top(*p, *p) == pytest.approx(0.0, abs=1e-12)
    near = kl_top(*p, [1, 2, 3], [math.log(0.58), math.log(0.32), math.log(0.05)])
    far = kl_top(*p, [2, 1, 3], [math.log(0.9), math.log(0.05), math.log(0.01)])
    assert 0 < near < 0.01 < far
    # A token of p's missing from q's list takes q's least listed probability (an upper bound): still finite
    assert kl_top(*p, [1, 2, 9], [math.log(0.6), math.log(0.3), math.log(0.01)]) > 0
    assert kl_top(p[0], [None, -1.0, -2.0], *p) is None  # not finite: left to the caller, never a zero


def test_outputs_drift_pairs_requests_by_index_and_finds_the_first_divergence():
    a = Outputs({0: [1, 2, 3, 4], 1: [5, 6, 7], 2: [8, 9]}, {0: [-0.1, -0.2, -0.3, -0.4], 1: [-1.0, -1.0, -1.0]})
    b = Outputs({0: [1, 2, 3, 4], 1: [5, 6, 9], 2: [8], 3: [1]}, {0: [-0.1, -0.25, -0.3, -0.4], 1: [-1.5, -1.0, -2]})
    drift = outputs_drift(a, b)
    assert (drift.requests, drift.identical, drift.exact_match) == (3, 1, 1 / 3)
    assert sorted(drift.divergence) == [1, 2]  # request 2 ended (at EOS) one token early: it diverges there
    # log-probabilities compared only before each first divergence: request 0's four, request 1's first two
    assert drift.prefix_tokens == 6 and drift.prefix_logprob_abs == pytest.approx((0.05 + 0.5) / 6)
    assert first_divergence([1, 2], [1, 2]) is None and first_divergence([], [3]) == 0


def test_a_correct_stack_within_its_floor_is_the_same_a_broken_one_different_and_nan_never_the_same():
    baseline = [run("a1", {0: [1, 2]}, probe()), run("a2", {0: [1, 2]}, probe())]
    near = compare_quality(baseline, [run("b1", {0: [1, 3]}, probe(0.001)), run("b2", {0: [1, 2]}, probe(0.001))])
    assert near.noise.pairs == 1 and near.noise.exact_match == 1.0 and near.noise.kl == 0.0
    assert near.requests == 2 and near.identical_requests == 1 and near.first_divergence_p50 == 1
    assert near.kl < KL_FLOOR and near.verdict == "same", near.reason  # a near-tie moved a token: not a verdict
    broken = compare_quality(baseline, [run("c1", {0: [7, 7]}, probe(0.5)), None])
    assert broken.kl > 0.1 and broken.verdict == "different" and "probe KL" in broken.reason
    assert broken.logprob_diff < 0 and broken.requests == 1  # the missing round pairs with nothing
    nan = compare_quality(baseline, [run("d1", {0: [1, 2]}, probe(nan=True))])
    assert nan.verdict == "different" and nan.nonfinite == 3 and "not finite" in nan.reason
    assert nan.perplexity is None and nan.baseline_perplexity == pytest.approx(math.exp(2.5))


def test_the_noise_the_baseline_measured_raises_the_bar():
    """A baseline whose repeats drift (bfloat16 batches, say) forgives a variant as much, times the factor."""
    noisy = [run("a1", {0: [1]}, probe(noise=0.004)), run("a2", {0: [1]}, probe(0.01, noise=0.004))]
    variant = compare_quality(noisy, [run("b1", {0: [1]}, probe(0.02)), run("b2", {0: [1]}, probe(0.02))])
    assert variant.noise.kl >= 0.004 and variant.kl > KL_FLOOR
    assert variant.verdict == "same", variant.reason
    quiet = [run("a1", {0: [1]}, probe()), run("a2", {0: [1]}, probe())]
    assert compare_quality(quiet, [run("b1", {0: [1]}, probe(0.02))]).verdict == "different"


def test_without_a_probe_the_outputs_decide_against_the_baselines_repeats_or_nothing_does():
    baseline = [run("a1", {i: [i, 1] for i in range(4)}), run("a2", {i: [i, 1] for i in range(4)})]
    same = compare_quality(baseline, [run("b1", {i: [i, 1] for i in range(4)})])
    assert same.verdict == "same" and same.exact_match == 1.0
    apart = compare_quality(baseline, [run("c1", {i: [9, 9] for i in range(4)})])
    assert apart.verdict == "different" and "exact match 0%" in apart.reason
    assert compare_quality(baseline[:1], [run("c1", {0: [9]})]).verdict == "unknown"  # no repeat: no noise known
    assert probe_drift(probe(), probe().model_copy(update={"set": "v2-other"})) is None  # another probe set


def test_a_run_summary_counts_eos_endings_and_leaves_out_log_probabilities_that_are_not_finite():
    records = []
    for index, (tokens, logprobs) in enumerate([(3, [-0.5, -1.0, float("nan")]), (4, [-0.2] * 4), (2, [])]):
        r = RequestRecord(index=index, request_id=str(index), warmup=False, prompt_tokens=8, max_new_tokens=4,
                          scheduled_s=0.0, arrival_s=[1.0] * tokens, arrival_tokens=[1] * tokens,
                          token_ids=[1] * tokens, logprobs=logprobs, finished_s=2.0)
        records.append(r)
    summary = QualitySummary.of(records, "real", probe())
    assert (summary.requests, summary.ended_at_eos, summary.eos_share) == (3, 2, 2 / 3)
    assert summary.logprob_mean == pytest.approx((-1.5 - 0.8) / 6)
    assert summary.perplexity == pytest.approx(math.exp(2.5)) and summary.probe_tokens == 5
    row = records[0].to_row("s", 0.0)
    assert row["logprobs"] == [-0.5, -1.0, None]  # stored as JSON can hold it (PostgreSQL's JSONB refuses NaN)
    assert RequestRecord.from_row(row).logprobs == [-0.5, -1.0, None]


@pytest.mark.parametrize("counts, disagrees", [
    (TokenCounts(40, 200, 40, 206), False),  # SmolLM2's "\n\n": 3 % more tokens in its text than it generated
    (TokenCounts(40, 8, 40, 7), False),  # the server counts the EOS its text leaves out
    (TokenCounts(12, 4, 40, 12), True),  # a server that counts words and chunks
    (TokenCounts(None, None, 40, 12), False),  # no usage: nothing to check
])
def test_a_servers_counts_agree_with_benchds_within_the_stated_tolerance(counts, disagrees):
    assert (counts.disagreement() is not None) == disagrees
