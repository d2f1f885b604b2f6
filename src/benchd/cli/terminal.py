"""The terminal: stdout that a closed pipe silences, and consoles as wide as the terminal (COLUMNS, or 120 piped)."""

from __future__ import annotations

import os
import sys

from rich.console import Console

PIPED_WIDTH = 120  # columns of what goes to a pipe or a file, unless COLUMNS says otherwise


class _Stdout:
    """sys.stdout, until its reader goes away (`benchd compare … --json | head`): from then on what is written goes
    nowhere, quietly, and the command ends as it would have (its exit code is its own, not the pipe's)."""

    def __init__(self) -> None:
        self.closed_pipe = False

    def write(self, text: str) -> int:
        if not self.closed_pipe:
            try:
                sys.stdout.write(text)
            except BrokenPipeError:
                self.closed()
        return len(text)

    def flush(self) -> None:
        if not self.closed_pipe:
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                self.closed()

    def isatty(self) -> bool:
        return sys.stdout.isatty()

    def fileno(self) -> int:
        return sys.stdout.fileno()

    def closed(self) -> None:
        """The pipe is closed: stdout's descriptor becomes /dev/null, so that Python's own flush at exit finds no
        closed pipe either (no "Exception ignored … BrokenPipeError")."""
        self.closed_pipe = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)


STDOUT = _Stdout()


def width() -> int | None:
    """None on a terminal (rich reads its width, and COLUMNS); else COLUMNS, or PIPED_WIDTH."""
    if sys.stdout.isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else PIPED_WIDTH


def out() -> Console:
    """The console of a command's result (stdout): tables fit its width; colour only on a terminal."""
    return Console(file=STDOUT, width=width())


def echo(text: str) -> None:
    """A line of a command's result (JSON, a path) on stdout."""
    STDOUT.write(text + "\n")
    STDOUT.flush()
