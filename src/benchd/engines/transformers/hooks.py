"""What benchd hangs on transformers' continuous batching: where its generation thread gives way to a due send (the
hand-off, on a CPU) and the count of the steps it schedules (the roofline's step log)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from benchd.engines.handoff import Handoff
from benchd.measure.roofline import StepLog, row_work


def handoff_hooks(model: torch.nn.Module, handoff: Handoff) -> list:
    """Where the generation thread gives way to a due send: before each decoder layer (the first list of modules:
    a forward pass of a small model on a CPU is milliseconds), and before and after each forward pass (sampling and
    scheduling lie between)."""
    layers: Iterable[torch.nn.Module] = next((m for m in model.modules()
                                              if isinstance(m, torch.nn.ModuleList) and len(m)), [])
    return [*(layer.register_forward_pre_hook(handoff.give_way) for layer in layers),
            model.register_forward_pre_hook(handoff.give_way), model.register_forward_hook(handoff.give_way)]


def count_steps(manager, steps: StepLog) -> None:
    """Each step the batching loop schedules, appended to steps as it is scheduled: the scheduler's answer wrapped on
    this manager's batch processors (a forward hook would miss every step a CUDA graph replays). Costs a pass over
    the step's rows in the generation thread (µs for hundreds of rows)."""
    create = manager._create_batch_processor

    def created():
        processor = create()  # a processor made before (at warm-up) is reset and returned again: wrapped once
        schedule = processor.scheduler.schedule_batch
        if getattr(schedule, "benchd_steps", None) is steps:
            return processor

        def scheduled(*args, **kwargs):
            answer = schedule(*args, **kwargs)
            rows = answer[0]
            if rows:  # None: the cache is full (offloaded, then asked again); empty: no step
                work = [row_work(row.state.position_offset, row.query_length, len(row.state.initial_tokens),
                                 row.has_new_token) for row in rows]
                steps.add(*(sum(column) for column in zip(*work)))
            return answer

        scheduled.benchd_steps = steps
        processor.scheduler.schedule_batch = scheduled
        return processor

    manager._create_batch_processor = created
