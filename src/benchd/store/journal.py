"""The spool's journal on disk: journal.jsonl holds one operation a line, cursor the offset of the first line not yet
applied. A line is written whole or not at all, and what the disk does not take (full, failing, read-only) is said
by an OSError to the spool, which holds the operation in memory meanwhile (store/spool.py)."""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger("benchd.store")

COMPACT_BYTES = 1 << 20  # a fully applied journal larger than this is truncated


def disk_error(error: OSError) -> str:
    """An OSError as an operator reads it, without the path (the answers that carry it are anonymous)."""
    name = errno.errorcode.get(error.errno, "") if error.errno is not None else ""
    return f"{error.strerror or error} ({name})" if name else str(error.strerror or error)


def dumps(value: Any) -> bytes:
    """JSON as json.dumps writes it compactly (NaN and infinities, which JSON lacks, become null)."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


class Journal:
    """journal.jsonl: one operation per line; cursor: the offset of the first line not yet applied. A line is
    written whole or not at all: a write the disk takes in part is cut off again, so that the next line never
    follows a torn one."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "journal.jsonl"
        self.cursor_path = directory / "cursor"
        self.rejected_path = directory / "rejected.jsonl"
        self.file = self.path.open("ab", buffering=0)  # each write one write(2): nothing left in a buffer
        self.size = self.file.tell()
        self.cursor = int(self.cursor_path.read_text()) if self.cursor_path.exists() else 0
        self._torn = False  # a part of a line could not be cut off: the next append tries first
        self._cursor_saved = True

    @property
    def unapplied_bytes(self) -> int:
        return self.size - self.cursor

    def unapplied(self) -> list[tuple[dict[str, Any], int]]:
        """Operations after the cursor, with the offset each ends at (a torn last line is dropped). A whole line that
        is no operation (a disk's corruption, another process writing the same file) is set aside in rejected.jsonl
        with a log line: it never stops the daemon's start, and the lines after it are applied."""
        out, offset = [], self.cursor
        with self.path.open("rb") as f:
            f.seek(self.cursor)
            for line in f:
                offset += len(line)
                if not line.endswith(b"\n"):
                    break  # the process died mid-write: that operation never returned to its caller
                try:
                    op = json.loads(line)  # json, not orjson: a journal of an earlier benchd may hold NaN
                except ValueError as error:  # not JSON, or not UTF-8
                    op = error
                if isinstance(op, dict):
                    out.append((op, offset))
                    continue
                why = f"not an operation ({op})" if isinstance(op, Exception) else "not an operation (no object)"
                log.error("the write journal's line ending at byte %d is %s: set aside in %s", offset, why,
                          self.rejected_path)
                self.reject({"line": line[:65536].decode("utf-8", "replace")}, why)
        return out

    def append(self, op: dict[str, Any]) -> int:
        """The offset after the operation's line, once the kernel has it (a killed process loses nothing); an
        OSError (ENOSPC, EIO, EROFS) when the disk did not take all of it, the journal as it was before."""
        # orjson: one C call holds the GIL for the whole operation, and json took 33 ms for the 65,536 token stamps
        # of 256 requests finishing together (scrapes and ingestion waited); orjson 1.8 ms, the same text.
        line = memoryview(dumps(op) + b"\n")
        if self._torn:
            self._cut()
        written = 0
        try:
            while written < len(line):
                written += self.file.write(line[written:])
        except OSError:
            if written:
                self._torn = True
                self._cut()
            raise
        self.size += written
        return self.size

    def probe(self) -> None:
        """A write of a file beside the journal, removed again: an OSError while the disk takes none."""
        probe = self.path.with_name("probe")
        try:
            with probe.open("wb", buffering=0) as f:
                f.write(b"\n")
        finally:
            probe.unlink(missing_ok=True)

    def _cut(self) -> None:
        """Back to the last whole line (the file is opened to append: the next write follows it)."""
        os.ftruncate(self.file.fileno(), self.size)
        self._torn = False

    def applied(self, end: int) -> None:
        """The cursor moves on; where the disk does not take it, it is kept here and written with the next one (a
        process killed meanwhile applies those operations again, which changes nothing: store/operations.py)."""
        if end == self.size and end > COMPACT_BYTES and not self._torn:  # everything applied: start the file again
            try:
                os.ftruncate(self.file.fileno(), 0)
                self.size = end = 0
            except OSError:
                pass
        self.cursor = end
        tmp = self.cursor_path.with_suffix(".tmp")
        try:
            tmp.write_text(str(end))
            os.replace(tmp, self.cursor_path)
        except OSError as error:
            if self._cursor_saved:
                log.warning("the journal's cursor could not be written (%s): kept in memory", disk_error(error))
            self._cursor_saved = False
            return
        self._cursor_saved = True

    def reject(self, op: dict[str, Any], reason: str) -> None:
        try:
            with self.rejected_path.open("a") as f:
                f.write(json.dumps({"reason": reason, "op": op}) + "\n")
        except OSError as error:
            log.error("a refused operation could not be set aside (%s): %s", disk_error(error),
                      json.dumps({"reason": reason, "op": op})[:4096])

    def close(self) -> None:
        self.file.close()
