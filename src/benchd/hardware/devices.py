"""Where workers run: BENCHD_DEVICES resolved against the GPUs NVML sees, one slot a GPU (or a CPU worker), each
with the name specs use, the label its series carry, and what pins its process to its device; and the slots a run
takes: one, every one, or tensor-parallel groups of consecutive ones."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from benchd.hardware.nvml import visible_devices


@dataclass(frozen=True, slots=True)
class Slot:
    key: str  # what a spec's device names: cpu, cpu:1 (CPU workers), cuda:0 (the first visible GPU, as torch counts);
    # a tensor-parallel group joins its members' keys: cuda:0+cuda:1
    local: str  # the device inside the worker process: cpu, or cuda (its only visible GPU, or its group's)
    gpu: str  # the label its series carry: NVML's index (as nvidia-smi and DCGM number GPUs), 0+1 for a group; ""
    # for the CPU
    env: dict[str, str] = field(default_factory=dict)  # what pins the process to its devices

    @property
    def name(self) -> str:
        return "worker" if self.key == "cpu" else f"worker-{self.key.replace(':', '')}"

    @property
    def devices(self) -> tuple[str, ...]:
        """The single slots' keys it occupies."""
        return tuple(self.key.split("+"))

    @property
    def size(self) -> int:
        return len(self.devices)


class DeviceError(ValueError):
    """BENCHD_DEVICES, or a spec, names devices that are not here; the message starts with the field."""

    @property
    def field(self) -> str:
        return str(self).split(":", 1)[0]

    @property
    def reason(self) -> str:
        return str(self).split(":", 1)[1].strip()


def resolve(setting: str | Sequence[str], gpus: Sequence[tuple[str, str, str]],
            cuda_visible: str | None = None, cores: Sequence[int] | None = None) -> list[Slot]:
    """setting: "all" (every GPU CUDA_VISIBLE_DEVICES leaves visible, or the CPU when there is none) or a list of
    cuda:N (N in CUDA's numbering of the visible GPUs), cpu, or cpu:0 … cpu:K (CPU workers, each pinned to its share
    of the cores: for tests of several workers without a GPU). gpus: NVML's (index, uuid, name), visible ones."""
    ordered = _cuda_order(gpus, cuda_visible)
    names = list(setting) if not isinstance(setting, str) else (
        ["all"] if setting.strip() == "all" else [part.strip() for part in setting.split(",") if part.strip()])
    if names == ["all"]:
        names = [f"cuda:{k}" for k in range(len(ordered))] or ["cpu"]
    cpu_workers = [n for n in names if n.startswith("cpu:")]
    cores = list(cores if cores is not None else sorted(os.sched_getaffinity(0)))
    slots = []
    for name in names:
        if name == "cpu":
            slots.append(Slot("cpu", "cpu", ""))
        elif name.startswith("cpu:") and name[4:].isdigit():
            k = int(name[4:])
            share = cores[k::len(cpu_workers)] or cores  # each CPU worker on its own cores
            slots.append(Slot(name, "cpu", name, {"BENCHD_WORKER_CPUS": ",".join(map(str, share))}))
        elif name.startswith("cuda:") and name[5:].isdigit():
            k = int(name[5:])
            if k >= len(ordered):
                raise DeviceError(f"BENCHD_DEVICES: {name}: {len(ordered)} GPU(s) visible here")
            index, uuid, _ = ordered[k]
            # The worker sees its GPU alone, named by UUID: no numbering can disagree.
            slots.append(Slot(name, "cuda", index, {"CUDA_VISIBLE_DEVICES": uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}))
        else:
            raise DeviceError(f"BENCHD_DEVICES: {name!r} is not all, cpu, cpu:N or cuda:N")
    if len({s.key for s in slots}) != len(slots):
        raise DeviceError("BENCHD_DEVICES: a device is named twice")
    return slots


