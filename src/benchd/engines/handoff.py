"""The dispatcher's next send time, shared with an engine whose thread runs in the dispatcher's process.

An engine thread running a model's Python between short torch ops gives up the GIL around every op and takes it
back before a thread waiting for it has woken up; the waiter is signalled each time, starts a fresh switch interval,
and so never asks for the GIL to be handed over (CPython's convoy effect): a dispatcher due to send waits until a
GIL-free gap happens to be long enough, a forward pass or more. With a handoff, the engine thread checks at each
layer whether a send is due and, if so, waits (without the GIL) until the dispatcher has sent, at most MAX_WAIT_S:
requests leave at their scheduled time, and the engine loses only the time the send itself takes."""

from __future__ import annotations

import math
import threading
import time

MAX_WAIT_S = 0.005  # a dispatcher whose wake-up this VM delays by 2–4 ms still gets its turn


class Handoff:
    __slots__ = ("due", "_sent")

    def __init__(self) -> None:
        self.due = math.inf  # perf_counter() time of the next send; inf: none expected
        self._sent = threading.Event()

    def expect(self, t: float) -> None:
        """The dispatcher sends next at t."""
        self._sent.clear()
        self.due = t

    def clear(self) -> None:
        """Nothing is due: a send went out, or the dispatcher waits for something else (a free slot, the end)."""
        self.due = math.inf
        self._sent.set()

    def give_way(self, *_) -> None:
        """On the engine's thread (a forward hook): wait for a send that is due. A dispatcher held up elsewhere (a
        concurrency cap, a stop) costs the engine MAX_WAIT_S once a send, not at every layer."""
        if time.perf_counter() >= self.due and not self._sent.wait(MAX_WAIT_S):
            self.due = math.inf
