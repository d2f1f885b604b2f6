"""After each run, its workload's series on this node analysed for change points, on a thread of the daemon's own
(never the run loop's nor HTTP's); each change point matched with those stored, explained by the stack between its
segments, exported, and confirmed by an interleaved matrix between two declared environments when asked."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from benchd.daemon.queue import Job, QueueFull
from benchd.measure.history import (
    FIGURES,
    ChangePoint,
    Confirmation,
    Found,
    HistorySettings,
    Series,
    find,
    segment_view,
    series_of,
    stack_difference,
)
from benchd.measure.matrix import MatrixComparison
from benchd.measure.quality import QualityComparison
from benchd.measure.result import RunResult
from benchd.measure.stack import stack_of
from benchd.spec.matrix import MatrixSpec, parse_matrix
from benchd.store import history
from benchd.store.database import Store
from benchd.supervisor.environments import CURRENT
from benchd.telemetry import comparisons
from benchd.telemetry.metrics import Metrics

log = logging.getLogger("benchd.daemon.history")

NEAR = 20  # runs read on each side of a change point for the stack between its segments
STORED_MAX = 1_000  # a workload's change points on this node matched against a new analysis at most


class NotConfirmable(ValueError):
    """A change point whose two sides cannot be run again here; str() says why."""


def _now() -> datetime:
    return datetime.now(UTC)


class History:
    def __init__(self, settings: HistorySettings, store: Store, metrics: Metrics | None, node: str,
                 environments: set[str], submit_matrix: Callable[[MatrixSpec], tuple[str, list[str]]] | None = None,
                 confidence: float = 0.95, on_error: Callable[[str], None] = lambda component: None) -> None:
        self.settings, self.store, self.metrics, self.node = settings, store, metrics, node
        self.environments = environments | {CURRENT}  # those a confirmation may run in
        self.submit_matrix, self.confidence, self.on_error = submit_matrix, confidence, on_error
        self._pending: list[str] = []  # workloads waiting for their analysis, each once
        self._wake = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._loop, name="benchd-history", daemon=True)
        self._lock = threading.Lock()  # one analysis or confirmation at a time
        self.analysed = threading.Event()  # set after each analysis (tests wait on it)
        # Analyses made of each workload: a /history answer built before the latest is no longer served
        # (api/history.py keeps them); read without a lock, an int replaced whole.
        self.analyses: dict[str, int] = {}

    # ---- the thread --------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def ran(self, job: Job, result: RunResult) -> None:
        """A run ended: its workload's series is analysed (a matrix's runs are its experiment, not the history)."""
        if (not self.settings.enabled or job.matrix is not None or result.status != "succeeded"
                or job.spec.kind != "generate"):
            return
        with self._wake:
            if job.spec.name not in self._pending:
                self._pending.append(job.spec.name)
            self._wake.notify()

    def _loop(self) -> None:
        try:
            self.export_stored()
        except Exception:  # the store may be down at start: the gauges come with the next analysis
            log.exception("reading the stored change points failed")
            self.on_error("history")
        while True:
            with self._wake:
                while not self._pending and not self._closing:
                    self._wake.wait()
                if self._closing:
                    return
                workload = self._pending.pop(0)
            try:
                self.analyse(workload)
            except Exception:  # the thread's boundary: the next run analyses again
                log.exception("analysing the history of %s failed", workload)
                self.on_error("history")
            finally:
                self.analysed.set()

    # ---- an analysis -------------------------------------------------------------------------------

    def analyse(self, workload: str) -> list[ChangePoint]:
        """The workload's series on this node: change points found, matched with those stored (the same one when
        within min_runs runs of it), new ones counted, those no longer found withdrawn. The found ones."""
        with self._lock:
            self.store.flush(10)
            s = self.settings
            runs = history.series_runs(self.store, workload, s.window, node=self.node)
            stored = history.list_change_points(self.store, workload, node=self.node, limit=STORED_MAX).items
            out, new = [], []
            for series in series_of(workload, runs):
                found = find(series, s.alpha, s.min_runs, s.penalty, self.confidence, s.min_relative_change)
                views, fresh = self._reconcile(series, found, [c for c in stored if c.device == series.device])
                out.extend(views)
                new.extend(fresh)
            if self.metrics is not None:
                comparisons.change_points(self.metrics, workload, out, new)
            self.store.flush(10)
            self.analyses[workload] = self.analyses.get(workload, 0) + 1
            if s.confirm and self.submit_matrix is not None:
                for change in new:
                    try:
                        self.confirm(change.id, automatic=True)
                    except NotConfirmable:  # not two declared environments: explained, not confirmable here
                        pass
                    except QueueFull as error:  # by hand later (POST /changes/{id}/confirm)
                        log.warning("change point %s not confirmed: %s", change.id, error)
            return out

    def _reconcile(self, series: Series, found: list[Found],
                   stored: list[ChangePoint]) -> tuple[list[ChangePoint], list[ChangePoint]]:
        now = _now()
        stacks = self._stacks(found)
        rows, views, fresh, matched = [], [], [], set()
        for f in found:
            position = {run.run_id: i for i, run in enumerate(f.runs)}
            same = [c for c in stored if c.figure == f.figure and c.id not in matched and c.run_id in position
                    and abs(position[c.run_id] - f.split.index) <= self.settings.min_runs]
            known = min(same, key=lambda c: abs(position[c.run_id] - f.split.index)) if same else None
            before, after = f.runs[max(f.split.before.start, f.split.index - NEAR):f.split.index], \
                f.runs[f.split.index:min(f.split.after.end, f.split.index + NEAR)]
            view = ChangePoint(
                id=known.id if known else uuid.uuid4().hex, workload=series.workload, device=series.device,
                node=series.node, figure=f.figure, run_id=f.run_id, at=f.runs[f.split.index].at,
                direction=f.direction(), relative_change=f.split.relative_change, ci_low=f.split.ci_low,
                ci_high=f.split.ci_high, p_value=f.split.p_value, confidence=self.confidence,
                before=segment_view(f.runs, f.split.before), after=segment_view(f.runs, f.split.after),
                stack=stack_difference([stacks[r.run_id] for r in before if r.run_id in stacks],
                                       [stacks[r.run_id] for r in after if r.run_id in stacks]),
                detected_at=known.detected_at if known else now,
                confirmation=known.confirmation if known else None)
            if known is not None:
                matched.add(known.id)
            if known is None or not known.active:
                fresh.append(view)
            rows.append(history.row_of(view))
            views.append(view)
        # Those in the window no longer found: withdrawn (kept, with their explanation, but no longer current).
        held = {run.run_id for run in series.runs}
        withdrawn = [c.id for c in stored if c.active and c.id not in matched and c.run_id in held]
        if rows or withdrawn:
            history.save(self.store, rows, withdrawn, now)
        return views, fresh

    def _stacks(self, found: list[Found]) -> dict[str, dict[str, str]]:
        ids = list(dict.fromkeys(r.run_id for f in found for r in f.runs[
            max(f.split.before.start, f.split.index - NEAR):min(f.split.after.end, f.split.index + NEAR)]))
        out = {}
        for start in range(0, len(ids), history.MAX_STACKS):
            for run_id, row in history.stacks(self.store, ids[start:start + history.MAX_STACKS]).items():
                out[run_id] = stack_of(row["spec"], row["run_metadata"], row["hardware"], row["node"])
        return out

    # ---- /metrics ------------------------------------------------------------------------------------

    def export_stored(self) -> None:
        """At start: the gauges from the change points this node's history holds (the counter starts at 0)."""
        if self.metrics is None:
            return
        active = history.list_change_points(self.store, node=self.node, active=True, limit=STORED_MAX).items
        by_workload: dict[str, list[ChangePoint]] = {}
        for change in reversed(active):  # oldest first
            by_workload.setdefault(change.workload, []).append(change)
        for workload, changes in by_workload.items():
            comparisons.latest_changes(self.metrics, workload, changes)

    # ---- confirmation --------------------------------------------------------------------------------

    def confirm(self, change_id: str, automatic: bool = False) -> ChangePoint:
        """Queue an interleaved matrix between the environments of the change point's two sides, on the device its
        runs ran on; the verdict is attached when it ends (concluded()). The other change points of the series at
        the same switch of environments share it."""
        change = history.get_change_point(self.store, change_id)
        if change is None:
            raise KeyError(change_id)
        if automatic and change.confirmation is not None:  # a sibling's matrix already checks it
            return change
        if change.node != self.node:
            raise NotConfirmable(f"change point {change_id} is of node {change.node}: its daemon confirms it")
        if self.submit_matrix is None:
            raise NotConfirmable("this daemon runs no matrices")
        pair = _environments(change)
        if pair is None:
            raise NotConfirmable("both sides ran in the same environment: nothing to run against each other (the "
                                 "stack between them: " + (", ".join(f"{c.field} {c.before} → {c.after}"
                                                                     for c in change.stack) or "the same") + ")")
        undeclared = [e for e in pair if e not in self.environments]
        if undeclared:
            raise NotConfirmable(f"environment {', '.join(map(repr, undeclared))} is not declared on this daemon "
                                 "(BENCHD_ENVIRONMENTS): its side cannot be run again")
        series = [c for c in history.list_change_points(self.store, change.workload, node=self.node, active=True,
                                                        limit=STORED_MAX).items
                  if c.device == change.device and _environments(c) == pair]
        shared = next((c.confirmation for c in series if c.confirmation is not None
                       and c.confirmation.matrix_id is not None and c.confirmation.status != "failed"), None)
        if automatic and shared is not None:  # another figure of the same switch has its matrix: that one judges
            self._attach(change, shared)
        else:
            confirmation = Confirmation(status="scheduled", matrix_id=self._matrix(change, pair),
                                        environments=list(pair), requested_at=_now())
            for c in series:
                if c.id == change.id or c.confirmation is None or c.confirmation.status == "failed":
                    history.confirm(self.store, c.id, confirmation.model_dump(mode="json"), confirmation.matrix_id)
        self.store.flush(10)
        return history.get_change_point(self.store, change_id) or change

    def _matrix(self, change: ChangePoint, pair: tuple[str, str]) -> str:
        """The series' spec (its new segment's first run's) over the two environments, on the device it ran on."""
        first = history.stacks(self.store, [change.after.first_run])[change.after.first_run]
        spec, metadata = dict(first["spec"]), first["run_metadata"] or {}
        if str(metadata.get("device", "")).startswith("cuda"):
            spec["device"] = metadata["device"]  # the same GPU the series ran on
        spec.pop("environment", None)
        spec.pop("requirements", None)
        matrix = parse_matrix({**spec, "matrix": {"environment": list(pair)},
                               "repeats": self.settings.confirm_repeats})
        assert self.submit_matrix is not None  # confirm() asked first
        return self.submit_matrix(matrix)[0]

    def _attach(self, change: ChangePoint, shared: Confirmation) -> None:
        """A matrix that already checks the same switch: still running, the change point waits for it; ended, its
        verdict on this change point's figure."""
        if shared.status == "scheduled":
            history.confirm(self.store, change.id, shared.model_dump(mode="json"), shared.matrix_id)
            return
        assert shared.matrix_id is not None  # confirm() shares a confirmation with its matrix only
        row = self.store.get_matrix(shared.matrix_id) or {}
        comparison = MatrixComparison.model_validate(row["comparison"]) if row.get("comparison") else None
        waiting = change.model_copy(update={"confirmation": shared})
        found = judge(waiting, row.get("status"), row.get("error"), comparison)
        history.confirm(self.store, change.id, found.model_dump(mode="json"), shared.matrix_id)

    def concluded(self, matrix_id: str) -> None:
        """A matrix ended: if it confirms change points, each gets the matrix's verdict on its figure."""
        waiting = history.by_matrix(self.store, matrix_id)
        if not waiting:
            return
        row = self.store.get_matrix(matrix_id) or {}
        comparison = MatrixComparison.model_validate(row["comparison"]) if row.get("comparison") else None
        for change in waiting:
            verdict = judge(change, row.get("status"), row.get("error"), comparison)
            history.confirm(self.store, change.id, verdict.model_dump(mode="json"), matrix_id)
        self.store.flush(10)


