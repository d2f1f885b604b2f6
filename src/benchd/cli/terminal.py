"""The terminal: stdout that a closed pipe silences, consoles as wide as the terminal (COLUMNS, or 120 piped) that
read no markup, and what a server sends made visible text before it reaches them."""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from rich.console import Console
from rich.text import Text

PIPED_WIDTH = 120  # columns of what goes to a pipe or a file, unless COLUMNS says otherwise

# What a terminal would act on rather than show: C0 controls but newline and tab (ESC starts CSI, OSC 8 links, OSC 52
# clipboard writes, a window's title), DEL, C1 controls (0x9b is CSI on its own), the bidirectional embeddings,
# overrides, isolates and marks (U+202E shows text reversed: Trojan Source, CVE-2021-42574), and the line and
# paragraph separators.
HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """text with each character a terminal would act on written as its escape (\\x1b, \\u202e): shown, never
    obeyed."""
    return HIDDEN.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)


def cleaned(data: Any) -> Any:
    """A server's JSON with every string in it, keys too, made visible()."""
    if isinstance(data, str):
        return visible(data)
    if isinstance(data, list):
        return [cleaned(item) for item in data]
    if isinstance(data, dict):
        return {visible(key) if isinstance(key, str) else key: cleaned(value) for key, value in data.items()}
    return data


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
    """The console of a command's result (stdout): tables fit its width; colour only on a terminal. It reads no
    markup and no emoji codes: a label "[/]" or ":x:" is printed as it is (styles come as rich Text)."""
    return Console(file=STDOUT, width=width(), markup=False, emoji=False, highlight=False)


def err() -> Console:
    """The console of what a command says on the way (stderr): progress, what it wrote, a refusal's reasons."""
    return Console(stderr=True, markup=False, emoji=False, highlight=False)


def echo(text: str) -> None:
    """A line of a command's result (JSON, a path) on stdout."""
    STDOUT.write(text + "\n")
    STDOUT.flush()


def refused(console: Console, lines: str, what: str = "invalid spec") -> None:
    """A spec (or the settings) refused: what in red, then its reasons, a line each, as text."""
    console.print(Text(what, style="red"))
    console.print(Text(lines), soft_wrap=True)
