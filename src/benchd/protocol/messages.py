"""The messages between the daemon and a worker process: plain tuples over a multiprocessing pipe.

Commands, daemon → worker:
  ("run", run_id, spec, faults, trace_id, confine)   run a RunSpec (a dict); faults: the fault-injection settings
                                     or None; trace_id: the run's trace, when traced (a server's requests join it);
                                     confine: the roots and the spec's paths the worker re-checks and opens as it
                                     loads (benchd.models.roots), or None
  ("cancel", run_id, reason)         end that run early (reason: cancelled | interrupted)
  ("warm", model, dtype, device)     load a model ahead of runs (the daemon's own, at start)
  ("stop",)                          finish, release the device and exit

Messages, worker → daemon:
  ("hello", pid, info)               started; info: versions, devices, nice, the real-time priority open
                                     loops send at (0: none), the device's speed (benchd.hardware.speed; None: unmeasured)
                                     (torch is imported)
  ("heartbeat", t, activity, phase, held)   every HEARTBEAT_S: perf_counter(), events made so far, what it is
                                     doing, and the GPU memory its torch allocator holds (bytes; 0 on a CPU):
                                     weights, a warm engine's KV cache, what it would release for another model
  ("events", run_id, [event, …])     a run's records and samples, in batches every BATCH_S
  ("warmed", model, error, load_s)   the answer to "warm"
  ("exiting", reason)                its device is unusable after this run: it exits after its "done" (take no
                                     more runs to it)
  ("done", run_id, status, error, error_stage, metadata)   a run's end, after its last events

Events of a run (worker-side stamps are time.perf_counter(): CLOCK_MONOTONIC on Linux, comparable between
processes, so every latency is derived in the daemon exactly as it would be in the worker):
  ("phase", name, t)                                   load | start | run: what a quiet worker is busy with
  ("stage", index, label, t0)                          a load level starts dispatching at t0
  ("request", stage, index, request_id, warmup, prompt_tokens, max_new_tokens, scheduled_s, submitted_s, span_id)
  ("submitted", request_id, t)                         an engine that sends at the scheduled time itself did
  ("admitted", request_id, t)
  ("tokens", request_id, stamps, counts, token_ids)    counts None: one token per stamp
  ("prompt", request_id, n)                            the server's count of the prompt
  ("finished", request_id, t, error)
  ("load", stage, t, running, waiting, kv_used, kv_total)
  ("stage_end", index, status, end_s, kv_peak, stop_reason)   end_s: where an aborted stage's window closes;
                                                       status stopped: a stop rule ended it, stop_reason says why
  ("engine_restart", stage, reason)                    the stage's engine was replaced by a new one (reason:
                                                       out_of_memory), which runs the stages after it
  ("timing", stage, series, index, warmup, seconds)    a timed run's repetition
  ("timed_stage", kind, summary, start, end)           a timed run's stage closed with its summary (a dict)
  ("progress", label, index, stages, completed, expected, elapsed_s, duration_s)   a timed run's progress
"""

from __future__ import annotations

RUN, CANCEL, WARM, STOP = "run", "cancel", "warm", "stop"
HELLO, HEARTBEAT, EVENTS, WARMED, DONE, EXITING = "hello", "heartbeat", "events", "warmed", "done", "exiting"

EXIT_DEVICE_FAULT = 75  # the worker's exit code when a run left its device unusable (its "done" went first)

HEARTBEAT_S = 0.5
BATCH_S = 0.1  # how often a run's events leave the worker
