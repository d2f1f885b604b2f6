"""Tensor parallelism: groups of consecutive devices, one worker a group (its ranks launched with torch's elastic
launcher, the model sharded by transformers' tp_plan="auto"), refused when the devices cannot form it (their memory:
tests/admission/test_memory.py). On CPU: two CPU workers become one group of two gloo ranks, which must decode
greedily the same tokens as one worker does."""

import uuid
from pathlib import Path

import pytest

from benchd.daemon.lifecycle import Lifecycle
from benchd.hardware.devices import DeviceError, resolve, targets
from benchd.spec import SpecError, parse_spec, validate_spec
from benchd.stopping import StopSignal
from benchd.supervisor.pool import WorkerPool
from benchd.supervisor.settings import WorkerSettings
from benchd.telemetry.run import Telemetry
from tests.helpers import spec

EIGHT = [(str(i), f"GPU-{i:04d}", "H200") for i in range(8)]


def test_groups_are_consecutive_devices_each_worker_seeing_only_its_own():
    slots = resolve("all", EIGHT)
    groups = targets(slots, "auto", "every_gpu", 2)
    assert [g.key for g in groups] == ["cuda:0+cuda:1", "cuda:2+cuda:3", "cuda:4+cuda:5", "cuda:6+cuda:7"]
    assert [g.gpu for g in groups] == ["0+1", "2+3", "4+5", "6+7"]
    assert groups[1].env == {"BENCHD_WORKER_TP": "2", "CUDA_VISIBLE_DEVICES": "GPU-0002,GPU-0003",
                             "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert groups[1].devices == ("cuda:2", "cuda:3") and groups[1].size == 2
    assert [g.key for g in targets(slots, "cuda:5", "one", 4)] == ["cuda:4+cuda:5+cuda:6+cuda:7"]
    assert [g.key for g in targets(slots, "cuda:3", "one", 1)] == ["cuda:3"]
    assert len(targets(slots, "auto", "every_gpu", 1)) == 8
    cpu = targets(resolve(["cpu:0", "cpu:1"], [], cores=[0, 1, 2, 3]), "cpu:0", "one", 2)
    assert [(g.key, g.env) for g in cpu] == [("cpu:0+cpu:1", {"BENCHD_WORKER_TP": "2",
                                                              "BENCHD_WORKER_CPUS": "0,2,1,3"})]


def test_groups_that_cannot_be_formed_name_the_field():
    slots = resolve("all", EIGHT[:4])
    with pytest.raises(DeviceError, match="devices per group, but 4 can be grouped here") as error:
        targets(slots, "auto", "one", 8)
    assert error.value.field == "tensor_parallel"
    no_group = r"'cuda:3' is in no group of 3 \(groups: cuda:0\+cuda:1\+cuda:2\)"
    with pytest.raises(DeviceError, match=no_group) as error:
        targets(slots, "cuda:3", "one", 3)
    assert error.value.field == "device"
    # one CPU worker has no cores of its own to share
    with pytest.raises(DeviceError, match="but 0 can be grouped here"):
        targets(resolve("all", []), "cpu", "one", 2)


def test_tensor_parallel_is_for_transformers_generation_only():
    with pytest.raises(SpecError, match="tensor_parallel: shards a model over a worker group"):
        parse_spec({"tensor_parallel": 2, "engine": "static"})
    with pytest.raises(SpecError, match="tensor_parallel"):
        parse_spec({"tensor_parallel": True})
    with pytest.raises(SpecError, match="tensor_parallel"):
        parse_spec({"tensor_parallel": 0})
    assert parse_spec({"tensor_parallel": 2}).tensor_parallel == 2


@pytest.mark.engine
def test_two_gloo_ranks_decode_the_same_tokens_as_one_worker(tmp_path):
    """The whole path: the pool swaps the two single workers for a group and back, and greedy decoding over
    the sharded tiny model (its two KV heads split one a rank) gives every request the same token ids."""
    pool = WorkerPool(resolve(["cpu:0", "cpu:1"], []), WorkerSettings(log_dir=Path(tmp_path)))
    lifecycle = Lifecycle(pool, Telemetry())
    tokens, arrangements = {}, {}
    try:
        for tp in (2, 1):
            run = validate_spec({**spec(requests=4, output=12, concurrency=2), "model": "tiny",
                                 "dtype": "float32", "device": "cpu:0", "tensor_parallel": tp})
            result = lifecycle.execute(uuid.uuid4().hex, run, "cpu:0", StopSignal())
            assert result.status == "succeeded", result.error
            arrangements[tp] = sorted(pool.workers)
            tokens[tp] = {r.index: r.token_ids for stage in result.stages for r in stage.records}
            assert result.metadata.engine_settings["engine"] == "transformers"
            # the roofline counts a rank's share of each step (its heads, its MLP columns) on its own device
            assert result.metadata.model_cost["shape"]["heads"] == 4 // tp
    finally:
        pool.stop()
    assert arrangements == {2: ["cpu:0+cpu:1"], 1: ["cpu:0", "cpu:1"]}
    assert len(tokens[2]) == 4 and all(len(ids) == 12 for ids in tokens[2].values())
    assert tokens[2] == tokens[1]


def _gate_ranks(rank: int, store: str, results) -> None:
    """One of two gloo ranks through the gate three times: rank 1 failing, rank 0 failing, neither."""
    import torch.distributed as dist

    from benchd.worker.parallel import gate

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        for failing in (1, 0, None):
            try:
                gate(dist.group.WORLD, SpecError("model: no room for the cache") if rank == failing else None)
                results.put((failing, rank, None))
            except RuntimeError as error:
                results.put((failing, rank, str(error)))
    finally:
        dist.destroy_process_group()


def test_a_rank_that_cannot_prepare_its_engine_fails_every_rank_with_its_cause(tmp_path):
    """Before transformers' collective warm-up, the ranks of a group say whether each could prepare its engine (the
    plan, the attention, transformers' own check): a failure on one rank is raised on the others with its rank and
    cause, so none goes on alone into a collective the failed one never joins (the run fails with that cause; the
    failed rank raises its own)."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    ranks = [context.Process(target=_gate_ranks, args=(rank, str(tmp_path / "store"), results)) for rank in (0, 1)]
    for process in ranks:
        process.start()
    seen = {}
    for _ in range(6):
        failing, rank, raised = results.get(timeout=120)
        seen[failing, rank] = raised
    for process in ranks:
        process.join(30)
    cause = "could not start its engine: SpecError: model: no room for the cache"
    assert seen == {(1, 0): f"rank 1 of the tensor-parallel group {cause}", (1, 1): None,
                    (0, 0): None, (0, 1): f"rank 0 of the tensor-parallel group {cause}",
                    (None, 0): None, (None, 1): None}
