"""Timed runs in the worker: training steps and single kernels, reported to the daemon as events like generation.

A timed run is a list of stages (a warm-up level of a training step, or one implementation at one kernel shape),
each ending in a summary built from its raw timings; a stage cut short by a stop or a failure keeps what it timed.
"""

from __future__ import annotations

from benchd.protocol.metadata import RunMetadata
from benchd.protocol.outbox import Outbox
from benchd.spec import KernelSpec, TrainStepSpec
from benchd.stopping import Stopped, StopSignal
from benchd.timed.context import TimedContext


def run_timed(spec: TrainStepSpec | KernelSpec, outbox: Outbox, metadata: RunMetadata,
              stop: StopSignal | None = None, model: str | None = None) -> tuple[str, str | None]:
    """Run a train_step or kernel spec; (status, error). Whatever happens, what was timed has been passed on."""
    from benchd.timed import kernel, train_step  # torch loads here, in the worker only

    body = {"train_step": train_step.execute, "kernel": kernel.execute}[spec.kind]
    context = TimedContext(spec, outbox, metadata, stop, model)
    try:
        body(context)
        context.close_stage()
        return "succeeded", None
    except KeyboardInterrupt:
        context.close_stage("interrupted")
        return "interrupted", None
    except Stopped as stopped:
        context.close_stage(stopped.reason)
        return stopped.reason, None
    except Exception as error:  # the run's one boundary in the worker: the failure is recorded with what was timed
        message = f"{type(error).__name__}: {error}"
        context.close_stage("failed", message)
        return "failed", message
