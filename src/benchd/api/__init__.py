"""The FastAPI app: create_app(settings) builds everything in its lifespan, nothing at import time."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline

import benchd
from benchd.admission import Memory
from benchd.api import compare, fleet, health, history, matrices, runs, schedules
from benchd.api.deps import Answers, Services, Slots
from benchd.api.guard import validation_detail
from benchd.api.probes import ProbeListener
from benchd.api.schemas import RETRY_AFTER_S
from benchd.daemon.schedules import DEFAULT_SCHEDULE_SPEC
from benchd.daemon.service import Daemon
from benchd.daemon.settings import Settings
from benchd.daemon.streams import RunEvents
from benchd.hardware.devices import Slot, resolve
from benchd.hardware.reader import HardwareReader
from benchd.hardware.sampler import HardwareSampler
from benchd.spec import validate_spec
from benchd.store.database import Store, StoreUnavailable
from benchd.telemetry.exposition import NodeRegistry
from benchd.telemetry.gauges import HardwareCollector, LimitsCollector
from benchd.telemetry.genai import build_genai_metrics
from benchd.telemetry.metrics import Metrics
from benchd.telemetry.run import Telemetry
from benchd.telemetry.tracing import build_tracer_provider


def create_app(settings: Settings, hardware_reader: Callable[[], HardwareReader] = HardwareReader.default) -> FastAPI:
    """The daemon's app; hardware_reader is where tests bring an NVML stand-in. The daemon process never imports
    torch: models and engines live in its worker processes."""
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        registry = NodeRegistry(settings.node_name)
        metrics = Metrics(registry, settings.buckets, settings.metrics.max_workloads)
        store = Store(settings.database_url, settings.spool_dir, settings.spool_max_bytes, settings.node_name,
                      settings.pod_name, on_error=metrics.internal_error)
        store.start()
        store.wait_ready(settings.store_start_timeout_s)  # the daemon starts regardless: writes wait in the spool
        telemetry = Telemetry(metrics, build_tracer_provider(on_drop=metrics.spans_lost), build_genai_metrics())
        # One thread reads the hardware, for scrapes and runs alike: a scrape serves its latest snapshot.
        sampler = HardwareSampler(hardware_reader(), settings.hardware_interval_s, settings.hardware_stale_after_s,
                                  on_error=metrics.internal_error)
        registry.register(HardwareCollector(sampler))
        sampler.start()
        events = RunEvents()
        daemon = Daemon(settings, store, telemetry, sampler, events, daemon_slots(settings, sampler))
        # by the gpu label its runs' and hardware series carry (NVML's index; "" for the CPU), not the slot's key
        registry.register(LimitsCollector(lambda: {slot.gpu: daemon.pool.speeds[slot.key] for slot in daemon.pool.slots
                                                   if slot.key in daemon.pool.speeds}))
        for declared in settings.schedules:  # before the schedules' thread first reads the stored ones
            daemon.schedules.declare(declared.name, declared.spec, declared.interval_s, declared.enabled,
                                     declared.matrix_spec())
        daemon.start()  # the workers start and load the model; /readyz says when they are ready
        if settings.default_schedule:
            daemon.schedules.put("default", validate_spec(DEFAULT_SCHEDULE_SPEC),
                                 settings.default_schedule_interval_s)
        else:
            daemon.schedules.delete("default")
        memory = Memory.of(sampler, daemon.pool.held_bytes)
        reads = settings.reads
        app.state.services = Services(settings, store, daemon, events, registry, sampler, memory,
                                      Slots(reads.compare_slots, "comparisons", "BENCHD_READS__COMPARE_SLOTS"),
                                      Slots(reads.record_slots, "reads of a run's records",
                                            "BENCHD_READS__RECORD_SLOTS"),
                                      Slots(reads.history_slots, "histories", "BENCHD_READS__HISTORY_SLOTS"),
                                      Answers(reads.history_kept_bytes),
                                      Slots(reads.fleet_slots, "fleet views", "BENCHD_READS__FLEET_SLOTS"))
        # The pool of the main port's sync handlers: bounded by the setting (docs/guides/daemon.md, "Connections and
        # probes"). anyio keeps one limiter an event loop: the probe listener's loop has its own.
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.http.threads
        probes = None if settings.http.probe_port is None else ProbeListener(
            app.state.services, settings.host, settings.http.probe_port, settings.http)
        try:
            if probes is not None:
                probes.start()  # a port taken stops the daemon's start, its workers stopped below
            yield
        finally:
            if probes is not None:
                probes.stop()
            await run_in_threadpool(daemon.stop)
            await run_in_threadpool(telemetry.shutdown)
            sampler.stop()
            store.close()

    # /docs (Swagger UI) with its script and style served by the daemon from fastapi-offline's copy: FastAPI's own
    # page loads them from a CDN, a blank page on a node with no way out. No /redoc: its page fetches a logo from its
    # maker's CDN whatever it is given.
    app = FastAPIOffline(
        redoc_url=None,
        title="benchd",
        version=benchd.__version__,
        summary="Continuous, exact measurement of LLM generation speed.",
        lifespan=lifespan,
    )
    for module in (runs, matrices, schedules, compare, history, fleet, health):
        app.include_router(module.router)

    @app.exception_handler(StoreUnavailable)
    async def store_unavailable(request: Request, error: StoreUnavailable) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": validation_detail(list(error.errors()))}, status_code=422)

    return app


def daemon_slots(settings: Settings, sampler: HardwareSampler) -> list[Slot]:
    """BENCHD_DEVICES against the GPUs NVML sees; all means the CPU when BENCHD_DEVICE is cpu."""
    setting = ["cpu"] if settings.devices == "all" and settings.device.startswith("cpu") else settings.devices
    return resolve(setting, sampler.reader.nvml.devices, os.environ.get("CUDA_VISIBLE_DEVICES"))
