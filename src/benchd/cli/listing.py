"""A listing of a daemon's items on the terminal: a table that fits its width (the columns a reader needs first
kept), one line when nothing matches, and the nearest known names for a value that matches none."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence

from rich.table import Table
from rich.text import Text

from benchd.cli.client import Client, DaemonError
from benchd.cli.terminal import echo, out
from benchd.models.sources import closest as nearest

PADDING = 3  # a column's padding and rule, as rich draws a table's
FOLDED = 16  # the room kept beside the others for each column that folds (wrap=)
FOLDED_AT = 40  # a cell longer than this folds over lines rather than take a column's room from the others


def choice(what: str, values: Sequence[str]):
    """An argparse type for one of values: a value that is none of them is refused (exit 2) with the nearest."""

    def parse(text: str) -> str:
        if text not in values:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {what} ({', '.join(values)}){nearest(text, values)}")
        return text

    return parse


def columns_within(columns: Sequence[str], rows: Sequence[dict[str, str]], width: int, keep: int) -> list[str]:
    """The first columns whose widest cells (up to FOLDED_AT: a longer one folds) fit width, at least `keep` of them;
    rich folds what still does not fit."""
    chosen = list(columns)

    def need(column: str) -> int:
        return min(FOLDED_AT, max([len(column), *(len(row[column]) for row in rows)])) + PADDING

    while len(chosen) > keep and sum(map(need, chosen)) + 1 > width:
        chosen.pop()
    return chosen


def show(title: str, columns: Sequence[str], rows: Sequence[dict[str, str]], keep: int = 3,
         right: Iterable[str] = (), wrap: Iterable[str] = ()) -> None:
    """The rows as a table on stdout within its width: the columns in the order a reader needs them, those that do
    not fit left out (--json has them all, the caption says so); each cell as text, never markup. wrap: text columns
    that fold within what the others leave rather than push them out."""
    console = out()
    folding = [c for c in columns if c in set(wrap)]
    fixed = columns_within([c for c in columns if c not in folding], rows, console.width - FOLDED * len(folding),
                           keep)
    chosen = [c for c in columns if c in fixed or c in folding]
    table = Table(title=Text(title), title_justify="left", caption_justify="left",
                  caption=None if len(chosen) == len(columns) else "more columns: --json, or a wider terminal")
    for index, column in enumerate(chosen):
        table.add_column(column, justify="right" if column in set(right) else "left", overflow="fold",
                         no_wrap=index == 0)
    for row in rows:
        table.add_row(*(Text(row[c]) for c in chosen))
    console.print(table)


def nothing(what: str, filters: dict[str, str | None], where: str, hint: str = "") -> None:
    """One line for a listing with nothing in it: what was asked, of whom, and what might help."""
    given = ", ".join(f"{k} {v}" for k, v in filters.items() if v is not None)
    echo(f"no {what}" + (f" with {given}" if given else "") + f" on {where}{hint}")


def workloads(client: Client) -> list[dict]:
    """The workloads the daemon holds (its first 1,000 by name), for what a name nearest to a mistyped one is."""
    try:
        return client.get("/workloads", params={"limit": 1000})["items"]
    except DaemonError as error:
        if error.status == 404:  # a daemon older than GET /workloads: no names to suggest
            return []
        raise
