"""Fault injection, for tests and bench scripts only: settings (BENCHD_FAULTS__…), never HTTP. A fault fires in
the worker during runs of one named workload, so the run after it shows the daemon recovered."""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Action = Literal["abort", "exit", "kill", "segfault", "hang", "stall", "slow", "spin", "error", "device_assert",
                 "oom"]
# What an injected device fault left behind on a CPU worker, where no real device-side assert can happen: the
# worker treats it as it treats a CUDA context a real one broke (workers/core.device_fault).
INJECTED_DEVICE_FAULT: list[str] = []


class Faults(BaseModel):
    """abort: SIGABRT; exit: the process exits with code 3; kill: SIGKILL (as the OOM killer does); segfault: a
    NULL read; hang: a call that never returns and holds the GIL (a hung driver call: no heartbeat either); stall:
    the model's forward pass never returns (the worker still answers heartbeats, but makes no progress); slow:
    every forward pass takes delay_s longer (a slow GPU: it sleeps, so other threads run meanwhile); spin: every
    forward pass busy-waits delay_s, holding its core and the GIL as more computation would (a known step on a CPU,
    where a short sleep costs a scheduler's tick more); error: every forward pass raises (an engine fault the
    worker survives); device_assert: after after_s, a forward pass indexes out of bounds on the model's device (a
    real device-side assert on CUDA, which leaves the process's CUDA context unusable; on a CPU, a stand-in that
    marks the device broken the same way); oom: after after_s, one forward pass raises torch's out-of-memory error
    (what a step that does not fit raises; called eagerly only: a replayed CUDA graph calls no hook)."""

    model_config = ConfigDict(extra="forbid")

    workload: str | None = None  # runs of this workload (spec name); None: no fault
    label: str | None = None  # and, when set, only those with this label
    action: Action = "abort"  # what happens (the class's docstring says what each does)
    after_s: Annotated[float, Field(ge=0)] = 1.0  # into the run (abort, exit, kill, segfault, hang)
    delay_s: Annotated[float, Field(ge=0)] = 0.0  # per forward pass (slow, spin)
    devices: list[str] | None = None  # only the workers on these devices (cpu, cuda:0, …); None: every worker

    def says(self) -> str:
        """What it does to a run, for its metadata: slow: +0.02 s a forward pass (injected)."""
        what = {"slow": f"+{self.delay_s:g} s a forward pass", "oom": f"out of memory after {self.after_s:g} s",
                "device_assert": f"a device-side assert after {self.after_s:g} s"}.get(
            self.action, f"after {self.after_s:g} s" if self.action not in ("stall", "error") else "")
        return f"{self.action}: {what} (injected)" if what else f"{self.action} (injected)"

    def applies(self, workload: str, label: str | None, device: str) -> bool:
        return (self.workload == workload and (self.label is None or self.label == label)
                and (self.devices is None or device in self.devices))


def arm(faults: Faults, model=None) -> threading.Event:
    """Start the fault for the run beginning now; setting the returned event disarms it (the run ended first)."""
    disarmed = threading.Event()
    on_cuda = model is not None and next(model.parameters()).device.type == "cuda"
    if faults.action in ("slow", "spin", "stall", "error", "oom") or (faults.action == "device_assert" and not on_cuda):
        if model is not None:
            started = time.perf_counter()
            fired = threading.Event()

            def delay(module, args) -> None:
                if faults.action == "oom":
                    if not fired.is_set() and time.perf_counter() - started > faults.after_s:
                        fired.set()
                        import torch

                        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 540.00 MiB (injected)")
                elif faults.action == "slow":
                    time.sleep(faults.delay_s)
                elif faults.action == "spin":
                    until = time.perf_counter() + faults.delay_s
                    while time.perf_counter() < until:
                        pass
                elif faults.action == "error":
                    raise RuntimeError("injected engine fault")
                elif faults.action == "device_assert":
                    if time.perf_counter() - started > faults.after_s:
                        device_assert(next(module.parameters()).device)
                elif time.perf_counter() - started > faults.after_s:
                    time.sleep(10**6)  # releases the GIL: heartbeats go on, tokens stop

            hook = model.register_forward_pre_hook(delay)
            threading.Thread(target=lambda: (disarmed.wait(), hook.remove()), daemon=True).start()
        return disarmed

    def fire() -> None:
        if disarmed.wait(faults.after_s):
            return
        if faults.action == "abort":
            os.abort()
        elif faults.action == "exit":
            os._exit(3)
        elif faults.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif faults.action == "segfault":
            ctypes.string_at(0)
        elif faults.action == "hang":
            ctypes.PyDLL(None).sleep(10**6)  # libc sleep through PyDLL keeps the GIL: every thread stops
        elif faults.action == "device_assert":  # from this thread: CUDA graphs replay without calling forward
            try:
                device_assert(next(model.parameters()).device)
            except Exception:  # the assert poisons the whole context; the engine's next call fails with it
                pass

    threading.Thread(target=fire, name="benchd-fault", daemon=True).start()
    return disarmed


def device_assert(device) -> None:
    """An out-of-bounds index on the device: on CUDA the kernel's assert fires asynchronously and every later call
    in the process fails with "device-side assert triggered"."""
    import torch

    if device.type == "cuda":
        torch.zeros(1, device=device)[torch.full((1,), 2, device=device)].cpu()
    INJECTED_DEVICE_FAULT.append("RuntimeError: device-side assert triggered (injected on the CPU)")
    raise RuntimeError(INJECTED_DEVICE_FAULT[-1])
