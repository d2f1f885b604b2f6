"""A tensor-parallel worker: a group of ranks (one a device) launched with torch's elastic launcher, the model
sharded with transformers' tp_plan="auto" (NCCL on CUDA, gloo on CPU). Rank 0 serves the daemon like any worker
and tells the other ranks what to load and start; transformers' continuous batching keeps them in step (its TP
driver, rank 0, broadcasts the requests it admits), so only rank 0 reports records."""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from benchd.models.convert import prepared
from benchd.models.loading import LoadedModel, load_model, local_tokenizer, resolve_dtype
from benchd.models.presets import PRESETS, real

log = logging.getLogger("benchd.worker")
PR_SET_PDEATHSIG = 1
MATERIALIZED = Path(tempfile.gettempdir()) / "benchd-presets"  # presets saved once, for every rank to load


def launch(conn: Connection, device: str) -> None:
    """The group's leader (the process the daemon spawned): its ranks, one a device, until they exit."""
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    size = int(os.environ["BENCHD_WORKER_TP"])
    # The daemon started this process as a daemonic child (it ends with the daemon), which multiprocessing forbids
    # to have children of its own; the ranks end with it through PDEATHSIG instead.
    multiprocessing.current_process().daemon = False
    with socket.socket() as s:  # a free port for the ranks' rendezvous, on this host only
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=size, rdzv_backend="c10d",
                          rdzv_endpoint=f"127.0.0.1:{port}", run_id=f"benchd-{os.getpid()}", max_restarts=0,
                          start_method="spawn", monitor_interval=0.5)
    elastic_launch(config, rank_main)(conn, device)


def rank_main(conn: Connection, device: str) -> int:
    """Every rank: dies with the leader, joins the group, then serves (rank 0) or follows."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # a killed leader takes its ranks with it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    cuda = torch.cuda.is_available() and os.environ.get("CUDA_VISIBLE_DEVICES") != ""
    if cuda:
        torch.cuda.set_device(local)
    elif cpus := os.environ.get("BENCHD_WORKER_CPUS"):  # CPU ranks: each its share of the group's cores
        cores = sorted(int(c) for c in cpus.split(","))
        share = cores[local::int(os.environ["WORLD_SIZE"])] or cores
        os.environ["BENCHD_WORKER_CPUS"] = ",".join(map(str, share))  # what serve() pins rank 0 to
        os.sched_setaffinity(0, share)
        torch.set_num_threads(len(share))
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    control = dist.new_group(backend="gloo")  # what rank 0 tells the others, beside the model's own traffic
    try:
        if rank == 0:
            from benchd.worker.process import serve

            serve(conn, device, Group(control))
        else:
            conn.close()
            follow(control)
    finally:
        dist.destroy_process_group()
    return rank


# What rank 0 tells the other ranks of its group (pickled by torch.distributed over the gloo control group; the
# daemon's messages never reach them: benchd/protocol is between the daemon and rank 0).


@dataclass(frozen=True, slots=True)
class LoadShards:
    ref: str
    path: str  # where every rank loads it from (a preset saved once: materialize)
    dtype: str
    trust_remote_code: bool
    attn_implementation: str


@dataclass(frozen=True, slots=True)
class StartEngine:
    spec: dict[str, Any]  # the run's RunSpec as JSON: its transformers options and workload


@dataclass(frozen=True, slots=True)
class Exit:
    pass


class Group:
    """Rank 0's side: every command here is one the other ranks carry out with it (loading and starting are
    collective)."""

    def __init__(self, control: Any) -> None:
        self.control = control
        self.size = dist.get_world_size()

    def _tell(self, command: LoadShards | StartEngine | Exit) -> None:
        dist.broadcast_object_list([command], src=0, group=self.control)

    def start(self, spec: dict[str, Any]) -> None:
        """The other ranks start their engines for this spec, as rank 0 starts its own."""
        self._tell(StartEngine(spec))

    def exit(self) -> None:
        self._tell(Exit())

    def gate(self, failure: BaseException | None) -> None:
        """Every rank's start, prepared or failed (rank 0's failure is its own to raise): another rank's failure
        raised here, so that no rank goes on into transformers' collective warm-up alone."""
        gate(self.control, failure)

    def load(self, ref: str, dtype: str, device: str, seed: int = 0, *, trust_remote_code: bool = False,
             attn_implementation: str = "sdpa", quantization: str = "none") -> LoadedModel:
        """The model, sharded over the group: a preset is saved once with its seeded weights, then every rank
        loads it with from_pretrained and tp_plan="auto" (unquantized: the spec refuses quantization with it)."""
        path = str(prepared(ref)) if real(ref) else materialize(ref, dtype, seed) if ref in PRESETS else ref
        self._tell(LoadShards(ref, path, dtype, trust_remote_code, attn_implementation))
        return load_sharded(ref, path, dtype, trust_remote_code, attn_implementation)


