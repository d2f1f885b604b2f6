"""What a worker does, whatever carries its messages: keeps a model and an engine warm across runs, runs specs on
them and reports every event; the process around it (worker/process.py) only moves messages."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchd import heap
from benchd.engines import Engine, create_engine
from benchd.engines.probe import score
from benchd.hardware.speed import DeviceSpeed, measure
from benchd.loadgen.stage import run_stages
from benchd.models.confinement import Opened, open_confined
from benchd.models.loading import LoadedModel, load_model, resolve_device
from benchd.models.texts import resolved
from benchd.protocol import events
from benchd.protocol.messages import Done, Events, Exiting, Report, Warmed
from benchd.protocol.metadata import RunMetadata
from benchd.protocol.outbox import Outbox
from benchd.spec import GenerateSpec, KernelSpec, TrainStepSpec, traces, validate_spec
from benchd.spec.stack import loading_attention
from benchd.stopping import StopSignal
from benchd.timed import run_timed
from benchd.worker.faults import INJECTED_DEVICE_FAULT, Faults, arm
from benchd.worker.provenance import PeakMemory, collect, utc_now
from benchd.worker.subjects import Loaded, Served, Subject

Emit = Callable[[Report], None]


@dataclass(frozen=True, slots=True)
class _Run:
    """The run in progress: its events wait in its outbox, and its stop signal ends it."""

    run_id: str
    outbox: Outbox
    stop: StopSignal


class WorkerCore:
    def __init__(self, emit: Emit, device: str = "cpu", loader: Callable[..., LoadedModel] = load_model,
                 group: Any = None, dispatch_priority: int = 0) -> None:
        """device: the worker's slot, as specs and fault settings name it (cpu, cpu:1, cuda:0, cuda:0+cuda:1);
        group: the tensor-parallel group this worker is rank 0 of (workers/parallel.Group), which loads and starts
        with it; dispatch_priority: the real-time priority an open loop's sending thread takes
        (benchd.loadgen.priority)."""
        self.emit, self.device, self.loader, self.group = emit, device, loader, group
        self.dispatch_priority = dispatch_priority
        self._loaded: LoadedModel | None = None
        self._loaded_key: tuple[str, ...] | None = None
        self._engine: Engine | None = None
        self._engine_key: tuple | None = None
        self._engine_runs = 0  # runs the started engine has served
        self._run: _Run | None = None
        self._send = threading.Lock()  # a run's events leave before its "done"
        self._cancelled: dict[str, str] = {}  # cancels that arrived before their run started
        self.phase = "idle"
        self.broken: str | None = None  # a device error that outlives the run: the process must be replaced
        self.speed: DeviceSpeed | None = None  # the device's, as the worker measured it for its hello

    @property
    def activity(self) -> int:
        run = self._run
        return run.outbox.progress if run is not None else 0

    # ---- commands --------------------------------------------------------------------------------

    def warm(self, model: str, dtype: str, device: str) -> None:
        self.phase = "load"
        try:
            load_s = self._model_for(model, dtype, device)
            self.emit(Warmed(model, error=None, load_s=load_s))
        except Exception as error:  # the worker goes on: a run that names a loadable model can follow
            self.emit(Warmed(model, error=f"{type(error).__name__}: {error}", load_s=None))
        finally:
            self.phase = "idle"

    def cancel(self, run_id: str, reason: str) -> None:
        """Stop the run now, or as it starts if its command is still waiting its turn."""
        run = self._run
        if run is not None and run.run_id == run_id:
            run.stop.set(reason)
        else:
            self._cancelled[run_id] = reason

    def interrupt(self) -> None:
        """The worker is stopping: the run in progress ends as interrupted, with what it measured."""
        run = self._run
        if run is not None:
            run.stop.set("interrupted")

    def run(self, run_id: str, spec_data: dict, faults: dict | None, trace_id: str | None = None,
            confine: dict | None = None) -> None:
        """One run, start to end; every outcome ends in a Done after the run's last events. confine: the
        paths to open under the roots before anything loads (benchd.models.roots)."""
        outbox, stop = Outbox(), StopSignal()
        if run_id in self._cancelled:
            stop.set(self._cancelled.pop(run_id))
        self._run = _Run(run_id, outbox, stop)
        spec = validate_spec(spec_data)
        metadata: RunMetadata | None = None
        status, error, stage = "failed", None, "load"
        opened: dict[str, Opened] = {}
        try:
            # Every path checked again on what it opens: the run reads through the descriptors (confinement.Opened).
            confined_data, opened = open_confined(spec_data, confine)
            spec = validate_spec(confined_data)
            model = opened.get("model")
            source = spec.model if model is None else model.real if self.group is not None else model.path
            if self.group is not None and not (spec.engine_record and spec.engine_record.tensor_parallel):
                raise ValueError(f"a tensor-parallel worker runs an engine that shards its model, not {spec.runner}")
            if isinstance(spec, GenerateSpec):
                metadata, status, error, stage = self._generate(spec, outbox, stop, faults, trace_id,
                                                                (model.real if model else spec.model, source))
            else:
                metadata, status, error = self._timed(spec, outbox, stop, source)
                stage = "run"
        except Exception as failure:  # the worker's boundary around what precedes the runner's own
            status, error = "failed", f"{type(failure).__name__}: {failure}"
        finally:
            for item in opened.values():
                item.close()
            self.phase = "idle"
            if metadata is not None:
                metadata.run_id = run_id
                metadata.finished_at = utc_now()
            served = spec.engine_record is not None and not spec.engine_record.loads_model  # no device of ours
            self.broken = device_fault(None if served else resolve_device(spec.device))
            if self.broken:
                status, stage = "failed", stage if status == "failed" else "run"
                error = (f"{error}; " if error else "") + (f"the device is unusable after this run ({self.broken}): "
                                                           "the worker is replaced before the next")
            with self._send:
                self._flush()
                if self.broken:  # before its done: the daemon hands the next run to the replacement
                    self.emit(Exiting(self.broken))
                self.emit(Done(run_id, status, error, stage if status == "failed" else None, metadata))
                self._run = None

    def flush(self) -> None:
        """Pass on the current run's events (the sender calls this every BATCH_S, protocol/messages.py)."""
        with self._send:
            self._flush()

    def _flush(self) -> None:
        run = self._run
        if run is not None and (batch := run.outbox.drain()):
            self.emit(Events(run.run_id, batch))

    def close(self) -> None:
        self._close_engine()
        self._loaded = self._loaded_key = None
        if self.group is not None:
            self.group.exit()

    # ---- a generation run ------------------------------------------------------------------------

    def _phase(self, outbox: Outbox, name: str) -> None:
        self.phase = name
        outbox.put(events.Phase(name, time.perf_counter()))

    def _generate(self, spec: GenerateSpec, outbox: Outbox, stop: StopSignal, faults: dict | None,
                  trace_id: str | None, model: tuple[str, str]) -> tuple[RunMetadata, str, str | None, str]:
        """model: (what identifies the model: the spec's ref, or where its confined path really is; where to load it
        from)."""
        spec = resolved(spec)  # real requests or random ids, and what follows from it
        self._phase(outbox, "load")
        subject = self._subject(spec, model)
        self._phase(outbox, "start")
        engine = self._engine_for(spec)
        if self.group is None:  # a warm engine: nothing an earlier run cached serves this one
            engine.forget()  # (not in a tensor-parallel group: its ranks' caches must stay alike, and only rank 0
            # hears from the daemon between runs; its runs keep their predecessors' prefixes)
        metadata = collect(subject.device, spec.model, spec.label, subject.load_s)
        metadata.engine_settings = engine.settings()
        self._engine_runs += 1
        metadata.engine_run = self._engine_runs
        metadata.prompts, metadata.ignore_eos = spec.workload.prompts, spec.workload.ignore_eos
        metadata.logprobs = spec.quality.logprobs
        subject.describe(metadata, spec, engine)
        heap.settle()  # the model and the started engine out of the collector's walks while the run measures
        self._phase(outbox, "run")
        fault = Faults.model_validate(faults) if faults else None
        disarm = arm(fault, subject.loaded.model if subject.loaded else None) \
            if fault is not None and fault.applies(spec.name, spec.label, self.device) else None
        if fault is not None and disarm is not None:
            metadata.fault = fault.says()
        peak = PeakMemory(subject.device)
        try:
            status, error = run_stages(spec, engine, subject.streams, outbox, stop, trace_id,
                                       dispatch_priority=self.dispatch_priority,
                                       renew=None if self.group is not None else lambda: self._renew(spec))
        finally:
            if disarm is not None:
                disarm.set()
        metadata.peak_memory_bytes, metadata.peak_reserved_bytes = peak.read(), peak.reserved()
        if spec.quality.probe and subject.loaded is not None and self.group is None and status == "succeeded":
            # After every stage: the probe under the stack the run measured, its cost told (engines/probe.py); a
            # tensor-parallel group's forward pass is collective, and its ranks do not score it.
            self._phase(outbox, "probe")
            try:
                metadata.probe = score(subject.loaded, engine.attention.implementation if engine.attention else None)
            except (RuntimeError, ValueError) as failure:  # what the run measured stands; the probe says why not
                first = str(failure).splitlines()[0] if str(failure) else ""
                metadata.probe_error = f"{type(failure).__name__}: {first}"
        return metadata, status, error, "run"

    def _subject(self, spec: GenerateSpec, model: tuple[str, str]) -> Subject:
        """The model the run's engine serves, as its record says: loaded here (or kept), or a server's."""
        if not spec.engine_record.loads_model:
            return Served(spec)
        load_s = self._model_for(model[0], spec.dtype, spec.device, spec.trust_remote_code, spec.seed,
                                 spec.quantization, loading_attention(spec.attn_implementation), model[1])
        assert self._loaded is not None
        return Loaded(spec, self._loaded, load_s, self.group.size if self.group is not None else 1, self._limits)

    def _limits(self, device_type: str) -> dict | None:
        """The device's measured limits: the worker's hello's, or measured here in a CLI's own process (None: the
        device cannot run the probe). A tensor-parallel group's are its first rank's."""
        speed = self.speed
        if speed is None:
            try:
                speed = measure("cuda" if device_type == "cuda" else "cpu")
            except RuntimeError:
                return None
        return speed.as_dict()

    def _model_for(self, ref: str, dtype: str, device: str, trust_remote_code: bool = False,
                   seed: int = 0, quantization: str = "none", attn_implementation: str = "sdpa",
                   source: str | None = None) -> float | None:
        """Keep the loaded model unless another is needed; the load time when this call loaded one. One model at a
        time: variants of a matrix take turns (the next loads once the last is released), so that each engine sizes
        its cache from the same free memory and no variant runs beside another's weights. source: where to load ref
        from, when not from ref itself (a confined path's opened descriptor)."""
        key = (ref, dtype, device, quantization, attn_implementation)
        if self._loaded is not None and self._loaded_key == key:
            return None
        self._close_engine()
        self._loaded = self._loaded_key = None
        _release_memory()
        load = self.group.load if self.group is not None else self.loader  # a group's ranks load their shards
        self._loaded = load(source or ref, dtype, device, seed, trust_remote_code=trust_remote_code,
                            attn_implementation=attn_implementation, quantization=quantization)
        self._loaded_key = key
        return self._loaded.load_s

    def _engine_for(self, spec: GenerateSpec) -> Engine:
        """One engine stays started across runs that would configure it identically (no new warm-up)."""
        workload = spec.workload
        # a matrix may vary only these on one loaded model
        key = (spec.engine, spec.options, spec.model, workload.ignore_eos, traces.longest(workload),
               spec.compile, spec.attn_implementation, spec.quality.logprobs)
        if self._engine is not None and self._engine_key == key and self._engine.alive():
            return self._engine
        self._close_engine()
        engine = create_engine(self._loaded, spec)
        try:
            if self.group is not None:  # the other ranks start theirs with it: the start is collective, and every
                self.group.start(spec.model_dump(mode="json"))  # rank learns whether all could prepare (gate)
                engine.start(gate=self.group.gate)
            else:
                engine.start()
        except BaseException:
            # What the failed start held (its cache, its graphs) back to the device; on a broken CUDA context this
            # raises too, and the start's own error is the one to report.
            with contextlib.suppress(Exception):
                _release_memory()
            raise
        self._engine, self._engine_key, self._engine_runs = engine, key, 0
        return engine

    def _renew(self, spec: GenerateSpec) -> Engine:
        """A new engine for the stages after one whose engine ran out of device memory: the old one's cache and
        graphs are released first (a tensor-parallel group's ranks would have to renew together: not done)."""
        self._close_engine()
        return self._engine_for(spec)

    def _close_engine(self) -> None:
        if self._engine is not None:
            self._engine.stop()
            self._engine = self._engine_key = None
            # Its KV cache and CUDA graph pool back to the device: the next engine sizes its cache from the memory
            # the device reports free, which leaves out what torch's allocator keeps cached.
            _release_memory()

    # ---- a timed run -----------------------------------------------------------------------------

    def _timed(self, spec: TrainStepSpec | KernelSpec, outbox: Outbox, stop: StopSignal,
               model: str) -> tuple[RunMetadata, str, str | None]:
        # A timed run has the process to itself: no idle engine beside it holding its KV cache, its generation
        # thread and its setting of torch's CPU threads. It starts again, warmed up, at the next generation run.
        self._close_engine()
        if spec.kind == "train_step":
            # A training step builds its own model and needs the device's memory: the cached model is released
            # too, and loads again at the next generation run.
            self._loaded = self._loaded_key = None
            _release_memory()
        heap.settle()
        self._phase(outbox, "run")
        device = resolve_device(spec.device)
        metadata = collect(device, spec.subject, spec.label)
        metadata.device_limits = self._limits(device.type)  # the peak a training step's MFU is taken against
        status, error = run_timed(spec, outbox, metadata, stop, model)
        return metadata, status, error

    @property
    def held(self) -> tuple[str, ...] | None:
        """The model kept loaded: (ref, dtype, device, quantization, attention implementation)."""
        return self._loaded_key


def device_fault(device) -> str | None:
    """Whether the device still works after a run: a CUDA device-side assert or illegal address leaves the process's
    context unusable (every later call fails), which only a new process cures."""
    if INJECTED_DEVICE_FAULT:
        return INJECTED_DEVICE_FAULT[-1]
    if device is None or device.type != "cuda":
        return None
    import torch

    try:
        torch.cuda.synchronize(device)
        torch.ones(1, device=device).add_(1).item()
    except Exception as error:  # what the driver says, first line
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return None


def _release_memory() -> None:
    heap.release()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
