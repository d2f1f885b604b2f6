"""What a generation engine is (its record), and the engines benchd has: each a folder of benchd/engines whose
torch-free spec.py declares ENGINE, or a module named by the `benchd.engines` entry-point group that does; found
once, on first use (docs/architecture.md, "Adding an engine")."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import threading
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from benchd.spec.run import GenerateSpec

PACKAGE = "benchd.engines"  # its folders, then the entry-point group of the same name


@dataclass(frozen=True, slots=True)
class EngineRecord:
    """What the rest of benchd asks of an engine, declared by the engine: the daemon (admission, roots, the duration
    estimate, telemetry) reads it without loading the engine, which only the worker imports, through `create`."""

    name: str  # the spec's `engine`, and the section of the spec holding its options
    spec: type[GenerateSpec]  # its spec: GenerateSpec with `engine: Literal[name]` and its options' section
    create: str  # "module:function" (loaded, spec) -> Engine, imported in the worker only (it may import torch)
    # benchd loads the model into its worker (token prompts from the model's vocabulary, the model's memory and
    # the device's); else a server holds it, reached over the network (text prompts, sized by a tokenizer)
    loads_model: bool
    # How a token's arrival is stamped: by the engine as it makes the token ("engine"), or as the client reads a
    # server's stream ("stream", measured from outside: OpenTelemetry's client metrics rather than the server's)
    stamps: Literal["engine", "stream"]
    genai_provider: str  # gen_ai.provider.name of its requests (OpenTelemetry's GenAI conventions)
    tensor_parallel: bool = False  # shards the model over a worker group (tensor_parallel > 1)
    paged_attention: bool = False  # runs continuous batching's paged attention kernels (attn_implementation paged|…)
    compiles: bool = False  # the spec's compile (torch.compile of the model's forward) applies
    memory: Any = None  # what a run needs in memory before it loads (models/memory.py, EngineMemory); None: nothing
    default: bool = False  # the engine of a spec that names none (one engine is)


_lock = threading.RLock()
_found: dict[str, EngineRecord] | None = None
_finding = False


class EngineError(RuntimeError):
    """Engines that cannot all be had: two of one name, a folder whose declaration fails to import."""


def engines() -> dict[str, EngineRecord]:
    """Every engine by name, the default first, then by name."""
    global _found, _finding
    if _found is not None:
        return _found
    with _lock:
        if _found is None:
            if _finding:
                raise EngineError("an engine's declaration asked for the engines while they were being found: it "
                                  "must not build a RunSpec as it is imported")
            _finding = True
            try:
                _found = _discover()
            finally:
                _finding = False
    return _found


def _discover() -> dict[str, EngineRecord]:
    package = importlib.import_module(PACKAGE)
    declared = [importlib.import_module(f"{PACKAGE}.{m.name}.spec") for m in pkgutil.iter_modules(package.__path__)
                if m.ispkg and importlib.util.find_spec(f"{PACKAGE}.{m.name}.spec") is not None]
    declared += [point.load() for point in entry_points(group=PACKAGE)]  # a module, or its record itself
    found: dict[str, EngineRecord] = {}
    for item in declared:
        record = item if isinstance(item, EngineRecord) else getattr(item, "ENGINE", None)
        if not isinstance(record, EngineRecord):
            continue  # a folder of shared parts, with no engine of its own
        if record.name in found:
            raise EngineError(f"two engines named {record.name!r}: {found[record.name].create} and {record.create}")
        found[record.name] = record
    defaults = [r.name for r in found.values() if r.default]
    if len(defaults) != 1:
        raise EngineError(f"one engine must be the default, not {defaults or 'none'}")
    return dict(sorted(found.items(), key=lambda item: (not item[1].default, item[0])))


def engine_record(name: str) -> EngineRecord:
    return engines()[name]


def default_engine() -> str:
    return next(iter(engines()))
