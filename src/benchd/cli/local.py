"""Runs here, with no daemon, as `benchd run` makes them (one spec, or a matrix's variants): the hardware sampler, the
workers of the devices the specs take, telemetry (OTEL_* read first), Ctrl-C as a stop, what the daemon's admission
would refuse unless --force, and the daemon's lifecycle to run them through."""

from __future__ import annotations

import signal
import tempfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from benchd.spec import RunSpec

if TYPE_CHECKING:
    from benchd.daemon.lifecycle import Lifecycle
    from benchd.hardware.sampler import HardwareSampler
    from benchd.hardware.speed import DeviceSpeed
    from benchd.supervisor.pool import WorkerPool
    from benchd.telemetry.run import Telemetry

WORKER_LOG = Path(tempfile.gettempdir()) / "benchd-workers"  # the workers' logs (a failed load's message names it)


class SettingsError(Exception):
    """BENCHD_* settings (or BENCHD_CONFIG's file) that do not validate: str() names each and why."""


@cache
def daemon_settings():
    """The daemon's settings (BENCHD_*, BENCHD_CONFIG), which the command line honours as the daemon does: what a
    spec leaves unset (model, device, dtype, label, validity rules), the limits admission checks, the declared
    environments, and the verdicts' threshold and confidence."""
    from pydantic import ValidationError

    from benchd.daemon.settings import Settings
    from benchd.spec import format_validation_error

    try:
        return Settings()
    except ValidationError as error:
        raise SettingsError("settings (BENCHD_*): " + format_validation_error(error).replace("\n", "; ")) from None


class Refused(Exception):
    """What keeps the runs from starting: a device that is not here, or what admission refuses (one line each)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


class Local:
    """`with Local(specs, force) as here:` … `here.lifecycle.execute(run_id, spec, device, here.stop)`; everything
    it started stops on the way out."""

    def __init__(self, specs: Sequence[RunSpec], force: bool = False, labels: Sequence[str] | None = None) -> None:
        """labels: a name for each spec in admission's messages (a matrix's variants)."""
        self.specs, self.force, self.labels = list(specs), force, labels
        self.dropped_spans = 0
        # made by __enter__ (torch's and the SDK's imports wait for it)
        self.pool: WorkerPool | None = None
        self.sampler: HardwareSampler | None = None
        self.telemetry: Telemetry | None = None
        self.lifecycle: Lifecycle | None = None

    def __enter__(self) -> Local:
        from benchd.daemon.lifecycle import Lifecycle
        from benchd.hardware.devices import DeviceError, local, targets
        from benchd.hardware.reader import HardwareReader
        from benchd.hardware.sampler import HardwareSampler
        from benchd.stopping import StopSignal
        from benchd.supervisor.environments import Environments
        from benchd.supervisor.pool import WorkerPool
        from benchd.supervisor.settings import WorkerSettings
        from benchd.telemetry.genai import build_genai_metrics
        from benchd.telemetry.run import Telemetry
        from benchd.telemetry.tracing import build_tracer_provider

        settings = daemon_settings()
        # OTEL_* variables are read first: a bad one stops the command before anything starts.
        self.telemetry = Telemetry(tracer_provider=build_tracer_provider(on_drop=self._dropped),
                                   genai=build_genai_metrics())
        self.sampler = HardwareSampler(HardwareReader.default())
        self.sampler.start()
        try:
            slots = local(sorted({spec.device for spec in self.specs}), self.sampler.reader.nvml.devices)
            # the devices the runs take; their workers start as the runs take them (one each, or a group's)
            chosen = [c for spec in self.specs for c in targets(slots, spec.device, spec.placement,
                                                                  spec.tensor_parallel)]
        except DeviceError as error:
            self.__exit__()
            raise Refused([str(error)]) from None
        slots = [s for s in slots if any(s.key in c.devices for c in chosen)]
        # the environments the daemon's settings declare (BENCHD_ENVIRONMENTS), built where the daemon builds them
        environments = Environments(settings.environments, settings.environments_dir)
        self.pool = WorkerPool(slots, WorkerSettings(log_dir=WORKER_LOG), environments=environments)
        if not self.force and (found := self._refused()):
            self.__exit__()
            raise Refused([*found, "(--force runs it anyway)"])
        self.stop = StopSignal()
        signal.signal(signal.SIGINT, lambda *_: self.stop.set("interrupted"))  # the worker ignores Ctrl-C: it is told
        self.lifecycle = Lifecycle(self.pool, self.telemetry, self.sampler, threshold=settings.compare_threshold,
                                   confidence=settings.compare_confidence)
        return self

    def __exit__(self, *exc) -> None:
        if self.pool is not None:
            self.pool.stop()
        if self.telemetry is not None:
            self.telemetry.shutdown()
        if self.sampler is not None:
            self.sampler.stop()

    def _dropped(self, reason: str, n: int) -> None:
        self.dropped_spans += n

    def _refused(self) -> list[str]:
        """What the daemon's admission refuses of each run that it could not run here (benchd.admission, not remote:
        its devices and stack, its requests against the model, its memory, its time at the speed its workers
        measured), one line each. A worker that did not start leaves its runs unjudged: they fail as they start,
        saying why."""
        from benchd import admission

        settings = daemon_settings()
        assert self.sampler is not None and self.pool is not None  # __enter__ made them first
        memory = admission.Memory.of(self.sampler, self.pool.held_bytes)
        found: list[str] = []
        speeds: dict[str, DeviceSpeed | None] = {}  # by slot key, as each spec's workers measured their devices
        for index, spec in enumerate(self.specs):
            prefix = f"variant {self.labels[index]}: " if self.labels else ""
            speeds.update((slot.key, speed) for slot, speed in self.pool.measured(spec.device, spec.placement,
                                                                                  spec.tensor_parallel))
            try:
                admission.admit(spec, settings, memory, self.pool.slots, lambda slot: speeds.get(slot.key),
                                remote=False)
            except admission.Refused as refusal:
                found += [line for problem in refusal.problems if (line := prefix + problem.line()) not in found]
            except admission.Later:  # a timed run whose worker did not start: it fails as it starts, saying why
                continue
        return found
