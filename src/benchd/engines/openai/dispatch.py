"""Sends each request at its scheduled time to within microseconds: a timerfd armed at the next due time, read by
the client's event loop. Event loops' own timers are not that precise: asyncio's epoll selector rounds every timeout
up to a whole millisecond, and libuv (uvloop) keeps time in whole milliseconds."""

from __future__ import annotations

import ctypes
import heapq
import itertools
import os
import time
from collections.abc import Callable
from typing import Any

SPIN_S = 100e-6  # the timer fires this early and the loop spins to the time: an idle vCPU takes ~100 µs to wake
CLOCK_MONOTONIC = 1  # time.perf_counter()'s clock on Linux, so a scheduled time can be armed as it is
TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class TimerFd:
    """A CLOCK_MONOTONIC timerfd armed at absolute times (os.timerfd_* from Python 3.13, libc before)."""

    def __init__(self) -> None:
        if hasattr(os, "timerfd_create"):  # Python 3.13's: the checker reads os as 3.11's (pyproject.toml)
            self.fd = os.timerfd_create(os.CLOCK_MONOTONIC,  # type: ignore[attr-defined]
                                        flags=os.TFD_NONBLOCK | os.TFD_CLOEXEC)  # type: ignore[attr-defined]
            self._libc = None
        else:
            self._libc = ctypes.CDLL(None, use_errno=True)
            self.fd = self._libc.timerfd_create(CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
            if self.fd < 0:
                raise OSError(ctypes.get_errno(), "timerfd_create")

    def arm(self, t: float | None) -> None:
        """Fire once at perf_counter() time t; None disarms."""
        ns = 0 if t is None else max(round(t * 1e9), 1)  # 0 would disarm
        if self._libc is None:
            os.timerfd_settime_ns(self.fd, flags=os.TFD_TIMER_ABSTIME if ns else 0,  # type: ignore[attr-defined]
                                  initial=ns)
            return
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(ns // 1_000_000_000, ns % 1_000_000_000))
        if self._libc.timerfd_settime(self.fd, TFD_TIMER_ABSTIME, ctypes.byref(spec), None) < 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime")

    def clear(self) -> None:
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass

    def close(self) -> None:
        os.close(self.fd)


class Dispatcher:
    """Calls send(item) for each item at its time, from the loop that reads the timerfd. Items due at once go in
    time order; an item can be dropped before its time by marking it (`dropped(item)` is asked when it is due)."""

    def __init__(self, loop: Any, send: Callable[[Any], None], dropped: Callable[[Any], bool]) -> None:
        self.loop, self.send, self.dropped = loop, send, dropped
        self.timer = TimerFd()
        self.heap: list[tuple[float, int, Any]] = []
        self.order = itertools.count()
        self.armed: float | None = None
        loop.add_reader(self.timer.fd, self._fire)

    def __len__(self) -> int:
        return len(self.heap)

    def at(self, t: float, item: Any) -> None:
        heapq.heappush(self.heap, (t, next(self.order), item))
        if self.armed is None or t < self.armed:
            self.armed = t
            self.timer.arm(t - SPIN_S)

    def _fire(self) -> None:
        self.timer.clear()
        heap, clock = self.heap, time.perf_counter
        while heap and heap[0][0] <= clock() + SPIN_S:
            t, _, item = heapq.heappop(heap)
            if self.dropped(item):
                continue
            while clock() < t:
                pass
            self.send(item)
        self.armed = heap[0][0] if heap else None
        self.timer.arm(None if self.armed is None else self.armed - SPIN_S)

    def close(self) -> None:
        self.loop.remove_reader(self.timer.fd)
        self.timer.close()
