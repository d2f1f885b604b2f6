"""A run's request records written while it runs (about once a second, and at its end), so a process killed
mid-run keeps what was measured up to the last flush."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from benchd.measure.records import RequestRecord
from benchd.store.operations import Requests

if TYPE_CHECKING:
    from benchd.store.database import Store


@dataclass(slots=True)
class StageRequests:
    """One stage's records being written while the run goes on (one GPU's, in a run on every GPU)."""

    index: int
    label: str
    origin: float  # the stage's start: stamps are stored relative to it
    gpu: str = ""


class RequestWriter:
    """A run's request records, written about once a second while it runs (and at its end), so a process killed
    mid-run keeps what was measured up to the last flush. add() runs on the thread that finishes records."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store, self.run_id = store, run_id
        self._waiting: list[tuple[StageRequests, RequestRecord]] = []
        self._added: set[tuple[int, str, int]] = set()
        store.spool.add_buffer(run_id, self.drain)

    def add(self, stage: StageRequests, record: RequestRecord) -> None:
        self._added.add((stage.index, stage.gpu, record.index))
        self._waiting.append((stage, record))  # list.append: atomic, no lock on the finishing thread

    def drain(self) -> dict[str, Any] | None:
        waiting, self._waiting = self._waiting, []
        if not waiting:
            return None
        rows = [{"stage_index": stage.index, "gpu": stage.gpu, **record.to_row(stage.label, stage.origin)}
                for stage, record in waiting]
        return Requests(self.run_id, rows).as_json()

    def close(self, stages: Iterable[tuple[StageRequests, Iterable[RequestRecord]]] = ()) -> None:
        """Journal what is left, with the stages' records that never finished, and stop flushing."""
        self.store.spool.remove_buffer(self.run_id)
        for stage, records in stages:
            self._waiting.extend((stage, r) for r in records if (stage.index, stage.gpu, r.index) not in self._added)
        op = self.drain()
        if op is not None:
            self.store.spool.submit(op)
