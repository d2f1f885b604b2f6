"""A run from the daemon's side, for every kind of run and for the daemon and the CLI alike: handed to a worker,
its events ingested as they come, watched against its deadline, then judged, timed against the hardware, traced
and stored. Nothing it meets stops the caller: a failure is the run's status, with where it happened."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from benchd import timeline
from benchd.ingest import Progress, RunIngest
from benchd.outcome import RunResult, StageResult
from benchd.records import RequestRecord
from benchd.sampler import HardwareSampler, Recording
from benchd.spec import RunSpec
from benchd.stopping import StopSignal
from benchd.store import RequestWriter, StageRequests, Store
from benchd.telemetry import Telemetry
from benchd.timeline import StageSpan
from benchd.workers.pool import WorkerPool

log = logging.getLogger("benchd.lifecycle")

POLL_S = 0.2
CANCEL_GRACE_S = 60.0  # a worker told to stop that has not within this is hung: it is killed


class Lifecycle:
    def __init__(self, pool: WorkerPool, telemetry: Telemetry, hardware: HardwareSampler | None = None,
                 store: Store | None = None, faults: dict | None = None) -> None:
        self.pool, self.telemetry, self.hardware, self.store, self.faults = pool, telemetry, hardware, store, faults

    def execute(self, run_id: str, spec: RunSpec, device: str, stop: StopSignal,
                on_progress: Callable[[Progress], None] | None = None, deadline_s: float | None = None) -> RunResult:
        """Run the spec on the device's worker and return what it left, whatever happens; with a store, every
        request is written as it finishes and the run's end once it is known."""
        observer = self.telemetry.for_run(run_id, spec.subject, spec.runner, spec.name)
        writer = self.store.requests_writer(run_id) if self.store is not None else None
        keys: dict[int, StageRequests] = {}

        def finished(stage: StageResult, record: RequestRecord) -> None:
            key = keys.get(stage.index) or keys.setdefault(stage.index, StageRequests(stage.index, stage.label,
                                                                                      stage.start_s))
            writer.add(key, record)

        ingest = RunIngest(spec, observer, finished if writer is not None else None, on_progress)
        recording: Recording | None = None
        started = time.perf_counter()
        try:
            recording = self.hardware.begin() if self.hardware is not None else None
            started = time.perf_counter()
            observer.run_started(started)
            self.pool.submit(device, run_id, spec.model_dump(mode="json"), self.faults, ingest,
                             wait_s=self.pool.settings.start_timeout_s, trace_id=observer.run_trace_id)
            self._wait(run_id, device, ingest, stop, started, deadline_s)
        except Exception as error:  # the run's one boundary in the daemon: the failure is recorded, measures kept
            log.exception("run %s failed in the daemon", run_id)
            if not ingest.ended.is_set():
                ingest.result.status, ingest.result.error = "failed", f"{type(error).__name__}: {error}"
                ingest.result.error_stage = "daemon"
        result = ingest.result
        if result.status == "running":  # the worker never answered (the daemon is stopping)
            result.status, result.error_stage = "interrupted", "worker"
        result.judge()
        self._finish(run_id, result, ingest, observer, recording, started, writer)
        return result

    def _wait(self, run_id: str, device: str, ingest: RunIngest, stop: StopSignal, started: float,
              deadline_s: float | None) -> None:
        told: float | None = None  # when the worker was told to stop
        late = False
        while True:
            now = time.perf_counter()
            # The deadline counts from when requests start: loading a model is bounded by the worker's own watch.
            running = next((t for name, t in ingest.phases if name == "run"), None)
            if told is None and deadline_s is not None and running is not None and now - running > deadline_s:
                late = True
                self.pool.cancel(device, run_id, "cancelled")
                told = now
            elif told is None and stop.is_set():
                self.pool.cancel(device, run_id, stop.reason)
                told = now
            elif told is not None and now - told > CANCEL_GRACE_S:
                self.pool.kill(device, "no_progress", f"the run did not stop within {CANCEL_GRACE_S:g} s of "
                                                      "being told to")
                told = float("inf")
            if ingest.ended.wait(POLL_S):
                break
        if late:
            result = ingest.result
            result.status, result.error_stage = "failed", "run"
            result.error = (f"the run went past its limit of {deadline_s:g} s (BENCHD_LIMITS__MAX_DURATION_S per "
                            "stage) and was stopped")

    def _finish(self, run_id: str, result: RunResult, ingest: RunIngest, observer, recording: Recording | None,
                started: float, writer: RequestWriter | None) -> None:
        """Hardware, timeline, spans and the store: each on its own, so one failing leaves the others done."""
        end = time.perf_counter()
        try:
            if recording is not None:
                windows = [w for stage in result.stages if (w := stage.window()) is not None]
                start, stop = (windows[0][0], windows[-1][1]) if windows else (started, end)
                tokens = sum(stage.measured_tokens() for stage in result.stages)
                result.hardware = recording.end(start, stop, tokens)
                observer.energy(result.hardware.energy_per_output_token_joules)
            spans = [StageSpan(s.index, s.label, s.start_s, s.end_s or (w[1] if (w := s.window()) else end))
                     for s in result.stages]
            result.timeline = timeline.build(started, spans, ingest.load_samples(),
                                             recording.snapshots if recording is not None else [])
        except Exception:  # the hardware's boundary: a failing sampler means fewer figures, never a lost run
            log.exception("run %s: the hardware summary failed", run_id)
        if result.metadata is not None:
            result.metadata.trace_id = observer.run_trace_id
        observer.trace_requests([r for stage in result.stages for r in stage.records])
        observer.run_finished(end, result.status, result.error)
        if self.store is None:
            return
        writer.close((StageRequests(s.index, s.label, s.start_s), s.records) for s in result.stages)
        summaries = [s.model_dump(mode="json") for s in result.summaries()]
        meta = result.metadata.model_dump(mode="json") if result.metadata is not None else None
        self.store.finish_run(
            run_id, status=result.status, error=result.error, error_stage=result.error_stage,
            subject=result.spec.subject, label=meta.get("label") if meta else result.spec.label,
            summaries=summaries, metadata=meta,
            hardware=result.hardware.model_dump(mode="json") if result.hardware is not None else None,
            timeline=result.timeline,
            timings_rows=[{"stage_index": t.stage_index, "series": t.series, "index": t.index, "warmup": t.warmup,
                           "seconds": t.seconds} for t in result.timings])


def deadline_s(spec: RunSpec, max_duration_s: float) -> float:
    """How long a run from HTTP may run its requests (or timed stages) before it is stopped: the limit per stage,
    and one more for what is in flight when dispatching ends. Admission already refused what could not send its
    requests in time; this bounds what it cannot foresee (a closed loop on a slow engine)."""
    stages = spec.workload.stage_count() if spec.kind == "generate" else 1
    return max_duration_s * (stages + 1)
