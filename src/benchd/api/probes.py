"""The probe listener: /metrics, /healthz and /readyz on a port of their own, served by a uvicorn of their own on a
thread of its own, as DCGM exporter serves its metrics apart (docs/guides/daemon.md, "Connections and probes")."""

from __future__ import annotations

import threading
import time

import uvicorn
from fastapi import FastAPI

from benchd.api import health
from benchd.api.connections import probe_listener
from benchd.daemon.settings import Http


class _Config(uvicorn.Config):
    """The main server's logging stays as it is: uvicorn.Config sets its loggers' level process-wide and clears the
    access logger's handlers for access_log=False, which silenced the main port's startup, shutdown and access lines
    (connections.probe_listener keeps the access lines of this listener out instead)."""

    def configure_logging(self) -> None:
        pass


class ProbeListener:
    """Its own event loop, connections and thread: a scrape never queues behind client requests on the main port's
    loop or thread pool, and a flood of connections there never takes its room."""

    def __init__(self, services, host: str, port: int, http: Http) -> None:
        app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
        app.state.services = services
        app.include_router(health.router)
        self.address = f"{host}:{port}"
        self.server = uvicorn.Server(_Config(app, host=host, port=port, lifespan="off", **probe_listener(http)))
        self._thread = threading.Thread(target=self._serve, name="benchd-probes", daemon=True)

    def _serve(self) -> None:
        try:
            self.server.run()
        except (OSError, SystemExit):  # uvicorn logs why it cannot bind, then exits: start() reports it
            pass

    def start(self, timeout_s: float = 10.0) -> None:
        """Listening once this returns; OSError (the port taken, say) when it cannot."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started and self._thread.is_alive() and time.monotonic() < deadline:
            self._thread.join(0.01)
        if not self.server.started:
            raise OSError(f"the probe listener (BENCHD_HTTP__PROBE_PORT) did not start on {self.address}: "
                          "see uvicorn's error above")

    def stop(self, timeout_s: float = 10.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout_s)
