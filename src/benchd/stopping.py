"""Ending a run early: a signal set from another thread, and the exception that carries its reason out."""

from __future__ import annotations

import threading


class StopSignal:
    """Set from another thread to end a run early; the reason becomes the run's status."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = "cancelled"

    def set(self, reason: str = "cancelled") -> None:
        self.reason = reason
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout_s: float) -> bool:
        return self._event.wait(timeout_s)


class Stopped(Exception):
    """The stop signal was set: the run ends as cancelled or interrupted."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
