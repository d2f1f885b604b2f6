"""The worker process's entry point: started with spawn by the daemon (or the CLI), or as
`python -m benchd.worker.entry FD DEVICE LOG` from another Python environment's interpreter (supervisor/environments.py;
FD: its end of the daemon's socket pair), it takes its log and its priority, then serves the daemon (worker.process)
or launches a tensor-parallel group whose rank 0 does (worker.parallel)."""

from __future__ import annotations

import os
import signal
import sys
import traceback
from multiprocessing.connection import Connection

from benchd.loadgen import priority
from benchd.worker import process


def main(conn: Connection, device: str, log_path: str | None, env: dict[str, str] | None = None) -> None:
    """device: the worker's slot (cpu, cpu:1, cuda:0, cuda:0+cuda:1: what specs and fault settings name); env pins
    the process to its devices (CUDA_VISIBLE_DEVICES, BENCHD_WORKER_CPUS) and is set before torch loads. A
    tensor-parallel group (BENCHD_WORKER_TP > 1) launches its ranks here; rank 0 serves the daemon."""
    os.environ.update(env or {})
    if log_path is not None:  # fd 2 itself, so the C++ side's messages (CUDA errors, aborts) land there too
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 2)
        os.dup2(log, 1)
        sys.stderr = sys.stdout = os.fdopen(2, "w", buffering=1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the daemon, which stops runs itself
    priority.prioritize(int(os.environ.get("BENCHD_WORKER_NICE", "0")))  # before any thread: they inherit it
    try:
        if int(os.environ.get("BENCHD_WORKER_TP", "1")) > 1:
            from benchd.worker.parallel import launch  # torch loads here, in the worker only

            launch(conn, device)
        else:
            process.serve(conn, device)
    except (BrokenPipeError, ConnectionResetError, EOFError):  # the daemon died mid-message: nobody to report to
        print("benchd: the daemon is gone; the worker exits", file=sys.stderr, flush=True)
    except BaseException:  # a fault of the worker's own: its traceback to the log, exit code 1 to the daemon
        traceback.print_exc()
        process.exit_now(1)
    process.exit_now(0)


if __name__ == "__main__":  # started from an environment's interpreter: its settings are in its environment already
    fd, slot, log_file = sys.argv[1:4]
    main(Connection(int(fd)), slot, log_file)