def materialize(ref: str, dtype: str, seed: int) -> str:
    """A preset's seeded random weights, built on rank 0's device (an 8B model initialises in seconds on a GPU,
    a minute on the CPU) and saved once, so every rank loads the same weights."""
    path = MATERIALIZED / f"{ref}-{dtype}-{seed}"
    if not (path / "config.json").exists():
        loaded = load_model(ref, dtype, "cuda" if dist.get_backend() == "nccl" else "cpu", seed)
        partial = path.with_suffix(".partial")
        shutil.rmtree(partial, ignore_errors=True)
        loaded.model.save_pretrained(partial)
        del loaded
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        partial.rename(path)
    return str(path)


def load_sharded(ref: str, path: str, dtype: str, trust_remote_code: bool = False,
                 attn_implementation: str = "sdpa") -> LoadedModel:
    from transformers import AutoModelForCausalLM
    from transformers.distributed import DistributedConfig

    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    torch_dtype = resolve_dtype(dtype, device)
    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, attn_implementation=attn_implementation,
                                                 distributed_config=DistributedConfig(tp_plan="auto"),
                                                 trust_remote_code=trust_remote_code)
    model.eval()
    return LoadedModel(ref=ref, model=model, device=device, dtype=torch_dtype, load_s=time.perf_counter() - start,
                       tokenizer=local_tokenizer(path))


def gate(control: Any, failure: BaseException | None) -> None:
    """All ranks at once, between preparing an engine and its collective warm-up: each rank's failure, if any,
    gathered over the control group; the first other rank's raised here (a rank's own is its caller's to raise)."""
    causes: list[str | None] = [None] * dist.get_world_size(control)
    dist.all_gather_object(causes, None if failure is None else f"{type(failure).__name__}: {failure}",
                           group=control)
    rank = dist.get_rank(control)
    for other, cause in enumerate(causes):
        if cause is not None and other != rank and failure is None:
            raise RuntimeError(f"rank {other} of the tensor-parallel group could not start its engine: {cause}")


def follow(control: Any) -> None:
    """Ranks 1…: load what rank 0 loads, start the engines it starts and keep them in step until rank 0 stops
    its engine (transformers' continuous batching carries the requests and the stop). A start that fails here is
    told to rank 0 through the gate (the run fails with this rank's cause) and this rank waits for what comes
    next."""
    from benchd.engines import create_engine
    from benchd.spec import validate_spec

    loaded: LoadedModel | None = None
    while True:
        holder: list[Any] = [None]
        dist.broadcast_object_list(holder, src=0, group=control)
        command = holder[0]
        if isinstance(command, LoadShards):
            loaded = None
            loaded = load_sharded(command.ref, command.path, command.dtype, command.trust_remote_code,
                                  command.attn_implementation)
        elif isinstance(command, StartEngine):
            spec = validate_spec(command.spec)
            try:
                engine = create_engine(loaded, spec)
            except Exception as error:  # the plan, the attention: told to rank 0, which fails the run with it
                gate(control, error)
                continue
            passed: list[bool] = []

            def gated(failure: BaseException | None, passed: list[bool] = passed) -> None:
                gate(control, failure)
                passed.append(failure is None)

            try:
                engine.follow(gated)
            except Exception:
                if passed and passed[0]:  # past the gate the ranks are in transformers' collectives: one failing
                    raise  # alone ends, and the launcher ends the group with it (rank 0's worker: replaced)
                log.warning("rank %d's engine did not start", dist.get_rank(), exc_info=True)
        elif isinstance(command, Exit):
            return
