"""Did it get slower, and is that real? Two sides of runs compared per metric with a bootstrap interval."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel

from benchd.hardware.clocks import clock_difference
from benchd.measure.records import RequestRecord
from benchd.measure.roofline import moved_toward, utilisation
from benchd.spec.documents import parse_json

Verdict = Literal["faster", "slower", "no significant change", "inconclusive"]

# Per-request latency samples: (metric, percentile) pairs compared.
LATENCIES = ("ttft_s", "itl_s", "tpot_s", "e2e_s")
COMPARED = (50, 90, 99)  # of each latency's summary percentiles (records.PERCENTILES): those a comparison reads
# The defaults of every verdict that compares (runs, baselines, matrix variants, a run's GPUs); the daemon's are
# BENCHD_COMPARE_THRESHOLD and BENCHD_COMPARE_CONFIDENCE.
THRESHOLD = 0.05  # a relative change smaller than this is no regression, nor an outlier
CONFIDENCE = 0.95  # of the bootstrap intervals
REQUESTS_FILE = "requests.jsonl"  # `benchd run --out`: one stored request row (RequestRecord.to_row) a line


class OverBudget(Exception):
    """A comparison that did not end by its deadline (the daemon's: BENCHD_READS__COMPARE_TIMEOUT_S)."""


def _in_time(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise OverBudget("the comparison was not done by its deadline")


class Side(BaseModel):
    """What one side holds: its runs' per-request samples and their run-level figures."""

    run_ids: list[str]
    samples: dict[str, list[list[float]]]  # latency name → per run, per-request (ITL: per-token) samples, s
    output_tokens_per_s: list[float]  # one per run
    energy_per_token_j: list[float]  # one per run that has it
    invalid: list[str] = []  # runs whose verdict is invalid: their figures are not to be trusted
    roofline: list[dict] = []  # each run's first stage's (measure/roofline.py), those that have one
    clocks: list[list[dict]] = []  # each run's first stage's GPUs' clock events (hardware/clocks.py)


class MetricChange(BaseModel):
    metric: str  # e.g. ttft_s.p99, output_tokens_per_s
    a: float | None
    b: float | None
    relative_change: float | None  # (b − a) / a
    ci_low: float | None  # of the relative change, at the given confidence
    ci_high: float | None
    samples_a: int
    samples_b: int
    verdict: Verdict
    reason: str | None = None


class Comparison(BaseModel):
    a: list[str]
    b: list[str]
    threshold: float
    confidence: float
    metrics: list[MetricChange]
    invalid: list[str] = []  # runs on either side whose verdict is invalid (spec/validity.py): read the verdicts first
    # How far from the hardware (measure/roofline.py): each side's mean MBU, MFU and fraction of the bound, and the
    # ceiling b moved toward from a (bandwidth, compute; None: neither utilisation rose, or either side lacks them).
    roofline_a: dict[str, float] | None = None
    roofline_b: dict[str, float] | None = None
    moved_toward: str | None = None
    # Whether the two sides ran under different clock states, and how (hardware/clocks.py): a change between them may
    # be the GPU's state, not the software's. None: the same states, or either side has no GPU samples.
    clock_states: str | None = None

    @property
    def regressions(self) -> list[MetricChange]:
        return [m for m in self.metrics if m.verdict == "slower"]


def _verdict(low: float, high: float, threshold: float, higher_is_worse: bool) -> Verdict:
    """Significant and beyond the threshold in one direction; otherwise no significant change."""
    if low > threshold:
        return "slower" if higher_is_worse else "faster"
    if high < -threshold:
        return "faster" if higher_is_worse else "slower"
    return "no significant change"


def _resampler(runs: list[np.ndarray], rng: np.random.Generator):
    """Draws of a side in two stages: its runs with replacement, then samples within each chosen run. Several runs'
    draws are made at once from one array (a few numpy calls a draw, whatever the number of runs: a loop over 100
    runs cost 28 s a comparison)."""
    if len(runs) == 1:
        only = runs[0]
        return lambda: only[rng.integers(0, len(only), size=len(only))]
    flat = np.concatenate(runs)
    sizes = np.array([len(run) for run in runs])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])

    def draw() -> np.ndarray:
        chosen = rng.integers(0, len(runs), size=len(runs))
        counts = sizes[chosen]
        within = (rng.random(counts.sum()) * np.repeat(counts, counts)).astype(np.int64)
        return flat[np.repeat(starts[chosen], counts) + within]

    return draw


