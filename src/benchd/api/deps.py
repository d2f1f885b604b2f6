"""What route handlers depend on: the daemon's services and the bearer token."""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from benchd.admission import Later, Memory, Refused, admit
from benchd.api.schemas import RETRY_AFTER_S
from benchd.daemon.service import Daemon
from benchd.daemon.settings import Settings
from benchd.daemon.streams import RunEvents
from benchd.hardware.sampler import HardwareSampler
from benchd.spec import RunSpec
from benchd.store.database import Store
from benchd.telemetry.exposition import NodeRegistry


def problem(loc: tuple, message: str) -> dict:
    """One item of a 422's detail: the field in the request's body (loc) and why."""
    return {"type": "value_error", "loc": ("body", *loc), "msg": message}


class Slots:
    """Reads that cost seconds or a run's every record, done a few at a time: one past them waits for none, it gets a
    503 with Retry-After (a queue would hold HTTP threads, and a flood would hold them all)."""

    def __init__(self, count: int, what: str, setting: str) -> None:
        self._free = threading.BoundedSemaphore(count)
        self.count, self.what, self.setting = count, what, setting

    @contextmanager
    def taken(self) -> Iterator[None]:
        if not self._free.acquire(blocking=False):
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                                f"{self.count} {self.what} are being made ({self.setting}): try again shortly",
                                headers={"Retry-After": str(RETRY_AFTER_S)})
        try:
            yield
        finally:
            self._free.release()


class Answers:
    """Built answers kept by key while their version holds (a /history answer until its workload gets a run or an
    analysis), the most recently used kept first within max_bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._kept: OrderedDict[Hashable, tuple[Hashable, bytes]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable, version: Hashable) -> bytes | None:
        with self._lock:
            found = self._kept.get(key)
            if found is None or found[0] != version:
                return None
            self._kept.move_to_end(key)
            return found[1]

    def put(self, key: Hashable, version: Hashable, body: bytes) -> None:
        with self._lock:
            if (old := self._kept.pop(key, None)) is not None:
                self._bytes -= len(old[1])
            if len(body) > self.max_bytes:
                return
            self._kept[key] = (version, body)
            self._bytes += len(body)
            while self._bytes > self.max_bytes:
                self._bytes -= len(self._kept.popitem(last=False)[1][1])


@dataclass(slots=True)
class Services:
    settings: Settings
    store: Store
    daemon: Daemon
    events: RunEvents
    registry: NodeRegistry
    hardware: HardwareSampler
    memory: Memory
    compares: Slots  # GET /compare
    records: Slots  # reads of a run's every record
    histories: Slots  # GET /history answers built
    answers: Answers  # GET /history answers kept
    fleets: Slots  # GET /fleet

    def admit(self, spec: RunSpec, loc: tuple = ()) -> RunSpec:
        """The spec as it will run (the daemon's model, dtype and device where it names none), checked against
        the limits, the device's memory and speed (422; 503 while a timed run's device is not measured yet, or while
        every trace reader is busy), the daemon and its store (503 while the run loop has stopped, or the store takes
        no writes: nothing starts then; 429 while the spool is full)."""
        if (failing := self.daemon.failing()) is not None:  # no loop would take it: never a 202 that will not run
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, f"{failing}: the daemon must be restarted",
                                headers={"Retry-After": str(RETRY_AFTER_S)})
        if (refusal := self.store.refusal()) is not None:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                                f"{refusal}: no run starts until it takes writes again (the daemon retries by itself)",
                                headers={"Retry-After": str(RETRY_AFTER_S)})
        spec = self.daemon.resolve(spec)
        try:
            admit(spec, self.settings, self.memory, self.daemon.pool.slots, self.daemon.pool.speed)
        except Refused as refused:
            raise RequestValidationError([problem((*loc, *p.field), p.reason) for p in refused.problems]) from None
        except Later as error:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(error),
                                headers={"Retry-After": str(RETRY_AFTER_S)}) from None
        if self.store.spool.full():
            raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS,
                                "writes waiting for the unreachable database fill the spool (BENCHD_SPOOL_MAX_BYTES)",
                                headers={"Retry-After": str(RETRY_AFTER_S)})
        return spec


async def get_services(request: Request) -> Services:
    """Async, so that resolving it takes no thread of the pool: a sync dependency of an async handler (/metrics,
    /readyz) would queue it behind every client request waiting for one of the pool's 40 threads."""
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(get_services)]

_bearer = HTTPBearer(auto_error=False)


def token_accepted(settings: Settings, authorization: str | None) -> bool:
    """Whether the request carries the configured bearer token (or none is configured)."""
    token = settings.api_token
    if token is None:
        return True
    scheme, _, given = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(given.strip().encode(),
                                                                  token.get_secret_value().encode())


async def require_token(
    services: ServicesDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Documents the bearer scheme in the OpenAPI document; the check itself runs first, in the guard, before any
    body is read (api/guard.py)."""
    given = f"Bearer {credentials.credentials}" if credentials is not None else None
    if not token_accepted(services.settings, given):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "a valid bearer token is required",
                            headers={"WWW-Authenticate": "Bearer"})


AuthDep = Depends(require_token)
