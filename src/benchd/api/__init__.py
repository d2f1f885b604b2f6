"""The FastAPI app: create_app(settings) builds everything in its lifespan, nothing at import time."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool

import benchd
from benchd.api import compare, health, runs, schedules
from benchd.api.deps import Services
from benchd.config import Settings
from benchd.events import RunEvents
from benchd.gauges import HardwareCollector
from benchd.hardware import HardwareReader
from benchd.metrics import Metrics, NodeRegistry
from benchd.models import LoadedModel, load_model
from benchd.sampler import HardwareSampler
from benchd.scheduler import DEFAULT_SCHEDULE_SPEC, Scheduler
from benchd.spec import RunSpec
from benchd.store import Store
from benchd.telemetry import Telemetry
from benchd.tracing import build_tracer_provider


def create_app(
    settings: Settings,
    loader: Callable[..., LoadedModel] = load_model,
    hardware_reader: Callable[[], HardwareReader] = HardwareReader.default,
) -> FastAPI:
    """The daemon's app. loader and hardware_reader are where tests bring a model loader they can reach and
    an NVML stand-in."""
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = Store(settings.database_url)
        store.recover()
        registry = NodeRegistry(settings.node_name or socket.gethostname())
        metrics = Metrics(registry, settings.buckets)
        telemetry = Telemetry(metrics, build_tracer_provider(
            on_drop=lambda reason, n: metrics.spans_dropped.labels(reason).inc(n)))
        # One thread reads the hardware, for scrapes and runs alike: a scrape serves its latest snapshot.
        sampler = HardwareSampler(hardware_reader(), settings.hardware_interval_s, settings.hardware_stale_after_s)
        registry.register(HardwareCollector(sampler))
        sampler.start()
        events = RunEvents()
        scheduler = Scheduler(settings, store, events, loader, telemetry, sampler)
        if settings.default_schedule:
            spec = RunSpec.model_validate(DEFAULT_SCHEDULE_SPEC)
            store.put_schedule("default", spec.model_dump(mode="json", exclude_unset=True),
                               settings.default_schedule_interval_s)
        else:
            store.delete_schedule("default")
        scheduler.start()  # the engine thread loads the model; /readyz says when it is ready
        app.state.services = Services(settings, store, scheduler, events, registry)
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
    return app
