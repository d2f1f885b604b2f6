"""A comparison's sides: what a Side holds, and each run's records, figures, outputs and quality probe read (from a
daemon's store, store/sides.py, or a result directory `benchd run --out` wrote, here) made into one."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, model_validator

from benchd.measure import latency
from benchd.measure.context import RunFacts, SideContext, side_context
from benchd.measure.quality import RunQuality, run_quality
from benchd.measure.records import RequestRecord
from benchd.protocol.probe import Probe
from benchd.spec.documents import parse_json

REQUESTS_FILE = "requests.jsonl"  # `benchd run --out`: one stored request row (RequestRecord.to_row) a line
LATENCIES = ("ttft_s", "itl_s", "tpot_s", "e2e_s")  # the distributions a side holds each request's samples of


class Side(BaseModel):
    """What one side holds, run by run (each list one entry a run, in run_ids' order): its per-request samples and
    run-level figures, what the runs are (context), which ran cold, and stored runs of the same stack (history),
    whose run-to-run spread it pools with its own; each run's outputs and probe (quality)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    run_ids: list[str]
    samples: dict[str, list[list[float]]]  # latency name → per run, per-request (ITL: per-token) samples, s
    output_tokens_per_s: list[float | None]  # one a run
    energy_per_token_j: list[float | None]  # one a run (None: no GPU energy counter)
    invalid: list[str] = []  # runs whose verdict is invalid: their figures are not to be trusted
    roofline: list[dict | None] = []  # each run's first stage's (measure/roofline.py), or none
    clocks: list[list[dict]] = []  # each run's first stage's GPUs' clock events (hardware/clocks.py), or none
    cold: list[str] = []  # runs that were the first after their engine started
    context: SideContext | None = None
    # Groups of stored runs (run id → its figures by metric), each of one stack in one segment of its workload's
    # history: the runs of this side's stack whose run-to-run spread is pooled with the runs compared.
    history: list[dict[str, dict[str, float]]] = []
    quality: list[RunQuality] = []

    @model_validator(mode="after")
    def _one_a_run(self) -> Side:
        runs = len(self.run_ids)
        lists = {"output_tokens_per_s": self.output_tokens_per_s, "energy_per_token_j": self.energy_per_token_j,
                 **{f"samples.{k}": v for k, v in self.samples.items()}}
        lists.update((k, v) for k, v in (("roofline", self.roofline), ("clocks", self.clocks),
                                         ("quality", self.quality)) if v)
        if wrong := [name for name, values in lists.items() if len(values) != runs]:
            raise ValueError(f"{', '.join(wrong)}: one entry a run ({runs})")
        return self

    def only(self, keep: Iterable[str]) -> Side:
        """This side with only the runs kept."""
        keep = set(keep)
        index = [i for i, run_id in enumerate(self.run_ids) if run_id in keep]

        def pick(values: list) -> list:
            return [values[i] for i in index] if values else values

        return self.model_copy(update=dict(
            run_ids=pick(self.run_ids), samples={k: pick(v) for k, v in self.samples.items()},
            output_tokens_per_s=pick(self.output_tokens_per_s), energy_per_token_j=pick(self.energy_per_token_j),
            roofline=pick(self.roofline), clocks=pick(self.clocks), quality=pick(self.quality),
            invalid=[r for r in self.invalid if r in keep], cold=[r for r in self.cold if r in keep]))


@dataclass(slots=True)
class RunData:
    """What a side reads of one run: its first stage's records (load levels are not mixed), output tok/s, roofline
    and clock events; its energy per output token, verdict and facts (whose metadata says whether it ran cold); its
    quality probe (protocol/probe.py), where it ran one."""

    records: list[RequestRecord]
    output_tokens_per_s: float | None
    energy_per_token_j: float | None
    valid: bool | None
    roofline: dict | None
    facts: RunFacts
    clocks: list[dict]
    probe: Probe | None = None


def _itl(records: Iterable[RequestRecord]) -> list[float]:
    """Every inter-token latency of the records (measure/latency.py)."""
    parts = [latency.itl_array(r.arrival_s, r.arrival_tokens) for r in records if len(r.arrival_s) > 1]
    return np.concatenate(parts).tolist() if parts else []


def side_of(labels: Sequence[str], runs: Iterable[RunData]) -> Side:
    """A side of runs: the measured, successful requests give the samples."""
    samples: dict[str, list[list[float]]] = {name: [] for name in LATENCIES}
    throughput, energy, invalid, lines, facts, clocks, cold = [], [], [], [], [], [], []
    quality: list[RunQuality] = []
    for label, run in zip(labels, runs):
        quality.append(run_quality(label, run.records, run.probe))
        good = [r for r in run.records if not r.warmup and r.ok]
        samples["ttft_s"].append([r.ttft_s for r in good])
        samples["e2e_s"].append([r.e2e_s for r in good])
        samples["tpot_s"].append([t for r in good if (t := r.tpot_s) is not None])
        samples["itl_s"].append(_itl(good))
        throughput.append(run.output_tokens_per_s)
        energy.append(run.energy_per_token_j)
        if run.valid is False:
            invalid.append(label)
        if run.facts.metadata.get("engine_run") == 1:
            cold.append(label)
        lines.append(run.roofline)
        facts.append(run.facts)
        clocks.append(run.clocks)
    return Side(run_ids=list(labels), samples=samples, output_tokens_per_s=throughput, energy_per_token_j=energy,
                invalid=invalid, roofline=lines, context=side_context(facts), clocks=clocks, cold=cold,
                quality=quality)


class NotAResult(ValueError):
    """A directory that holds no generation run written by `benchd run --out`; str() says why and what to do."""


def side_from_directories(paths: Sequence[Path]) -> Side:
    """Runs written by `benchd run --out`: summary.json and requests.jsonl give the same records and figures a
    daemon's store would."""

    def runs():
        for path in paths:
            yield _read_directory(Path(path))

    return side_of([str(p) for p in paths], runs())


def _read_directory(path: Path) -> RunData:
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
    metadata = summary.get("metadata") or {}
    facts = RunFacts(summary["spec"].get("name", "default"), metadata.get("label") or summary["spec"].get("label"),
                     metadata.get("started_at"), metadata.get("finished_at"), summary["spec"], metadata,
                     str((path / "report.html").resolve()), summary.get("hardware"))
    probe = metadata.get("probe")
    return RunData(records, first.get("output_tokens_per_s"), joules, summary.get("valid"), first.get("roofline"),
                   facts, first.get("clocks") or [], Probe.model_validate(probe) if probe else None)
