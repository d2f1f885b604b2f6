"""The garbage collector kept out of measured time.

A process that has imported torch and transformers and loaded a model holds 400,000+ objects the collector tracks;
CPython's full collection walks all of them, and fires whenever the objects that outlived the young generations
grow by a quarter, which a run's records do. Measured on an H100 host's CPU (docs/benchmarks/daemon-and-dispatch.md): a
worker's full collections took 200–280 ms each, mid-run, holding its GIL and a core that the client processes or
the arrival thread were waiting for. `settle()` before measuring moves what exists then (imports, the model, the
started engine) out of the collector's sight (`gc.freeze`), so collections during a run walk only what the run
made; `release()` brings it all back and collects it, where a model or an engine is dropped, so nothing frozen
that became garbage outlives that.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc

GROWTH = 0.25  # CPython's own rule for a full collection: the long-lived heap grew by a quarter
_settled = 0  # objects frozen by the last full pass


def settle() -> None:
    """Collect what is garbage now and freeze the rest. After the first call this walks only what is new; once the
    frozen heap has grown by GROWTH since the last full pass, everything is thawed and walked once more, so garbage
    frozen by an earlier call (what a run left referenced until the next replaced it) is not kept for good."""
    global _settled
    if gc.get_freeze_count() > _settled * (1 + GROWTH):
        gc.unfreeze()
    full = gc.get_freeze_count() == 0
    gc.collect()
    gc.freeze()
    if full:
        _settled = gc.get_freeze_count()


def release() -> None:
    """Everything back in the collector's sight, collected: for when a model or an engine has been dropped (a
    frozen cycle holding its tensors would otherwise keep their memory, on the device too)."""
    gc.unfreeze()
    gc.collect()


def trim() -> None:
    """The C heap's free pages back to the system (glibc's malloc_trim; nothing elsewhere): what a large answer
    allocated and freed on a pool thread stays in that thread's malloc arena otherwise, and the daemon's memory
    ratchets up read after read."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None
