"""Liveness, readiness and the Prometheus endpoint."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS_TYPE
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from benchd.api.deps import ServicesDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process answers."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "The model is not loaded or the scheduler is not alive."}})
def readyz(services: ServicesDep) -> JSONResponse:
    scheduler = services.scheduler
    store = services.store.health
    body = {"model_loaded": scheduler.model_loaded, "scheduler_alive": scheduler.alive,
            "model": services.settings.model, "queued": scheduler.queued(), "load_error": scheduler.load_error,
            # degraded: the database is unreachable; runs go on and their writes wait in the journal
            "store": store.state, "store_pending_writes": store.pending, "store_journal_bytes": store.journal_bytes,
            "store_error": store.last_error}
    ready = scheduler.model_loaded and scheduler.alive
    return JSONResponse(body, status_code=status.HTTP_200_OK if ready else status.HTTP_503_SERVICE_UNAVAILABLE)


@router.get("/metrics", responses={200: {"content": {CONTENT_TYPE_LATEST: {}, OPENMETRICS_TYPE: {}}}})
def metrics(services: ServicesDep, request: Request) -> Response:
    """OpenMetrics (with exemplars) when the scraper asks for it, as Prometheus does; else the text format."""
    if "application/openmetrics-text" in request.headers.get("accept", ""):
        return Response(generate_openmetrics(services.registry), media_type=OPENMETRICS_TYPE)
    return Response(generate_latest(services.registry), media_type=CONTENT_TYPE_LATEST)