def _environments(change: ChangePoint) -> tuple[str, str] | None:
    """The two sides' environments, when they differ (the daemon's own is current when a run named none)."""
    found = next((c for c in change.stack if c.field == "environment"), None)
    if found is None:
        return None
    return found.before or CURRENT, found.after or CURRENT


def judge(change: ChangePoint, status: str | None, error: str | None,
          comparison: MatrixComparison | None) -> Confirmation:
    """The matrix's verdict on the change point's figure: confirmed when its interval lies on the change's side of
    no change, not reproduced when it lies within the threshold (equivalent) or on the other side (the series changed
    with the node, not with the stack), inconclusive with too few samples or an interval too wide for either."""
    base = change.confirmation.model_dump() if change.confirmation is not None else {}
    base.update(status="failed", reason=None)
    if status != "succeeded" or comparison is None:
        return Confirmation(**{**base, "reason": f"the matrix {status}: {error or 'it did not finish'}"})
    variant = next((v for v in comparison.variants if not v.baseline), None)
    if change.figure == "perplexity" and variant is not None and variant.quality is not None:
        return _quality_confirmation(base, variant.quality)
    metric = next((m for m in variant.metrics if m.metric == change.figure), None) if variant else None
    if metric is None or metric.ci_low is None or metric.ci_high is None:
        why = metric.reason if metric is not None and metric.reason else f"no {change.figure} in the comparison"
        return Confirmation(**{**base, "status": "inconclusive", "reason": why,
                               "relative_change": metric.relative_change if metric else None})
    figures = {"relative_change": metric.relative_change, "ci_low": metric.ci_low, "ci_high": metric.ci_high}
    label = FIGURES[change.figure].name
    same_side = metric.ci_low > 0 if change.relative_change > 0 else metric.ci_high < 0
    if same_side:
        return Confirmation(**{**base, **figures, "status": "confirmed", "reason": (
            f"{label} {metric.relative_change:+.1%} [{metric.ci_low:+.1%}, {metric.ci_high:+.1%}] between the two "
            f"environments, interleaved on one device")})
    other_side = metric.ci_high < 0 if change.relative_change > 0 else metric.ci_low > 0
    if other_side or metric.verdict == "equivalent":
        return Confirmation(**{**base, **figures, "status": "not reproduced", "reason": (
            f"{label} {metric.relative_change:+.1%} [{metric.ci_low:+.1%}, {metric.ci_high:+.1%}] between the two "
            "environments, interleaved on one device: the stack does not reproduce the change (a change of the "
            "node?)")})
    # An interval that holds no change but also reaches far beyond it (a few rounds at the verdicts' confidence) says
    # neither: more rounds (BENCHD_HISTORY__CONFIRM_REPEATS) narrow it.
    return Confirmation(**{**base, **figures, "status": "inconclusive", "reason": (
        f"{label} {metric.relative_change:+.1%} [{metric.ci_low:+.1%}, {metric.ci_high:+.1%}] between the two "
        "environments, interleaved on one device: the interval holds no change and reaches past the threshold, too "
        "wide to confirm the change or rule it out")})


def _quality_confirmation(base: dict, quality: QualityComparison) -> Confirmation:
    """A change of the probe's perplexity, by the matrix's quality verdict on the two environments: the probe
    different beyond the baseline's noise confirms it, the same does not."""
    status = {"different": "confirmed", "same": "not reproduced"}.get(quality.verdict, "inconclusive")
    return Confirmation(**{**base, "status": status, "reason": f"the two environments' quality, interleaved on one "
                                                               f"device: {quality.verdict} ({quality.reason})"})
