"""The store's write path: every write is an operation appended to an on-disk journal, then applied in order by
one thread that retries with backoff while the database is unreachable, so an outage delays writes, never loses
them, and a process killed with -9 finds what it had journaled when it starts again."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy.exc as sa_exc

log = logging.getLogger("benchd.store")

BACKOFF_S = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0)  # between retries of an unreachable database
COMPACT_BYTES = 1 << 20  # a fully applied journal larger than this is truncated
READY = "ready"  # not journaled: the point after the earlier process's operations


def unreachable(error: BaseException) -> bool:
    """The database could not be reached, is restarting, or every connection of the pool stayed in use (a flood of
    reads): retry later. Anything else is about the data."""
    if isinstance(error, (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.DisconnectionError,
                          sa_exc.TimeoutError)):
        return True
    return isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated


@dataclass(slots=True)
class _Pending:
    seq: int
    op: dict[str, Any]
    end: int  # the journal offset just after this operation's line


@dataclass(slots=True)
class SpoolState:
    state: str = "starting"  # starting | ok | degraded (the database is unreachable; writes wait in the journal)
    pending: int = 0
    journal_bytes: int = 0  # written but not yet applied
    last_error: str | None = None
    rejected: int = 0  # operations the database refused for their data (kept in rejected.jsonl)


def dumps(value: Any) -> bytes:
    """JSON as json.dumps writes it compactly (NaN and infinities, which JSON lacks, become null)."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


