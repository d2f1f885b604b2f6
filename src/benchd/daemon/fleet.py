"""This node's place in the fleet, read from the shared store on a thread of the daemon's own (never the run loop's
nor HTTP's): after each run of a workload and every BENCHD_FLEET__REFRESH_S, for each workload this node ran in the
fleet's window, and exported as gauges (telemetry/fleet.py); and the fleet's report, as GET /fleet and
`benchd fleet` read it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from benchd.daemon.queue import Job
from benchd.measure.cost import Prices
from benchd.measure.fleet import FleetSettings
from benchd.measure.fleet_changes import FleetReport, classify
from benchd.measure.fleet_place import view
from benchd.measure.result import RunResult
from benchd.store import fleet, history
from benchd.store.database import Store
from benchd.telemetry import fleet as gauges
from benchd.telemetry.metrics import Metrics

log = logging.getLogger("benchd.daemon.fleet")

CHANGES_MAX = 1_000  # active change points a report reads at most (newest first)


def report(store: Store, settings: FleetSettings, prices: Prices, workload: str | None = None,
           device: str | None = None, node: str | None = None, max_rows: int = 100_000) -> FleetReport:
    """The fleet's groups (of one workload, or every one) over the window, each node's place (or one node's), and
    the change points of their workloads told the node's or the fleet's. fleet.TooMany past max_rows."""
    since = datetime.now(UTC) - timedelta(seconds=settings.max_age_s)
    runs = fleet.rows(store, since, workload, device, max_rows=max_rows)
    found = view(runs, settings, prices, node)
    workloads = {g.workload for g in found.groups}
    changes = [c for c in history.list_change_points(store, workload, active=True, limit=CHANGES_MAX).items
               if c.workload in workloads and (device is None or c.device == device)]
    told = classify(changes, runs, settings.change_window_s)
    if node is not None:
        told = [c for c in told if node in c.nodes or c.scope == "fleet"]
    return FleetReport(**found.model_dump(), changes=told)


class Fleet:
    def __init__(self, settings: FleetSettings, prices: Prices, store: Store, metrics: Metrics | None, node: str,
                 max_rows: int = 100_000, on_error: Callable[[str], None] = lambda component: None) -> None:
        self.settings, self.prices, self.store, self.metrics, self.node = settings, prices, store, metrics, node
        self.max_rows, self.on_error = max_rows, on_error
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="benchd-fleet", daemon=True)
        self.refreshed = threading.Event()  # set after each refresh (tests wait on it)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._closing.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def ran(self, job: Job, result: RunResult) -> None:
        """A run ended: this node's places are read again (its own run moved them)."""
        if result.status == "succeeded" and job.spec.kind == "generate":
            self._wake.set()

    def _loop(self) -> None:
        while not self._closing.is_set():
            try:
                self.refresh()
            except Exception:  # the thread's boundary: the store may be down; the next tick reads again
                log.exception("reading this node's place in the fleet failed")
                self.on_error("fleet")
            finally:
                self.refreshed.set()
            self._wake.wait(self.settings.refresh_s)
            self._wake.clear()

    def refresh(self) -> None:
        """Each workload this node ran in the window: its place among the nodes of its GPU model, as gauges."""
        if self.metrics is None:
            return
        self.store.flush(10)
        since = datetime.now(UTC) - timedelta(seconds=self.settings.max_age_s)
        mine = {r.workload for r in fleet.rows(self.store, since, node=self.node, max_rows=self.max_rows)}
        for workload in sorted(mine)[:self.metrics.max_workloads]:
            try:
                runs = fleet.rows(self.store, since, workload, max_rows=self.max_rows)
            except fleet.TooMany:
                log.warning("the fleet of %s holds more runs than BENCHD_READS__FLEET_MAX_ROWS: no place", workload)
                continue
            found = view(runs, self.settings, self.prices, self.node)
            gauges.places(self.metrics, workload, [(g, p) for g in found.groups for p in g.places])