def _cuda_order(gpus: Sequence[tuple[str, str, str]], cuda_visible: str | None) -> list[tuple[str, str, str]]:
    """The visible GPUs in CUDA's order: CUDA_VISIBLE_DEVICES' order when it is set, else NVML's (PCI bus order)."""
    visible = visible_devices(cuda_visible)
    if visible is None:
        return sorted(gpus, key=lambda g: int(g[0]))
    ordered = []
    for entry in visible:
        for gpu in gpus:
            named = gpu[0] == entry if entry.isdigit() else gpu[1].upper().startswith(entry.upper())
            if named:
                ordered.append(gpu)
                break
    return ordered


def local(devices: Sequence[str], gpus: Sequence[tuple[str, str, str]]) -> list[Slot]:
    """The slots of a run outside a daemon (benchd run): BENCHD_DEVICES (default: every visible GPU), or the CPU
    devices named, where they are all CPUs and BENCHD_DEVICES names no CPU worker."""
    setting: str | list[str] = os.environ.get("BENCHD_DEVICES", "all")
    if all(d.startswith("cpu") for d in devices) and "cpu" not in setting:
        setting = sorted(devices)
    return resolve(setting, gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))


def pick(slots: Sequence[Slot], device: str) -> Slot | None:
    """The slot a spec's device names: auto and cuda mean the first GPU (or the CPU worker where there is none)."""
    if device in ("auto", "cuda"):
        gpu = next((s for s in slots if s.local == "cuda"), None)
        return gpu if gpu is not None or device == "cuda" else slots[0] if slots else None
    if device == "cpu":
        return next((s for s in slots if s.local == "cpu"), None)
    return next((s for s in slots if s.key == device), None)


def group(members: Sequence[Slot]) -> Slot:
    """One worker over several devices (a tensor-parallel group): its ranks see exactly its members' GPUs (or
    share its members' cores), one rank a device."""
    if len(members) == 1:
        return members[0]
    local = members[0].local
    env = {"BENCHD_WORKER_TP": str(len(members))}
    if local == "cuda":
        env |= {"CUDA_VISIBLE_DEVICES": ",".join(m.env["CUDA_VISIBLE_DEVICES"] for m in members),
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    else:
        env["BENCHD_WORKER_CPUS"] = ",".join(m.env["BENCHD_WORKER_CPUS"] for m in members)
    return Slot("+".join(m.key for m in members), local, "+".join(m.gpu for m in members), env)


def targets(slots: Sequence[Slot], device: str, placement: str = "one", tensor_parallel: int = 1) -> list[Slot]:
    """The slots a run takes: the device's (placement one) or every one (every_gpu); with tensor_parallel N, groups
    of N consecutive devices of one kind (8 GPUs: 4 groups of 2), the device's group or every group. A
    DeviceError names the field and why."""
    if tensor_parallel > 1:
        shareable = [s for s in slots if s.local == "cuda" or "BENCHD_WORKER_CPUS" in s.env]
        if len(shareable) < tensor_parallel:
            raise DeviceError(f"tensor_parallel: {tensor_parallel} devices per group, but {len(shareable)} can be "
                              f"grouped here ({', '.join(s.key for s in shareable) or 'none'}; GPUs, or the CPU "
                              "workers cpu:N that BENCHD_DEVICES names)")
        groups = [shareable[i:i + tensor_parallel]
                  for i in range(0, len(shareable) - len(shareable) % tensor_parallel, tensor_parallel)]
        if placement == "every_gpu":
            return [group(g) for g in groups]
        first = pick(shareable, device)
        chosen = next((g for g in groups if first is not None and first in g), None)
        if chosen is None:
            raise DeviceError(f"device: {device!r} is in no group of {tensor_parallel} "
                              f"(groups: {', '.join(group(g).key for g in groups)})")
        return [group(chosen)]
    if placement == "every_gpu":
        return list(slots)
    slot = pick(slots, device)
    if slot is None:
        raise DeviceError(f"device: {device!r} is not one of this daemon's devices "
                          f"({', '.join(s.key for s in slots)})")
    return [slot]
