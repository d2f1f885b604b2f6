"""The two sides of a comparison, read: runs a daemon stored, or directories `benchd run --out` wrote, each run's
first stage's requests, run-level figures, facts, outputs and quality probe (measure/compare.py compares them)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from benchd.measure.bootstrap import in_time
from benchd.measure.compare import COMPARED, LATENCIES, REQUESTS_FILE, Side
from benchd.measure.context import SPREAD_RUNS, RunFacts, side_context, stage_figures
from benchd.measure.quality import RunQuality, run_quality
from benchd.measure.records import RequestRecord
from benchd.protocol.probe import Probe
from benchd.spec.documents import parse_json

# Each run: its first stage's records, output tok/s, roofline and clock events; its energy per token, verdict, facts;
# its quality probe.
Run = tuple[list[RequestRecord], float | None, float | None, bool | None, dict | None, RunFacts, list[dict],
            Probe | None]


def _side(labels: Sequence[str], runs: Iterable[Run]) -> Side:
    """Each run's first-stage records (load levels are not mixed), output tok/s, energy per token, verdict,
    roofline and facts: the measured, successful requests give the samples, ITL exactly as the records define it
    (each arrival keeps how many tokens it carried)."""
    samples: dict[str, list[list[float]]] = {name: [] for name in LATENCIES}
    throughput, energy, invalid, lines, facts, clocks = [], [], [], [], [], []
    quality: list[RunQuality] = []
    for label, (records, tokens_per_s, joules, valid, line, fact, clock, probe) in zip(labels, runs):
        quality.append(run_quality(label, records, probe))
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
        facts.append(fact)
        clocks.append(clock)
    return Side(run_ids=list(labels), samples=samples, output_tokens_per_s=throughput, energy_per_token_j=energy,
                invalid=invalid, roofline=lines, context=side_context(facts), clocks=clocks, quality=quality)


def _iso(value) -> str | None:
    return value.isoformat() if hasattr(value, "isoformat") else value


def side_from_store(store, run_ids: Sequence[str], deadline: float | None = None) -> Side:
    """Runs a daemon stored; a side of one run gets the figures of the newest succeeded, valid runs of its workload,
    model, engine and label (history), whose run-to-run spread compare() takes. OverBudget once deadline, a
    time.monotonic(), has passed."""
    rows = []

    def runs():
        for run_id in run_ids:
            in_time(deadline)
            row = store.get_run(run_id)
            if row is None:
                raise KeyError(run_id)
            rows.append(row)
            first = row["summary"][0] if row["summary"] else {}
            facts = RunFacts(row["workload"], row.get("label"), _iso(row.get("started_at") or row.get("created_at")),
                             _iso(row.get("finished_at")), row.get("spec") or {}, row.get("run_metadata") or {},
                             f"runs/{run_id}/report")
            yield (store.records(run_id, stage_index=0), first.get("output_tokens_per_s"),
                   row.get("energy_per_token_j"), row.get("valid"), first.get("roofline"), facts,
                   first.get("clocks") or [], Probe.model_validate(row["probe"]) if row.get("probe") else None)

    side = _side(run_ids, runs())
    if len(rows) == 1:
        in_time(deadline)
        (row,) = rows
        page = store.list_runs(status="succeeded", workload=row["workload"], model=row["model"], limit=SPREAD_RUNS)
        history = {r["id"]: stage_figures(r["summary"][0], r.get("energy_per_token_j"), LATENCIES, COMPARED)
                   for r in page.items if r["summary"] and r.get("valid") is not False
                   and r["engine"] == row["engine"] and r.get("label") == row.get("label")
                   and (r.get("spec") or {}).get("kind", "generate") == "generate"}
        side = side.model_copy(update={"history": history})
    return side


class NotAResult(ValueError):
    """A directory that holds no generation run written by `benchd run --out`; str() says why and what to do."""


def side_from_directories(paths: Sequence[Path]) -> Side:
    """Runs written by `benchd run --out`: summary.json and requests.jsonl give the same records and figures a
    daemon's store would."""

    def runs():
        for path in paths:
            yield _read_directory(Path(path))

    return _side([str(p) for p in paths], runs())


def _read_directory(path: Path) -> Run:
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
                     str((path / "report.html").resolve()))
    probe = metadata.get("probe")
    return (records, first.get("output_tokens_per_s"), joules, summary.get("valid"), first.get("roofline"), facts,
            first.get("clocks") or [], Probe.model_validate(probe) if probe else None)
