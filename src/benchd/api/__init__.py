"""The FastAPI app: create_app(settings) builds everything in its lifespan, nothing at import time."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.concurrency import run_in_threadpool

import benchd
from benchd.api import compare, health, runs, schedules
from benchd.api.admission import Memory
from benchd.api.deps import Services
from benchd.api.guard import validation_detail
from benchd.config import Settings
from benchd.events import RunEvents
from benchd.gauges import HardwareCollector
from benchd.hardware import HardwareReader
from benchd.metrics import Metrics, NodeRegistry
from benchd.models import LoadedModel, load_model
from benchd.sampler import HardwareSampler
from benchd.scheduler import DEFAULT_SCHEDULE_SPEC, Scheduler
from benchd.spec import RunSpec
from benchd.store import Store, StoreUnavailable
from benchd.telemetry import Telemetry
from benchd.tracing import build_tracer_provider


from benchd.api.schemas import RETRY_AFTER_S


def create_app(
    settings: Settings,
    loader: Callable[..., LoadedModel] = load_model,
    hardware_reader: Callable[[], HardwareReader] = HardwareReader.default,
) -> FastAPI:
    """The daemon's app. loader and hardware_reader are where tests bring a model loader they can reach and
    an NVML stand-in."""
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = Store(settings.database_url, settings.spool_dir, settings.spool_max_bytes, settings.node_name)
        store.start()
        store.wait_ready(settings.store_start_timeout_s)  # the daemon starts regardless: writes wait in the spool
        registry = NodeRegistry(settings.node_name)
        metrics = Metrics(registry, settings.buckets, settings.metrics.max_workloads)
        telemetry = Telemetry(metrics, build_tracer_provider(
            on_drop=lambda reason, n: metrics.spans_dropped.labels(reason).inc(n)))
        # One thread reads the hardware, for scrapes and runs alike: a scrape serves its latest snapshot.
        sampler = HardwareSampler(hardware_reader(), settings.hardware_interval_s, settings.hardware_stale_after_s)
        registry.register(HardwareCollector(sampler))
        sampler.start()
        events = RunEvents()
        scheduler = Scheduler(settings, store, events, loader, telemetry, sampler)
        scheduler.start()  # the engine thread loads the model; /readyz says when it is ready
        if settings.default_schedule:
            scheduler.put_schedule("default", RunSpec.model_validate(DEFAULT_SCHEDULE_SPEC),
                                   settings.default_schedule_interval_s)
        else:
            scheduler.delete_schedule("default")
        memory = Memory(lambda device: _available(sampler, device), scheduler.held_bytes)
        app.state.services = Services(settings, store, scheduler, events, registry, sampler, memory)
        try:
            yield
        finally:
            await run_in_threadpool(scheduler.stop)
            await run_in_threadpool(telemetry.shutdown)
            sampler.stop()
            store.close()

    app = FastAPI(
        title="benchd",
        version=benchd.__version__,
        summary="Continuous, exact measurement of LLM generation speed.",
        lifespan=lifespan,
    )
    for module in (runs, schedules, compare, health):
        app.include_router(module.router)

    @app.exception_handler(StoreUnavailable)
    async def store_unavailable(request: Request, error: StoreUnavailable) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": validation_detail(list(error.errors()))}, status_code=422)

    return app


def _available(sampler: HardwareSampler, device: str) -> int | None:
    """Host RAM available now for a CPU run, free memory of the GPU for a CUDA one."""
    if device == "cpu":
        import psutil

        return psutil.virtual_memory().available
    return sampler.gpu_free_bytes(device.partition(":")[2] or "0")
