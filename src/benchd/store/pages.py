"""Pages of runs and matrices bounded in bytes as well as rows: a field too large for a listing (a spec with a long
extra_body, a sweep's summaries) is left out of it, named, and read whole by its id; nothing is read that the page
leaves out (a run's timeline never)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from benchd.store.schema import matrices, requests, runs

if TYPE_CHECKING:
    from benchd.store.database import Store

# The stored JSON fields a listing shows when small enough, by the name the API gives them.
RUN_FIELDS = {"spec": runs.c.spec, "summary": runs.c.summary, "metadata": runs.c.run_metadata,
              "hardware": runs.c.hardware, "parts": runs.c.parts, "quality": runs.c.quality}
MATRIX_FIELDS = {"document": matrices.c.document, "variants": matrices.c.variants, "runs": matrices.c.runs,
                 "comparison": matrices.c.comparison}
# engine load and hardware samples over a run (its report's); its probe position by position (comparisons')
NEVER_LISTED = {runs.c.timeline, runs.c.probe}
FIELD_MAX_BYTES = 64 << 10  # a field larger than this is left out of a listing (a spec's usual size: ~2 KiB)
ROW_BYTES = 1024  # a row's other columns, about
PAGE_MAX_BYTES = 8 << 20


@dataclass(slots=True)
class Page:
    items: list[dict[str, Any]]
    total: int
    next_offset: int | None = None  # where the next page starts, while rows remain
    omitted: list[list[str]] = field(default_factory=list)  # per item: the fields left out for their size


def _bytes(column) -> sa.ColumnElement:
    """The stored text's length, in the database: a field is measured before it is read."""
    return sa.func.coalesce(sa.func.length(sa.cast(column, sa.Text)), 0)


def page(store: Store, table: sa.Table, fields: dict[str, sa.Column], conditions: list, limit: int, offset: int,
         field_max: int = FIELD_MAX_BYTES, page_max: int = PAGE_MAX_BYTES) -> Page:
    """Newest first (by the store's sequence, not a clock). First each row's id and its fields' sizes; then the rows
    that fit page_max, each field over field_max left out (null). At least one row a page, whatever its size, so that
    paging always moves on."""
    total = store._read(sa.select(sa.func.count().label("n")).select_from(table).where(*conditions))[0]["n"]
    sizes = store._read(sa.select(table.c.id, *[_bytes(c).label(name) for name, c in fields.items()],
                                  _bytes(table.c.error).label("error")).where(*conditions)
                        .order_by(table.c.seq.desc()).limit(limit).offset(offset))
    chosen, used = [], 0
    for row in sizes:
        shown = {name for name in fields if row[name] <= field_max}
        cost = ROW_BYTES + row["error"] + sum(row[name] for name in shown)
        if chosen and used + cost > page_max:
            break
        chosen.append((row["id"], shown))
        used += cost
    if not chosen:
        return Page([], total)
    heavy = set(fields.values()) | NEVER_LISTED
    columns = [*(c for c in table.c if c not in heavy),
               *(sa.type_coerce(sa.case((_bytes(c) <= field_max, c), else_=sa.null()), c.type).label(c.name)
                 for c in fields.values())]
    rows = {row["id"]: row for row in store._read(sa.select(*columns).where(table.c.id.in_([i for i, _ in chosen])))}
    found = [(rows[i], sorted(set(fields) - shown)) for i, shown in chosen if i in rows]  # (deleted meanwhile)
    ended = offset + len(chosen)
    return Page([row for row, _ in found], total, ended if ended < total else None, [gone for _, gone in found])


def request_counts(store: Store, run_ids: list[str], stage_index: int = 0) -> dict[str, int]:
    """How many request rows each run's stage holds: what loading its records would cost."""
    rows = store._read(sa.select(requests.c.run_id, sa.func.count().label("n"))
                       .where(requests.c.run_id.in_(run_ids), requests.c.stage_index == stage_index)
                       .group_by(requests.c.run_id))
    return {row["run_id"]: row["n"] for row in rows}


def run_statuses(store: Store, run_ids: list[str]) -> dict[str, str]:
    """Each run's status, read alone."""
    if not run_ids:
        return {}
    return {row["id"]: row["status"] for row in store._read(sa.select(runs.c.id, runs.c.status)
                                                           .where(runs.c.id.in_(run_ids)))}