def _bootstrap(a: list[np.ndarray], b: list[np.ndarray], statistic, confidence: float, resamples: int,
               rng: np.random.Generator, deadline: float | None = None) -> tuple[float, float]:
    """Percentile interval of (stat(b) − stat(a)) / stat(a). Each side is resampled in two stages, runs with
    replacement and then samples within each chosen run, so that run-to-run variation widens the interval
    (with one run a side, only the variation within it is covered)."""
    draw_a, draw_b = _resampler(a, rng), _resampler(b, rng)
    ratios = np.empty(resamples)
    for i in range(resamples):
        if i % 64 == 0:
            _in_time(deadline)
        sa, sb = statistic(draw_a()), statistic(draw_b())
        ratios[i] = (sb - sa) / sa if sa else np.nan
    ratios = ratios[np.isfinite(ratios)]
    tail = (1 - confidence) / 2
    return float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1 - tail))


def metric_change(name: str, a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], statistic, threshold: float,
            confidence: float, min_samples: int, higher_is_worse: bool, rng: np.random.Generator,
            resamples: int, deadline: float | None = None) -> MetricChange:
    """a, b: each side's samples, one list per run."""
    ra = [np.asarray(run, dtype=np.float64) for run in a if len(run)]
    rb = [np.asarray(run, dtype=np.float64) for run in b if len(run)]
    na, nb = sum(map(len, ra)), sum(map(len, rb))
    va = float(statistic(np.concatenate(ra))) if ra else None
    vb = float(statistic(np.concatenate(rb))) if rb else None
    change = (vb - va) / va if va and vb is not None else None
    base = dict(metric=name, a=va, b=vb, relative_change=change, samples_a=na, samples_b=nb)
    if min(na, nb) < min_samples:
        return MetricChange(**base, ci_low=None, ci_high=None, verdict="inconclusive",
                            reason=f"too few samples: {na} and {nb}, at least {min_samples} per side needed")
    # Time grows with resamples × samples: per-token ITL samples get fewer resamples.
    resamples = max(200, min(resamples, int(2e7 // max(na, nb))))
    low, high = _bootstrap(ra, rb, statistic, confidence, resamples, rng, deadline)
    return MetricChange(**base, ci_low=low, ci_high=high, verdict=_verdict(low, high, threshold, higher_is_worse))


def compare(a: Side, b: Side, threshold: float = THRESHOLD, confidence: float = CONFIDENCE, min_samples: int = 20,
            min_runs: int = 2, resamples: int = 2000, seed: int = 0, deadline: float | None = None) -> Comparison:
    """Latency percentiles from per-request samples; throughput and energy from per-run figures (so they need
    min_runs runs on each side to say anything). deadline: time.monotonic() past which OverBudget is raised."""
    rng = np.random.default_rng(seed)
    metrics = []
    for name in LATENCIES:
        for p in COMPARED:
            # A percentile needs observations beyond it: at least 10 in its tail (p99: 1,000 samples), else its
            # bootstrap interval is an artefact of the few largest values.
            needed = max(min_samples, round(10 / (1 - p / 100)))
            metrics.append(metric_change(
                f"{name}.p{p}", a.samples.get(name, []), b.samples.get(name, []),
                lambda x, p=p: np.percentile(x, p), threshold, confidence, needed,
                higher_is_worse=True, rng=rng, resamples=resamples, deadline=deadline))
    # Run-level figures: the runs are the samples.
    for name, worse in (("output_tokens_per_s", False), ("energy_per_token_j", True)):
        metrics.append(metric_change(name, [getattr(a, name)], [getattr(b, name)], np.mean, threshold, confidence,
                               min_runs, higher_is_worse=worse, rng=rng, resamples=resamples, deadline=deadline))
    line_a, line_b = utilisation(a.roofline), utilisation(b.roofline)
    return Comparison(a=a.run_ids, b=b.run_ids, threshold=threshold, confidence=confidence, metrics=metrics,
                      invalid=[*a.invalid, *b.invalid], roofline_a=line_a, roofline_b=line_b,
                      moved_toward=moved_toward(line_a, line_b), clock_states=clock_difference(a.clocks, b.clocks))


def _side(labels: Sequence[str], runs: Iterable[tuple[list[RequestRecord], dict, float | None, bool | None]]) -> Side:
    """Each run's first-stage records (load levels are not mixed) and summary, energy per token and verdict: the
    measured, successful requests give the samples, ITL exactly as the records define it (each arrival keeps
    how many tokens it carried)."""
    samples: dict[str, list[list[float]]] = {name: [] for name in LATENCIES}
    throughput, energy, invalid, lines, clocks = [], [], [], [], []
    for label, (records, first, joules, valid) in zip(labels, runs):
        tokens_per_s, line = first.get("output_tokens_per_s"), first.get("roofline")
        clocks.append(first.get("clocks") or [])
        good = [r for r in records if not r.warmup and r.ok]
        samples["ttft_s"].append([r.ttft_s for r in good])
        samples["e2e_s"].append([r.e2e_s for r in good])
        samples["tpot_s"].append([t for r in good if (t := r.tpot_s) is not None])
        samples["itl_s"].append([gap for r in good for gap in r.itl_s()])
        if tokens_per_s is not None:
            throughput.append(tokens_per_s)
        if joules is not None:
            energy.append(joules)
        if valid is False:
            invalid.append(label)
        if line:
            lines.append(line)
    return Side(run_ids=list(labels), samples=samples, output_tokens_per_s=throughput, energy_per_token_j=energy,
                invalid=invalid, roofline=lines, clocks=clocks)


def side_from_store(store, run_ids: Sequence[str], deadline: float | None = None) -> Side:
    """Runs a daemon stored (OverBudget once deadline, a time.monotonic(), has passed)."""

    def runs():
        for run_id in run_ids:
            _in_time(deadline)
            row = store.get_run(run_id)
            if row is None:
                raise KeyError(run_id)
            first = row["summary"][0] if row["summary"] else {}
            yield store.records(run_id, stage_index=0), first, row.get("energy_per_token_j"), row.get("valid")

    return _side(run_ids, runs())


class NotAResult(ValueError):
    """A directory that holds no generation run written by `benchd run --out`; str() says why and what to do."""


def side_from_directories(paths: Sequence[Path]) -> Side:
    """Runs written by `benchd run --out`: summary.json and requests.jsonl give the same records and figures a
    daemon's store would."""

    def runs():
        for path in paths:
            yield _read_directory(Path(path))

    return _side([str(p) for p in paths], runs())


def _read_directory(path: Path) -> tuple[list[RequestRecord], dict, float | None, bool | None]:
    if not path.is_dir():
        raise NotAResult(f"{path}: no such directory; give a directory written by `benchd run --out`")
    if not (path / "summary.json").is_file():
        raise NotAResult(f"{path}: no summary.json there; give a directory written by `benchd run --out`")
    try:
        summary = parse_json((path / "summary.json").read_text(), nodes_max=None)  # bounded: any file may be given
        kind = summary["spec"].get("kind", "generate")
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise NotAResult(f"{path}/summary.json: not a benchd summary ({error})") from None
    if kind != "generate":
        raise NotAResult(f"{path}: a {kind} run; compare takes generation runs")
    if not (path / REQUESTS_FILE).is_file():
        raise NotAResult(f"{path}: no {REQUESTS_FILE} (a directory from an older benchd, whose requests.csv is "
                         "not read back): run it again with `benchd run --out`")
    try:
        with (path / REQUESTS_FILE).open() as f:
            records = [RequestRecord.from_row(row) for line in f if line.strip()
                       if (row := parse_json(line, nodes_max=None))["stage_index"] == 0]
    except (ValueError, KeyError, TypeError) as error:
        raise NotAResult(f"{path}/{REQUESTS_FILE}: a line is not a stored request ({error!r})") from None
    stages = summary.get("stages") or []
    joules = (summary.get("hardware") or {}).get("energy_per_output_token_joules")
    first = stages[0] if stages else {}
    return records, first, joules, summary.get("valid")
