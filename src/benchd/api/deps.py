"""What route handlers depend on: the daemon's services and the bearer token."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from benchd.api.admission import Memory, Unmeasured, admit
from benchd.api.schemas import RETRY_AFTER_S
from benchd.daemon.events import RunEvents
from benchd.daemon.service import Daemon
from benchd.daemon.settings import Settings
from benchd.hardware.sampler import HardwareSampler
from benchd.spec import RunSpec
from benchd.store import Store
from benchd.telemetry.exposition import NodeRegistry


@dataclass(slots=True)
class Services:
    settings: Settings
    store: Store
    daemon: Daemon
    events: RunEvents
    registry: NodeRegistry
    hardware: HardwareSampler
    memory: Memory

    def admit(self, spec: RunSpec, loc: tuple = ()) -> RunSpec:
        """The spec as it will run (the daemon's model, dtype and device where it names none), checked against
        the limits, the device's memory and speed (422; 503 while a timed run's device is not measured yet), and the
        store's spool (429 while it is full)."""
        spec = self.daemon.resolve(spec)
        try:
            admit(spec, self.settings, self.memory, self.daemon.pool.slots, loc, self.daemon.pool.speed)
        except Unmeasured as error:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(error),
                                headers={"Retry-After": str(RETRY_AFTER_S)}) from None
        if self.store.spool.full():
            raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS,
                                "writes waiting for the unreachable database fill the spool (BENCHD_SPOOL_MAX_BYTES)",
                                headers={"Retry-After": str(RETRY_AFTER_S)})
        return spec


def get_services(request: Request) -> Services:
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(get_services)]

_bearer = HTTPBearer(auto_error=False)


def token_accepted(settings: Settings, authorization: str | None) -> bool:
    """Mutating endpoints need the bearer token when one is configured."""
    token = settings.api_token
    if token is None:
        return True
    scheme, _, given = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(given.strip().encode(),
                                                                  token.get_secret_value().encode())


def require_token(
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
