"""A trace file named by a spec, read at admission off the caller's threads (TRACE_READERS threads of their own, each
within TRACE_READ_S; a submission that finds them all busy for READER_WAIT_S is told to come back rather than
queued), and what it holds against the limits."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from benchd.admission.refusal import Later, Problems
from benchd.daemon.settings import Settings
from benchd.models.roots import path_problem
from benchd.spec import GenerateSpec, Trace, traces

TRACE_PATH = "workload.arrivals.path"  # read here, as well as held under the roots
TRACE_READERS = 2
TRACE_READ_S = 10.0
READER_WAIT_S = 1.0
_readers = ThreadPoolExecutor(TRACE_READERS, thread_name_prefix="benchd-trace")
_reading = threading.BoundedSemaphore(TRACE_READERS)


def read_trace(arrivals: Trace, max_bytes: int) -> traces.TraceSummary:
    """The trace's summary, read once by a reader thread within TRACE_READ_S (TraceError past it, or for the file);
    Later while every reader is busy."""
    if not _reading.acquire(timeout=READER_WAIT_S):
        raise Later(f"{TRACE_READERS} traces are being read: try again shortly")
    try:
        future = _readers.submit(traces.summarize, arrivals, max_bytes, TRACE_READ_S)
    except BaseException:
        _reading.release()
        raise
    future.add_done_callback(lambda _: _reading.release())
    try:
        return future.result(TRACE_READ_S + 1)  # the reader stops itself at TRACE_READ_S
    except FutureTimeout:
        raise traces.TraceTooSlow(f"{traces.WHERE}: {arrivals.path} was not read in time") from None


def trace_problems(spec: GenerateSpec, arrivals: Trace, settings: Settings, problems: Problems) -> None:
    """The trace's file under the roots and readable within the limits, and its requests, their time and lengths
    within them where the spec's stop does not bound them."""
    limits, where = settings.limits, ("workload", "arrivals", "path")
    if reason := path_problem(arrivals.path, settings.model_roots):
        problems.add(where, reason)
        return
    try:
        trace = read_trace(arrivals, limits.max_trace_bytes)
    except traces.TraceTooLarge as error:
        problems.add(where, f"{str(error).split(': ', 1)[1]} (BENCHD_LIMITS__MAX_TRACE_BYTES)")
        return
    except traces.TraceTooSlow as error:
        problems.add(where, f"{str(error).split(': ', 1)[1]}: admission reads a trace within {TRACE_READ_S:g} s")
        return
    except traces.TraceError as error:
        problems.add(where, str(error).split(": ", 1)[1])
        return
    if trace.requests > limits.max_requests and spec.workload.stop.requests is None:
        problems.add(where, f"the trace holds {trace.requests} requests, beyond the limit of {limits.max_requests} "
                            "(BENCHD_LIMITS__MAX_REQUESTS): set stop.requests")
    if trace.duration_s > limits.max_duration_s and spec.workload.stop.duration_s is None:
        problems.add(where, f"the trace lasts {trace.duration_s:,.0f} s, beyond the limit of "
                            f"{limits.max_duration_s:g} s (BENCHD_LIMITS__MAX_DURATION_S): set stop.duration_s or a "
                            "speedup")
    if trace.max_prompt_tokens > limits.max_prompt_tokens:
        problems.add(where, f"a prompt of {trace.max_prompt_tokens} tokens exceeds the limit of "
                            f"{limits.max_prompt_tokens} (BENCHD_LIMITS__MAX_PROMPT_TOKENS)")
    if trace.max_output_tokens > limits.max_output_tokens:
        problems.add(where, f"an output of {trace.max_output_tokens} tokens exceeds the limit of "
                            f"{limits.max_output_tokens} (BENCHD_LIMITS__MAX_OUTPUT_TOKENS)")
