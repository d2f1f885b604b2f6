"""Running matrices: their runs in interleaved order through the one run lifecycle, in this process (the CLI, the
bench scripts) or through the daemon's run queue, and their comparison once every run has ended."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from benchd.daemon.queue import Job, RunQueue
from benchd.measure.compare import CONFIDENCE, THRESHOLD
from benchd.measure.matrix import (
    MatrixComparison,
    RunFigures,
    compare_matrix,
    figures_from_result,
    figures_from_store,
)
from benchd.measure.result import RunResult
from benchd.spec import RunSpec
from benchd.spec.matrix import MatrixSpec, Variant, interleaved
from benchd.stopping import StopSignal
from benchd.store.database import TERMINAL, Store
from benchd.telemetry import comparisons
from benchd.telemetry.metrics import Metrics

log = logging.getLogger("benchd.daemon.matrices")


def stored_variants(variants: list[Variant], specs: list[RunSpec] | None = None) -> list[dict]:
    """Variants as the store keeps them; specs: as they run (the daemon's fields filled in)."""
    return [{"index": v.index, "label": v.label, "values": v.values,
             "spec": (specs[v.index] if specs is not None else v.spec).model_dump(mode="json")} for v in variants]


# ---- in this process -----------------------------------------------------------------------------


@dataclass
class MatrixOutcome:
    matrix: MatrixSpec
    variants: list[Variant]
    baseline: int
    runs: list[tuple[int, int, str, RunResult]] = field(default_factory=list)  # round, variant, run id, result
    comparison: MatrixComparison | None = None

    @property
    def status(self) -> str:
        statuses = {result.status for *_, result in self.runs}
        if len(self.runs) < len(self.variants) * self.matrix.repeats:
            return "interrupted" if "interrupted" in statuses or not statuses else "cancelled"
        return "succeeded" if statuses == {"succeeded"} else "failed"


def run_matrix(matrix: MatrixSpec, execute: Callable[[str, Variant], RunResult], stop: StopSignal | None = None,
               on_run: Callable[[int, Variant, RunResult], None] | None = None, threshold: float = THRESHOLD,
               confidence: float = CONFIDENCE) -> MatrixOutcome:
    """Every variant once a round, `repeats` rounds, each run through execute; then
    the comparison. execute(run_id, variant) runs the variant's spec (a Lifecycle's execute). A stop ends the matrix
    after the run in progress, compared on what ran."""
    variants = matrix.variants()
    outcome = MatrixOutcome(matrix, variants, matrix.baseline_index(variants))
    for round_, index in interleaved(len(variants), matrix.repeats):
        if stop is not None and stop.is_set():
            break
        run_id = uuid.uuid4().hex
        result = execute(run_id, variants[index])
        outcome.runs.append((round_, index, run_id, result))
        if on_run is not None:
            on_run(round_, variants[index], result)
        if result.status == "interrupted":
            break
    figures: dict[int, list[RunFigures | None]] = {v.index: [] for v in variants}
    for _, index, run_id, result in outcome.runs:
        figures[index].append(figures_from_result(run_id, result))
    outcome.comparison = compare_matrix(variants, figures, outcome.baseline, threshold, confidence)
    return outcome


# ---- in the daemon -------------------------------------------------------------------------------


@dataclass
class _Open:
    workload: str
    run_ids: list[str]
    ended: set[str] = field(default_factory=set)
    started: bool = False
    schedule: str | None = None  # the declared schedule that submitted it: its comparison sets the regression gauges


class MatrixRuns:
    """The daemon's matrices: queued as their runs, followed as those end, compared (on a thread of their own:
    every variant's runs are read from the store) once the last has ended."""

    def __init__(self, store: Store, queue: RunQueue, metrics: Metrics | None, threshold: float, confidence: float,
                 on_error: Callable[[str], None] = lambda component: None) -> None:
        self.store, self.queue, self.metrics = store, queue, metrics
        self.threshold, self.confidence, self.on_error = threshold, confidence, on_error
        self._open: dict[str, _Open] = {}
        self._lock = threading.Lock()
        self.concluded = threading.Event()  # set each time a matrix is compared (tests wait on it)
        # Called with a matrix's id once it is compared (or failed to be): a change point it confirms reads it.
        self.listeners: list[Callable[[str], None]] = []

    def submit(self, matrix: MatrixSpec, specs: list[RunSpec], schedule: str | None = None) -> tuple[str, list[str]]:
        """specs: each variant's spec as it will run; schedule: the schedule whose matrix it is (its runs are the
        schedule's: it never piles up behind itself). The matrix's id and its runs' ids in execution order."""
        variants = matrix.variants()
        matrix_id = uuid.uuid4().hex
        order = interleaved(len(variants), matrix.repeats)
        jobs = [Job(uuid.uuid4().hex, specs[index], schedule, matrix=matrix_id) for _, index in order]
        rows = [{"run_id": job.run_id, "round": round_, "variant": index} for job, (round_, index) in zip(jobs, order)]
        workload = specs[0].name
        with self._lock:
            self._open[matrix_id] = _Open(workload, [job.run_id for job in jobs], schedule=schedule)
        try:  # the matrix is stored once its runs have room: a full queue stores nothing (a schedule's tick skips)
            self.queue.put_many(jobs, lambda job: self.store.create_run(
                job.run_id, job.spec.model_dump(mode="json"), schedule, matrix_id=matrix_id),
                placed=lambda: self.store.create_matrix(matrix_id, workload, matrix.document(),
                                                        stored_variants(variants, specs), rows,
                                                        matrix.baseline_index(variants)))
        except Exception:  # the queue is full: nothing of the matrix was queued, nor stored
            with self._lock:
                self._open.pop(matrix_id, None)
            raise
        return matrix_id, [job.run_id for job in jobs]

    def cancel(self, matrix_id: str, cancel_run: Callable[[str], str | None]) -> bool:
        """Cancel every run of an open matrix (it is then compared on what ran); False when it is not open."""
        with self._lock:
            state = self._open.get(matrix_id)
            pending = [] if state is None else [r for r in state.run_ids if r not in state.ended]
        for run_id in reversed(pending):  # the queued ones first: the current one then ends the matrix
            cancel_run(run_id)
        return state is not None

    def started(self, job: Job) -> None:
        with self._lock:
            matrix = job.matrix
            assert matrix is not None  # a matrix's run: its callers ask (daemon/service.py, daemon/followup.py)
            state = self._open.get(matrix)
            first = False
            if state is not None and not state.started:
                state.started = first = True
        if first:
            self.store.update_matrix(matrix, status="running", started_at=_now())

    def ended(self, job: Job, result: RunResult) -> None:
        with self._lock:
            matrix = job.matrix
            assert matrix is not None  # a matrix's run: its callers ask (daemon/service.py, daemon/followup.py)
            state = self._open.get(matrix)
            if state is None:
                return
            state.ended.add(job.run_id)
            done = len(state.ended) == len(state.run_ids)
            if done:
                del self._open[matrix]
        if done:
            threading.Thread(target=self._conclude, args=(matrix, state.schedule), name="benchd-matrix",
                             daemon=True).start()

    def _conclude(self, matrix_id: str, schedule: str | None = None) -> None:
        try:
            self.conclude(matrix_id, scheduled=schedule is not None)
        except Exception as error:  # the thread's boundary: the matrix fails with the reason, the daemon goes on
            log.exception("matrix %s could not be compared", matrix_id)
            self.on_error("matrix")
            self.store.update_matrix(matrix_id, status="failed", error=f"{type(error).__name__}: {error}")
        finally:
            for listener in self.listeners:
                try:
                    listener(matrix_id)
                except Exception:  # a listener's boundary: the matrix is stored, the others still hear of it
                    log.exception("a listener of matrix %s failed", matrix_id)
                    self.on_error("matrix")
            self.concluded.set()

    def conclude(self, matrix_id: str, scheduled: bool = False) -> MatrixComparison:
        self.store.flush(30)  # every run's requests are in the database
        row = self.store.get_matrix(matrix_id)
        assert row is not None  # a matrix submitted here, stored then; matrices are never deleted
        figures: dict[int, list[RunFigures | None]] = {v["index"]: [] for v in row["variants"]}
        for run in row["runs"]:
            figures[run["variant"]].append(figures_from_store(self.store, run["run_id"]))
        comparison = compare_matrix(row["variants"], figures, row["baseline"], self.threshold, self.confidence)
        statuses = [f.status for runs in figures.values() for f in runs if f is not None]
        status, error = "succeeded", None
        if any(s not in TERMINAL for s in statuses) or "cancelled" in statuses or "interrupted" in statuses:
            status = "cancelled" if "cancelled" in statuses else "interrupted"
        elif any(s != "succeeded" for s in statuses):
            failed = [f"{run['run_id']} ({status})" for run, status in zip(row["runs"], statuses)
                      if status != "succeeded"]
            status, error = "failed", f"{len(failed)} of {len(statuses)} runs did not succeed: {', '.join(failed)}"
        self.store.update_matrix(matrix_id, status=status, error=error,
                                 comparison=comparison.model_dump(mode="json"))
        if self.metrics is not None:
            comparisons.matrix(self.metrics, row["workload"], comparison)
        if scheduled and status == "succeeded" and self.metrics is not None:
            comparisons.matrix_regression(self.metrics, row["workload"], comparison)
        return comparison


def _now() -> str:
    from benchd.store.database import now

    return now().isoformat()
