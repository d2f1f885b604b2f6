"""Liveness, readiness and the Prometheus endpoint."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import JSONResponse

from benchd.api.deps import ServicesDep
from benchd.api.guard import GuardedRoute
from benchd.api.schemas import Liveness, Readiness
from benchd.telemetry import exposition

router = APIRouter(tags=["health"], route_class=GuardedRoute)


@router.get("/healthz", response_model=Liveness, responses={503: {
    "model": Liveness, "description": "The run loop (or the schedules' or the store's) has stopped, or the run loop "
                                      "has not moved for BENCHD_LIVENESS_TIMEOUT_S: restart the daemon."}})
async def healthz(request: Request) -> JSONResponse:
    """Alive while the daemon can work: its loops run and the run loop moves (memory only, on the event loop). The
    chart's liveness probe and the image's HEALTHCHECK ask this; a full disk or an unreachable database is not a
    reason to restart (/readyz says those)."""
    failing = request.app.state.services.daemon.failing()
    body = Liveness(status="ok" if failing is None else "failing", reason=failing)
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status.HTTP_200_OK if failing is None
                        else status.HTTP_503_SERVICE_UNAVAILABLE)


@router.get("/readyz", response_model=Readiness, responses={503: {
    "model": Readiness, "description": "A worker is not up, the daemon's model has not loaded (or failed to), the "
                                       "store takes no writes, or a loop stopped: `reasons` says which."}})
async def readyz(services: ServicesDep) -> JSONResponse:
    """Ready once every worker answers with the daemon's model loaded, runs execute and the store takes writes. A
    store that is degraded (the database is unreachable) leaves the daemon ready: runs go on and their writes wait in
    the journal; a journal that takes no writes (its disk full, failing or read-only) does not: no run starts."""
    daemon = services.daemon
    store = services.store.health
    reasons = daemon.unready()
    body = Readiness(ready=not reasons, reasons=reasons, alive=daemon.alive, model=services.settings.model,
                     queued=len(daemon.queue), load_error=daemon.pool.load_error(), workers=daemon.pool.describe(),
                     worker_restarts=daemon.pool.restarts, last_restart_s=daemon.pool.last_restart_s,
                     store=store.state, store_pending_writes=store.pending,
                     store_journal_bytes=store.journal_bytes, store_error=store.last_error,
                     store_held_writes=store.held)
    return JSONResponse(body.model_dump(), status_code=status.HTTP_200_OK if body.ready
                        else status.HTTP_503_SERVICE_UNAVAILABLE)


@router.get("/metrics", responses={200: {"content": {exposition.TEXT_TYPE: {}, exposition.OPENMETRICS_TYPE: {}}}})
async def metrics(services: ServicesDep, request: Request) -> Response:
    """OpenMetrics (with exemplars) when the scraper asks for it, as Prometheus does; else the text format.
    Written on the event loop: the page reads memory only (hardware from the sampler's last read) and takes about
    a millisecond, less than a hand-off to the thread pool and back costs under load."""
    openmetrics = "application/openmetrics-text" in request.headers.get("accept", "")
    return Response(exposition.page(services.registry, openmetrics),
                    media_type=exposition.OPENMETRICS_TYPE if openmetrics else exposition.TEXT_TYPE)
