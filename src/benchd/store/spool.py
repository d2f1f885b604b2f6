"""The store's write path: every write is an operation appended to an on-disk journal, then applied in order by
one thread that retries with backoff while the database is unreachable, so an outage delays writes, never loses
them, and a process killed with -9 finds what it had journaled when it starts again. A journal that cannot take a
write (a full disk, an I/O error, a read-only remount) never fails its caller: the operation is held in memory, in
order, applied when the database takes it and journaled when the disk does again; meanwhile the store says it takes
no writes (takes_writes), and the daemon starts no run and admits none."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy.exc as sa_exc

from benchd.store.journal import Journal, disk_error

log = logging.getLogger("benchd.store")

BACKOFF_S = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0)  # between retries of an unreachable database
JOURNAL_RETRY_S = 1.0  # between tries of a journal that could not take a write
READY = "ready"  # not journaled: the point after the earlier process's operations


def unreachable(error: BaseException) -> bool:
    """The database could not be reached, is restarting, or every connection of the pool stayed in use (a flood of
    reads): retry later. Anything else is about the data."""
    if isinstance(error, (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.DisconnectionError,
                          sa_exc.TimeoutError)):
        return True
    return isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated


HELD = None  # a _Pending's end while the journal has not taken it: held in memory
UNJOURNALED = -1  # READY's end: never journaled


@dataclass(slots=True)
class _Pending:
    seq: int
    op: dict[str, Any]
    end: int | None  # the journal offset just after this operation's line; HELD, UNJOURNALED


@dataclass(slots=True)
class SpoolState:
    state: str = "starting"  # starting | ok | degraded (the database is unreachable; writes wait in the journal)
    pending: int = 0
    journal_bytes: int = 0  # written but not yet applied
    last_error: str | None = None
    rejected: int = 0  # operations the database refused for their data (kept in rejected.jsonl)
    journal_error: str | None = None  # why the journal takes no writes, while it does not
    held: int = 0  # operations held in memory meanwhile


class Watch(Protocol):
    """Told of each operation under the spool's lock: as it is submitted, and once applied (or set aside)."""

    def submitted(self, seq: int, op: dict[str, Any]) -> None: ...

    def applied(self, seq: int, op: dict[str, Any]) -> None: ...


class Spool:
    """Journals operations and applies them in order on its own thread with apply(op). start() runs prepare()
    (migrations) until the database answers, then applies what an earlier process journaled, then runs on_ready()
    (recovery), then the operations submitted since."""

    def __init__(self, directory: Path, apply: Callable[[dict[str, Any]], None], max_bytes: int,
                 on_error: Callable[[str], None] = lambda component: None, watch: Watch | None = None) -> None:
        self.directory = directory
        self.journal: Journal | None = None  # opened by start(): a store only read from writes no files
        self.apply, self.max_bytes, self.on_error, self.watch = apply, max_bytes, on_error, watch
        self.status = SpoolState()
        self._pending: deque[_Pending] = deque()
        self._held: deque[_Pending] = deque()  # those the journal has not taken, in order (each also in _pending)
        self._journal_retry = 0.0  # time.monotonic() of the next try, while the journal takes no writes
        self.on_writable: Callable[[], None] = lambda: None  # the journal takes writes again
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
        self._pending.append(_Pending(self._seq, {"op": READY}, UNJOURNALED))
        self._thread.start()

    @property
    def _opened(self) -> Journal:
        """The journal start() opened: every write comes after it."""
        assert self.journal is not None
        return self.journal

    def submit(self, op: dict[str, Any]) -> int:
        """Journal the operation (durable once this returns, unless the journal takes no writes: then it is held in
        memory, behind those held before it) and queue it; its sequence number. Never raises for the disk."""
        with self._cond:
            self._seq += 1
            item = _Pending(self._seq, op, HELD)
            if not self._held:
                try:
                    item.end = self._opened.append(op)
                    self.status.journal_error = None
                except OSError as error:
                    self._journal_failed(error)
            if item.end is HELD:
                self._held.append(item)
            self._pending.append(item)
            self.status.held = len(self._held)
            if self.watch is not None:
                self.watch.submitted(item.seq, op)
            self._cond.notify_all()
            return self._seq

    @property
    def alive(self) -> bool:
        """The thread that applies runs (or has not started yet, or was closed)."""
        return self._closing or self._thread.ident is None or self._thread.is_alive()

    def takes_writes(self) -> bool:
        """Whether the journal takes writes (what the store is given is durable at once)."""
        return self.status.journal_error is None

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
        if self._held:
            log.error("%d writes held in memory while the journal took none are lost (%s)", len(self._held),
                      self.status.journal_error)
        if self.journal is not None:
            self.journal.close()

    # ---- the thread ------------------------------------------------------------------------------

    def _loop(self) -> None:
        if not self._until_ok(self._prepare):
            return
        while True:
            self._drain_buffers()
            if self._journal_held():
                self.on_writable()
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
                log.error("the store refused an operation (%s): kept in %s", error, self._opened.rejected_path)
                self._opened.reject(item.op, f"{type(error).__name__}: {error}")
                self.status.rejected += 1
                self.on_error("store")
            self._done(item)

    def _done(self, item: _Pending) -> None:
        self._backoff = 0
        with self._cond:
            self._pending.popleft()
            if item.end is HELD:  # in the database: it need not be journaled any more
                self._held.popleft()
                self.status.held = len(self._held)
            elif item.end >= 0:
                self._opened.applied(item.end)
            self._applied = item.seq
            if self.watch is not None:
                self.watch.applied(item.seq, item.op)
            self.status.state, self.status.last_error = "ok", None
            self._cond.notify_all()

    def _outage(self, error: BaseException) -> None:
        first = self.status.state != "degraded"
        self.status.state = "degraded"
        self.status.last_error = f"{type(error).__name__}: {str(error).splitlines()[0]}"
        if first:
            log.warning("the database is unreachable (%s): writes wait in %s", self.status.last_error,
                        self._opened.path)
        delay = BACKOFF_S[min(self._backoff, len(BACKOFF_S) - 1)]
        self._backoff += 1
        with self._cond:
            self._cond.wait_for(lambda: self._closing, delay)

    def _journal_failed(self, error: OSError) -> None:
        """Under the lock: the journal did not take a write."""
        if self.status.journal_error is None:
            log.error("the write journal %s takes no writes (%s): writes are held in memory, no run starts until "
                      "it does again", self._opened.path, error)
        self.status.journal_error = f"the write journal takes no writes: {disk_error(error)}"
        self._journal_retry = time.monotonic() + JOURNAL_RETRY_S

    def _journal_held(self) -> bool:
        """On the spool's thread: the operations held in memory journaled, in order, once the journal takes writes
        again (tried at most every JOURNAL_RETRY_S); whether it has just come back."""
        with self._cond:
            if self.status.journal_error is None or time.monotonic() < self._journal_retry:
                return False
            try:
                if not self._held:  # all of them applied meanwhile: whether the disk takes a write now
                    self._opened.probe()
                while self._held:
                    self._held[0].end = self._opened.append(self._held[0].op)
                    self._held.popleft()
                    self.status.held = len(self._held)
            except OSError as error:
                self._journal_failed(error)
                return False
            self.status.journal_error = None
            log.warning("the write journal takes writes again")
            self._cond.notify_all()
            return True

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
        self.status.journal_bytes = self._opened.unapplied_bytes
