"""What admission says of a spec it will not take: each field and why (Refused), or not yet (Later)."""

from __future__ import annotations

from typing import NamedTuple


class Problem(NamedTuple):
    """A field of the spec (its path from the spec's root: ("workload", "stop", "requests")) and why it is refused."""

    field: tuple[str | int, ...]
    reason: str

    def line(self) -> str:
        """"workload.stop.requests: why", as the command line prints it."""
        return f"{'.'.join(map(str, self.field))}: {self.reason}"


class Refused(Exception):
    """A spec admission will not take: every problem found, each once, in the order found."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(problem.line() for problem in problems))
        self.problems = problems


class Later(Exception):
    """A spec that cannot be judged now (the API's 503 with Retry-After): str() says why."""


class Unmeasured(Later):
    """A timed run's time cannot be judged yet: its device's worker has not measured the device (it is starting)."""


class Problems(list[Problem]):
    """The problems found so far, each at most once."""

    def add(self, field: tuple[str | int, ...], why: str) -> None:
        if (found := Problem(field, why)) not in self:
            self.append(found)

    def over(self, value: float, limit: float, *field: str | int, setting: str) -> None:
        if value > limit:
            self.add(field, f"{value:g} exceeds the limit of {limit:g} (BENCHD_LIMITS__{setting.upper()})")
