"""The runs whose latest writes the database has not taken yet (journaled, or held in memory while the journal takes
none): what a read of such a run answers, so that a run's URL answers from the moment its 202 is sent whether the
database is locked, unreachable or on a full disk."""

from __future__ import annotations

import threading
from typing import Any

from benchd.store.operations import dates

TIMES = ("created_at", "started_at", "finished_at")


def _run_of(op: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The run an operation writes, and the columns it sets (store/operations.py); None for the others."""
    kind = op.get("op")
    if kind == "create_run":
        return op["run"]["id"], op["run"]
    if kind in ("update_run", "finish_run"):
        return op["id"], op["values"]
    return None, {}


class Unapplied:
    """Told by the spool of each operation as it is submitted and once it is applied, both under the spool's lock,
    so a run's entry goes exactly when its latest write is in the database."""

    def __init__(self) -> None:
        self._runs: dict[str, tuple[int, dict[str, Any]]] = {}  # run id → (its latest write's seq, the values)
        self._lock = threading.Lock()
        self.version = 0  # counts applied writes: a read that saw it change reads again

    def submitted(self, seq: int, op: dict[str, Any]) -> None:
        run_id, values = _run_of(op)
        if run_id is not None:
            with self._lock:
                self._runs[run_id] = (seq, {**self._runs.get(run_id, (0, {}))[1], **values})

    def applied(self, seq: int, op: dict[str, Any]) -> None:
        run_id, _ = _run_of(op)
        with self._lock:
            self.version += 1
            if run_id is not None and self._runs.get(run_id, (seq + 1, {}))[0] <= seq:
                del self._runs[run_id]

    def run(self, run_id: str) -> dict[str, Any] | None:
        """The columns its writes not yet in the database set (times as datetimes), or None."""
        with self._lock:
            found = self._runs.get(run_id)
        return dates(found[1], *TIMES) if found is not None else None
