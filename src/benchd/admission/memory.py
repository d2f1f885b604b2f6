"""What a run may hold, before anything loads: its model, cache and steps on each device it takes (the GPU plan its
worker would make), and what its engine holds in host RAM beside the worker."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from benchd.admission.refusal import Problems
from benchd.daemon.settings import Settings
from benchd.hardware.devices import Slot
from benchd.models.memory import PlanError, estimate, gib, plan_for, planned
from benchd.spec import GenerateSpec, RunSpec

if TYPE_CHECKING:
    from benchd.hardware.sampler import HardwareSampler

HOST = Slot("cpu", "cpu", "")  # what host RAM is judged by: a CPU worker's slot


class Memory:
    """What a run on a worker may use: the configured limit, or its device's available memory (host RAM for a CPU,
    free GPU memory for CUDA) with what benchd itself holds there and would release counted back in."""

    def __init__(self, available: Callable[[Slot], int | None], held: Callable[[str], int] = lambda key: 0) -> None:
        self.available, self.held = available, held

    @classmethod
    def of(cls, sampler: HardwareSampler, held: Callable[[str], int]) -> Memory:
        """Host RAM available now for a CPU worker (psutil), free memory of its GPU for a CUDA one (the sampler's
        latest reading); held: what benchd holds on a device by its key (the worker pool's held_bytes)."""
        def available(slot: Slot) -> int | None:
            if slot.local == "cpu":
                import psutil

                return int(psutil.virtual_memory().available)
            return sampler.gpu_free_bytes(slot.gpu)

        return cls(available, held)

    def limit(self, settings: Settings, slot: Slot) -> int | None:
        if settings.limits.memory_bytes is not None:
            return settings.limits.memory_bytes
        free = self.available(slot)
        return None if free is None else int((free + self.held(slot.key)) * settings.limits.memory_fraction)


def host_problems(spec: GenerateSpec, settings: Settings, memory: Memory, problems: Problems) -> None:
    """What the engine holds in host RAM beside its worker (the openai engine's client processes), against it."""
    found = spec.host_bytes()
    if found is None or (limit := memory.limit(settings, HOST)) is None:
        return
    field, need, what = found
    if need > limit:
        source = ("BENCHD_LIMITS__MEMORY_BYTES" if settings.limits.memory_bytes is not None
                  else f"{settings.limits.memory_fraction:.0%} of what is available")
        problems.add(field, f"{what} hold about {gib(need)}, more than the {gib(limit)} of host RAM a run may "
                                    f"use ({source})")


def memory_problems(spec: RunSpec, settings: Settings, memory: Memory, slot: Slot, slots: Sequence[Slot],
                    problems: Problems) -> None:
    """A GPU group's ranks each hold a shard, checked against each member's memory; CPU ranks share the host's RAM,
    which must hold the whole."""
    members = [s for s in slots if s.key in slot.devices] if slot.local == "cuda" and slot.size > 1 else [slot]
    sharding = f", its 1/{len(members)} share" if len(members) > 1 else ""
    need = None if planned(spec, slot.local) else estimate(spec, slot.local)
    share = need.sharded(len(members)) if need is not None and len(members) > 1 else need
    for member in members:
        limit = memory.limit(settings, member)
        if limit is None:
            continue
        where = "host RAM" if slot.local == "cpu" else f"free memory on {member.key}"
        source = ("BENCHD_LIMITS__MEMORY_BYTES" if settings.limits.memory_bytes is not None
                  else f"{settings.limits.memory_fraction:.0%} of the {where}")
        if need is None:  # the worker's plan for the cache, steps and CUDA graphs, made with this limit
            try:
                plan_for(spec, limit, len(members))
            except PlanError as error:
                problems.add(tuple(error.field.split(".")), f"{error.reason} in {spec.dtype} on {member.key}"
                                                            f"{sharding} ({source})")
            continue
        if share is None or share.total <= limit:
            continue
        field = {"kernel": ("kernel", "shapes"), "train_step": ("train_step", "batch_size")}.get(spec.kind,
                                                                                                ("model",))
        problems.add(field, f"needs about {gib(share.total)}{sharding} ({share.describe()}) in {spec.dtype} on "
                            f"{member.key}, more than the {gib(limit)} it may use ({source})")