class Journal:
    """journal.jsonl: one operation per line; cursor: the offset of the first line not yet applied."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "journal.jsonl"
        self.cursor_path = directory / "cursor"
        self.rejected_path = directory / "rejected.jsonl"
        self.file = self.path.open("ab")
        self.size = self.file.tell()
        self.cursor = int(self.cursor_path.read_text()) if self.cursor_path.exists() else 0

    @property
    def unapplied_bytes(self) -> int:
        return self.size - self.cursor

    def unapplied(self) -> list[tuple[dict[str, Any], int]]:
        """Operations after the cursor, with the offset each ends at (a torn last line is dropped)."""
        out, offset = [], self.cursor
        with self.path.open("rb") as f:
            f.seek(self.cursor)
            for line in f:
                offset += len(line)
                if not line.endswith(b"\n"):
                    break  # the process died mid-write: that operation never returned to its caller
                out.append((json.loads(line), offset))
        return out

    def append(self, op: dict[str, Any]) -> int:
        # orjson: one C call holds the GIL for the whole operation, and json took 33 ms for the 65,536 token stamps
        # of 256 requests finishing together (scrapes and ingestion waited); orjson 1.8 ms, the same text.
        self.file.write(dumps(op) + b"\n")
        self.file.flush()  # in the kernel's hands: a killed process loses nothing
        self.size = self.file.tell()
        return self.size

    def applied(self, end: int) -> None:
        if end == self.size and end > COMPACT_BYTES:  # everything applied: start the file again
            self.file.truncate(0)
            self.file.seek(0)
            self.size = end = 0
        self.cursor = end
        tmp = self.cursor_path.with_suffix(".tmp")
        tmp.write_text(str(end))
        os.replace(tmp, self.cursor_path)

    def reject(self, op: dict[str, Any], reason: str) -> None:
        with self.rejected_path.open("a") as f:
            f.write(json.dumps({"reason": reason, "op": op}) + "\n")

    def close(self) -> None:
        self.file.close()


class Spool:
    """Journals operations and applies them in order on its own thread with apply(op). start() runs prepare()
    (migrations) until the database answers, then applies what an earlier process journaled, then runs on_ready()
    (recovery), then the operations submitted since."""

    def __init__(self, directory: Path, apply: Callable[[dict[str, Any]], None], max_bytes: int,
                 on_error: Callable[[str], None] = lambda component: None) -> None:
        self.directory = directory
        self.journal: Journal | None = None  # opened by start(): a store only read from writes no files
        self.apply, self.max_bytes, self.on_error = apply, max_bytes, on_error
        self.status = SpoolState()
        self._pending: deque[_Pending] = deque()
        self._buffers: dict[str, Callable[[], dict[str, Any] | None]] = {}  # drained into operations each pass
        self._seq = 0
        self._applied = 0
        self._cond = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._loop, name="benchd-store", daemon=True)
        self.ready = threading.Event()  # migrations and recovery done
        self._backoff = 0
        self._prepare: Callable[[], None] = lambda: None
        self._on_ready: Callable[[], None] = lambda: None

    # ---- callers ---------------------------------------------------------------------------------

    def start(self, prepare: Callable[[], None], on_ready: Callable[[], None]) -> None:
        self._prepare, self._on_ready = prepare, on_ready
        self.journal = Journal(self.directory)
        for op, end in self.journal.unapplied():
            self._seq += 1
            self._pending.append(_Pending(self._seq, op, end))
        # What the earlier process journaled is applied before on_ready (recovery), and new operations after it.
        self._seq += 1
        self._pending.append(_Pending(self._seq, {"op": READY}, -1))
        self._thread.start()

    def submit(self, op: dict[str, Any]) -> int:
        """Journal the operation (durable once this returns) and queue it; its sequence number."""
        with self._cond:
            end = self.journal.append(op)
            self._seq += 1
            self._pending.append(_Pending(self._seq, op, end))
            self._cond.notify_all()
            return self._seq

    def wait(self, seq: int, timeout_s: float) -> bool:
        """Whether the operation was applied within timeout_s (it stays journaled either way)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._applied < seq:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def flush(self, timeout_s: float) -> bool:
        """Whether everything submitted so far (buffers included) was applied within timeout_s."""
        self._drain_buffers()
        with self._cond:
            seq = self._seq
        return self.wait(seq, timeout_s)

    def add_buffer(self, key: str, drain: Callable[[], dict[str, Any] | None]) -> None:
        """drain() is called on the spool's thread about once a second; an operation it returns is journaled."""
        with self._cond:
            self._buffers[key] = drain

    def remove_buffer(self, key: str) -> None:
        with self._cond:
            self._buffers.pop(key, None)

    def full(self) -> bool:
        return self.journal is not None and self.journal.unapplied_bytes > self.max_bytes

    def close(self, timeout_s: float = 10.0) -> None:
        """Apply what can be applied within timeout_s; the rest stays in the journal for the next start."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if self.journal is not None:
            self.journal.close()

    # ---- the thread ------------------------------------------------------------------------------

    def _loop(self) -> None:
        if not self._until_ok(self._prepare):
            return
        while True:
            self._drain_buffers()
            with self._cond:
                self._refresh()
                if not self._pending:
                    if self._closing:
                        return
                    self._cond.wait(1.0)
                    continue
                item = self._pending[0]
            if item.op["op"] == READY:
                if not self._until_ok(self._on_ready):
                    return
                self.ready.set()
                self._done(item)
                continue
            try:
                self.apply(item.op)
            except Exception as error:  # the spool's one boundary: retry an outage, set aside bad data
                if unreachable(error):
                    if self._closing:
                        return  # stays journaled
                    self._outage(error)
                    continue
                log.error("the store refused an operation (%s): kept in %s", error, self.journal.rejected_path)
                self.journal.reject(item.op, f"{type(error).__name__}: {error}")
                self.status.rejected += 1
                self.on_error("store")
            self._done(item)

    def _done(self, item: _Pending) -> None:
        self._backoff = 0
        with self._cond:
            self._pending.popleft()
            if item.end >= 0:
                self.journal.applied(item.end)
            self._applied = item.seq
            self.status.state, self.status.last_error = "ok", None
            self._cond.notify_all()

    def _outage(self, error: BaseException) -> None:
        first = self.status.state != "degraded"
        self.status.state = "degraded"
        self.status.last_error = f"{type(error).__name__}: {str(error).splitlines()[0]}"
        if first:
            log.warning("the database is unreachable (%s): writes wait in %s", self.status.last_error,
                        self.journal.path)
        delay = BACKOFF_S[min(self._backoff, len(BACKOFF_S) - 1)]
        self._backoff += 1
        with self._cond:
            self._cond.wait_for(lambda: self._closing, delay)

    def _until_ok(self, step: Callable[[], None]) -> bool:
        """Start-up steps (migrations, recovery) are retried until they succeed (the daemon serves meanwhile);
        False when the spool closed first."""
        while not self._closing:
            try:
                step()
                return True
            except Exception as error:  # the spool's boundary for start-up steps
                if not unreachable(error):
                    log.exception("the store could not be prepared")
                    self.on_error("store")
                self._outage(error)
        return False

    def _drain_buffers(self) -> None:
        with self._cond:
            drains = list(self._buffers.values())
        for drain in drains:
            try:
                op = drain()
            except Exception:  # a buffer's bug must not stop every other write
                log.exception("a request buffer failed to drain")
                self.on_error("store")
                continue
            if op is not None:
                self.submit(op)

    def _refresh(self) -> None:
        self.status.pending = len(self._pending)
        self.status.journal_bytes = self.journal.unapplied_bytes
