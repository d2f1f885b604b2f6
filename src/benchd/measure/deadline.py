"""A read's deadline: the daemon's reads that compute (a comparison, a history) check it as they go."""

from __future__ import annotations

import time


class OverBudget(Exception):
    """A read that did not end by its deadline: a comparison (BENCHD_READS__COMPARE_TIMEOUT_S), a history
    (BENCHD_READS__HISTORY_TIMEOUT_S)."""


def in_time(deadline: float | None) -> None:
    """deadline: time.monotonic()'s value it must end by (None: none)."""
    if deadline is not None and time.monotonic() > deadline:
        raise OverBudget("not done by its deadline")
