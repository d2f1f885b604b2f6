"""A run's OpenTelemetry GenAI metrics (telemetry/genai.py's histograms), observed from the same calls as its
Prometheus series: client metrics for a server measured from outside (openai), server metrics for an engine in
benchd's worker. A timed run (no tokens) has none: the fan-out makes no such recorder for it (telemetry/run.py)."""

from __future__ import annotations

from benchd.measure import latency
from benchd.measure.records import RequestRecord
from benchd.telemetry.genai import (
    CLIENT_CHUNK,
    CLIENT_DURATION,
    CLIENT_FIRST_CHUNK,
    CLIENT_TOKENS,
    SERVER_DURATION,
    SERVER_TPOT,
    SERVER_TTFT,
    GenAIMetrics,
    GenAIRequest,
    Instrument,
    Series,
)
from benchd.telemetry.recorder import RunLabels, RunRecorder
from benchd.telemetry.spans import error_type


class OTelRecorder(RunRecorder):
    """One run's (or one GPU's part's) GenAI series, bound once like the Prometheus children; a part's are its own
    (one writer each) with the run's attributes (the conventions name no GPU), so they add up to the run's."""

    def __init__(self, genai: GenAIMetrics, run: RunLabels) -> None:
        self.genai, self.request = genai, GenAIRequest.of(run.spec, run.model)
        self.series: list[Series] = []
        self.first_chunk = self.chunk = self.server_ttft = self.server_tpot = None
        self.input_tokens = self.output_tokens = None
        self.failed_durations: dict[str, Series] = {}  # by error.type, made at the first failure of each kind
        if self.request.client:
            self.first_chunk, self.chunk = self._series(CLIENT_FIRST_CHUNK), self._series(CLIENT_CHUNK)
            self.duration = self._series(CLIENT_DURATION)
            self.input_tokens = self._series(CLIENT_TOKENS, **{"gen_ai.token.type": "input"})
            self.output_tokens = self._series(CLIENT_TOKENS, **{"gen_ai.token.type": "output"})
        else:
            self.server_ttft, self.server_tpot = self._series(SERVER_TTFT), self._series(SERVER_TPOT)
            self.duration = self._series(SERVER_DURATION)

    def _series(self, instrument: Instrument, **extra: str) -> Series:
        created = self.genai.series(instrument, {**self.request.attributes(), **extra})
        self.series.append(created)
        return created

    def _failed_duration(self, kind: str) -> Series:
        series = self.failed_durations.get(kind)
        if series is None:
            series = self.failed_durations[kind] = self._series(
                CLIENT_DURATION if self.request.client else SERVER_DURATION, **{"error.type": kind})
        return series

    def arrivals(self, record: RequestRecord, start: int) -> None:
        """The client's time to first chunk as the chunk arrives, and each later chunk's time."""
        stamps = record.arrival_s
        if start == 0 and self.first_chunk is not None:
            self.first_chunk.observe(latency.ttft(record.scheduled_s, stamps))
        if self.chunk is not None:
            for gap in latency.chunk_gaps(stamps, record.arrival_tokens, start):
                self.chunk.observe(gap)

    def finished(self, record: RequestRecord) -> None:
        """Duration: to the last token (E2E) for a success, to its end for a failure, with error.type; benchd's own
        cancelling is no operation's end. The server's TTFT and TPOT are "for successful responses" (the
        conventions), so they wait for the request's end."""
        if record.cut and not record.ok:
            return
        if not record.ok:
            self._failed_duration(error_type(record.error)).observe(record.finished_s - record.scheduled_s)
            return
        self.duration.observe(record.e2e_s)
        if self.server_ttft is not None:
            if (ttft := record.ttft_s) is not None:
                self.server_ttft.observe(ttft)
            if (tpot := record.tpot_s) is not None:
                self.server_tpot.observe(tpot)
        if self.input_tokens is not None:
            self.input_tokens.observe(record.prompt_tokens)
            self.output_tokens.observe(record.output_tokens)

    def run_finished(self, t: float, status: str, error: str | None) -> None:
        """The run's series folded into the totals: a finished run costs nothing."""
        self.genai.retire(self.series)
