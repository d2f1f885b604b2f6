"""What a run's telemetry observes, one backend a recorder (telemetry/prometheus.py, telemetry/otel.py), all of
them fed at once by the run's fan-out (telemetry/run.py). A recorder only observes: what it is handed (a request's
record, the run's outcome) it reads and never changes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchd.engines import EngineLoad
from benchd.measure.outcome import RunOutcome
from benchd.measure.records import RequestRecord


@dataclass(frozen=True, slots=True)
class RunLabels:
    """Which run a recorder observes: one GPU's part of a run on every GPU has the run's, with its gpu."""

    run_id: str
    model: str
    engine: str
    workload: str
    gpu: str = ""
    spec: Any = None  # the RunSpec: what the GenAI conventions' attributes need (an openai run's API and server)

    @property
    def kind(self) -> str:
        return getattr(self.spec, "kind", "generate")


class RunRecorder:
    """One backend's observer of one run (or of one GPU's part of it). Each method here does nothing: a recorder
    overrides what its backend records. Requests are measured ones only (the fan-out leaves warmup requests out), on
    the thread that ingests the run's events, in the order they happened."""

    def run_started(self, t: float, trace_id: str | None) -> None:
        """The run's requests start (perf_counter() seconds); trace_id: the run's trace, when it is traced."""

    def timing(self, kind: str, series: str, seconds: float, shape: str | None, dtype: str | None) -> None:
        """A timed run's measured repetition: a training step's phase, or one call of a kernel."""

    def sample(self, load: EngineLoad, output_tokens_per_s: float) -> None:
        """The engine's load as the worker sampled it, and the stage's throughput so far."""

    def engine_restarted(self, reason: str) -> None:
        """The worker restarted its engine mid-run."""

    def submitted(self, record: RequestRecord) -> None:
        """On the dispatcher's thread, before the engine sees the request: kept light."""

    def admitted(self, record: RequestRecord) -> None:
        """The engine took the request in (its queue time is known)."""

    def prompt_counted(self, record: RequestRecord, delta: int) -> None:
        """The server counted the admitted prompt: delta more tokens than the client's count."""

    def arrivals(self, record: RequestRecord, start: int) -> None:
        """The record's arrivals from index start on, just recorded."""

    def finished(self, record: RequestRecord) -> None:
        """The request ended: succeeded, failed (record.error) or cut by benchd (record.cut)."""

    def record(self, outcome: RunOutcome) -> None:
        """The run's outcome as the daemon judged it (measure/outcome.py)."""

    def run_finished(self, t: float, status: str, error: str | None) -> None:
        """The run (or this part of it) ended with status."""
