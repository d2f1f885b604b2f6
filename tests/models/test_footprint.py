"""What a run needs in memory: benchd's plan for transformers' cache on a GPU, checked by hand for the tiny model and
against the worst step measured on the CPU, and the planned sizes run by the real engine."""

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from benchd.daemon.inprocess import run_local
from benchd.engines.transformers.batching import cb_config, gpu_plan
from benchd.engines.transformers.plan import (
    CUDA_RESERVE,
    GRAPH_POOL_MARGIN,
    MASK_ELEMENTS,
    cache_figures,
    plan_cache,
)
from benchd.engines.transformers.spec import TransformersOptions
from benchd.models.flops import Shape
from benchd.models.memory import PlanError, _preset_shape
from benchd.models.presets import PRESETS, parameter_count
from benchd.spec import SpecError
from tests.helpers import make_spec

TINY = Shape(hidden=64, ffn=128, layers=2, heads=4, kv_heads=2, head_dim=16, vocab=512)
MIB = 2**20


def test_a_plan_is_its_parts_as_computed_by_hand():
    """The tiny model's shape in bfloat16, 1,000 blocks of 256 tokens and steps of 2,048 tokens."""
    plan = cache_figures(TINY, 2, 1_000_000, "sdpa", graphs=True, io_pairs=1, block_size=256, num_blocks=1000,
                         batch_tokens=2048, requests=1024)
    n, m = 256_000, 2048
    read = n + m  # 258,048 tokens a step reads at most
    assert plan.cache_tokens == n
    # K and V of 2 layers × 2 KV heads × 16 dims × 2 bytes, for the blocks and transformers' 2 spare ones
    assert plan.kv_cache == 1002 * 256 * 2 * 2 * 2 * 16 * 2 == 65_667_072
    assert plan.masks == m * read * 2 + 8 * (read + m) == 1_059_045_376  # the mask, the read and write indices
    per_read = 2 * 2 * 16 * 2 + 2 * 4 * 16 * 2  # K and V gathered (2 heads), then repeated for 4 query heads
    per_token = (3 * 64 + (4 + 4) * 16 + 3 * 128) * 2  # hidden states, q/k/v projections, MLP
    logits = 1024 * 512 * (2 + 4)  # the rows of logits a step keeps, and their float32 copy
    assert plan.step == per_read * read + per_token * m + logits == 105_119_744
    assert plan.graph_pool == int(plan.step * GRAPH_POOL_MARGIN)
    assert plan.total == 1_000_000 + plan.kv_cache + plan.masks + plan.graph_pool + CUDA_RESERVE


def test_the_largest_plan_fits_its_budget_and_never_reads_a_mask_past_2_to_the_31():
    preset = PRESETS["llama-3.2-1b"]
    shape, weights = _preset_shape(preset), parameter_count(preset) * 2
    for budget_gib in (8, 20, 40, 70, 130):
        plan = plan_cache(shape, 2, weights, budget_gib << 30, longest=4096 + 1024)
        assert plan.total <= budget_gib << 30
        assert plan.max_batch_tokens * (plan.cache_tokens + plan.max_batch_tokens) <= MASK_ELEMENTS
        bigger = cache_figures(shape, 2, weights, "sdpa", True, 1, plan.block_size, plan.num_blocks + 1,
                               plan.max_batch_tokens, 1024)
        capped = plan.max_batch_tokens * (bigger.cache_tokens + plan.max_batch_tokens) > MASK_ELEMENTS
        assert bigger.total > budget_gib << 30 or capped  # the largest cache that fits, or the mask's limit
    # From 70 GiB on the mask's limit binds: a bigger device gets the same cache, not a larger step
    assert plan_cache(shape, 2, weights, 70 << 30, 5120) == plan_cache(shape, 2, weights, 130 << 30, 5120)


def test_what_cannot_hold_one_request_is_refused_naming_the_field():
    preset = PRESETS["llama-3.1-8b"]
    shape, weights = _preset_shape(preset), parameter_count(preset) * 2
    with pytest.raises(PlanError) as refused:
        plan_cache(shape, 2, weights, 16 << 30, longest=2048)
    assert refused.value.field == "model" and "to hold one request of 2,048 tokens" in refused.value.reason
    with pytest.raises(PlanError) as small:
        plan_cache(shape, 2, weights, 60 << 30, longest=2048, num_blocks=4)
    assert small.value.field == "transformers.num_blocks" and "may need 2,048" in small.value.reason
    with pytest.raises(PlanError) as large:
        plan_cache(shape, 2, weights, 60 << 30, longest=2048, num_blocks=4096)
    assert large.value.field == "transformers.num_blocks" and "more than the 60.00 GiB" in large.value.reason
    # A cache the spec sizes gets the largest step within the mask's limit
    plan = plan_cache(shape, 2, weights, 60 << 30, longest=2048, num_blocks=800)
    assert plan.max_batch_tokens * (plan.cache_tokens + plan.max_batch_tokens) <= MASK_ELEMENTS


WORST_STEP = """
import json, sys
from transformers.generation.configuration_utils import ContinuousBatchingConfig
from benchd.models.loading import greedy_config, load_model
blocks, m = int(sys.argv[1]), int(sys.argv[2])
loaded = load_model("tiny", "float32", "cpu")
config = ContinuousBatchingConfig(block_size=32, num_blocks=blocks, max_batch_tokens=m, use_cuda_graph=False)
manager = loaded.model.init_continuous_batching(generation_config=greedy_config(loaded, True, 8),
                                                continuous_batching_config=config)
manager.warmup()  # the cache, masks and indices allocated (without graphs nothing runs)
runner = manager.batch_processor.model_runner


def status():
    with open("/proc/self/status") as f:
        rows = [line.split(":", 1) for line in f]
    return {k: int(v.split()[0]) * 1024 for k, v in rows if k.startswith(("Vm", "Rss"))}


# The peak from here on: the warm-up's own transient peak, its memory since given back, is not the step's.
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the high-water mark (VmHWM) reset to the resident set now (Linux 4.0)
before = status()
runner.pad_inputs = True  # the warm-up's step, eager: m tokens against the whole cache
runner.run_one_warmup(loaded.model, m, blocks * 32 - m)
after = status()
# Library pages a loaded machine took back before the step and the step read in again are no memory of its own.
refaulted = max(0, after["RssFile"] - before["RssFile"])
print(json.dumps({"step": after["VmHWM"] - before["VmRSS"] - refaulted, "refaulted": refaulted}))
"""


def test_the_worst_step_measured_on_the_cpu_is_within_the_estimate():
    """transformers' largest step (256 tokens against 131,072 cached, the tiny model in float32) in a process of its
    own: its peak resident memory above what the cache and masks hold stays within the estimate's step, and the
    estimate is no more than 1.6× it (on a CPU sdpa holds float32 scores for each KV-head group; a GPU's does not)."""
    blocks, m = 4096, 256
    done = subprocess.run([sys.executable, "-c", WORST_STEP, str(blocks), str(m)], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])["step"]
    estimated = cache_figures(TINY, 4, 0, "sdpa", False, 1, 32, blocks, m, 1024, device_type="cpu").step
    assert measured <= estimated <= 1.6 * measured, (measured / MIB, estimated / MIB)


def test_a_planned_cache_is_what_the_engine_runs(tiny):
    """The GPU's plan made from a model and its device's memory figures (here given: 1.2 GiB free, nothing held),
    the configuration it becomes, and the real engine running a workload with it on the CPU."""
    workload = make_spec().workload
    free = 1229 * MIB
    plan = gpu_plan(tiny, TransformersOptions(), workload, "sdpa", memory=(free, 0, 0))
    assert plan.total <= int(free * 0.9) and plan.cache_tokens >= 24 + 12
    config = cb_config(TransformersOptions(), "cuda", plan)
    assert (config.num_blocks, config.max_batch_tokens) == (plan.num_blocks, plan.max_batch_tokens)
    with pytest.raises(SpecError, match="^model: out of GPU memory as planned: needs about"):
        gpu_plan(tiny, TransformersOptions(), workload, "sdpa", memory=(1024 * MIB, 0, 0))  # the CUDA reserve
    sized = {"block_size": plan.block_size, "num_blocks": plan.num_blocks, "max_batch_tokens": plan.max_batch_tokens}
    outcome = run_local(make_spec(transformers=sized), loaded=tiny)
    assert outcome.status == "succeeded", outcome.error
    assert outcome.metadata.engine_settings["continuous_batching"]["num_blocks"] == plan.num_blocks


def test_a_varlen_kernels_plan_has_no_mask_and_grows_with_the_device():
    """torch's varlen kernel (and flash-attn's) attend by sequence: no mask, K/V gathered once and not repeated for
    each query head, and no cap at 2^31 mask elements, so a larger device holds a larger cache; two IO pairs (async
    batching, its default with such a kernel) double the indices alone."""
    plan = cache_figures(TINY, 2, 1_000_000, "torch_varlen", graphs=True, io_pairs=2, block_size=256, num_blocks=1000,
                         batch_tokens=2048, requests=1024)
    read, m = 256_000 + 2048, 2048
    assert plan.masks == 2 * 8 * (read + m)  # the read and write indices of each pair
    per_token = (3 * 64 + (4 + 4) * 16 + 3 * 128) * 2
    assert plan.step == 2 * 2 * 16 * 2 * read + per_token * m + 1024 * 512 * (2 + 4)
    preset = PRESETS["llama-3.2-1b"]
    shape, weights = _preset_shape(preset), parameter_count(preset) * 2
    small, large = (plan_cache(shape, 2, weights, gib << 30, 5120, "torch_varlen") for gib in (70, 130))
    assert small.total <= 70 << 30 and large.total <= 130 << 30 and large.num_blocks > small.num_blocks * 1.8
    assert large.max_batch_tokens * (large.cache_tokens + large.max_batch_tokens) > MASK_ELEMENTS


def test_an_in_place_kernels_plan_gathers_nothing_but_a_windows_worth():
    """benchd's Triton kernels read the cache where it lies: a step holds no gathered K/V, only the decode splits'
    partials (the attention's step_bytes), so the same memory holds a larger cache than torch_varlen's; a model
    with sliding-window layers still gathers each request's window there."""
    from benchd.spec.stack import ATTENTION

    figures = {name: cache_figures(TINY, 2, 1_000_000, name, graphs=True, io_pairs=2, block_size=256,
                                   num_blocks=1000, batch_tokens=2048, requests=64)
               for name in ("torch_varlen", "triton_paged")}
    read, per_read = 256_000 + 2048, 2 * 2 * 16 * 2
    assert figures["torch_varlen"].step - figures["triton_paged"].step == \
        per_read * read - ATTENTION["triton_paged"].step_bytes
    windowed = cache_figures(replace(TINY, window=100), 2, 1_000_000, "triton_paged", True, 2, 256, 1000, 2048, 64)
    assert windowed.step - figures["triton_paged"].step == per_read * (64 * 100 + 2048)
    preset = PRESETS["llama-3.2-1b"]
    shape, weights = _preset_shape(preset), parameter_count(preset) * 2
    varlen, paged = (plan_cache(shape, 2, weights, 70 << 30, 5120, name) for name in ("torch_varlen", "triton_paged"))
    assert paged.total <= 70 << 30 and paged.num_blocks > varlen.num_blocks


def test_async_batching_is_benchds_default_where_the_attention_has_no_mask():
    """Two IO pairs on a GPU for torch_varlen and flash, one for the masked kernels (the mask would double), on a
    CPU and under library_defaults; the spec's own choice wins everywhere."""
    from benchd.engines.transformers.plan import io_pairs

    default, spec_off = TransformersOptions(), TransformersOptions(use_async_batching=False)
    assert io_pairs(default, "torch_varlen", "cuda") == io_pairs(default, "flash_attention_3", "cuda") == 2
    assert io_pairs(default, "sdpa", "cuda") == io_pairs(default, "torch_varlen", "cpu") == 1
    assert io_pairs(TransformersOptions(library_defaults=True), "torch_varlen", "cuda") == 1
    assert io_pairs(spec_off, "torch_varlen", "cuda") == 1
    assert io_pairs(TransformersOptions(use_async_batching=True), "sdpa", "cuda") == 2
    assert cb_config(default, "cuda", attention="torch_varlen").use_async_batching is True
    assert cb_config(default, "cuda", attention="sdpa").use_async_batching is False
    assert cb_config(spec_off, "cuda", attention="torch_varlen").use_async_batching is False


def test_the_cache_is_cut_to_what_transformers_own_accounting_accepts(tiny):
    """transformers 5.17 checks the cache it is given against its own accounting, which counts a step mask for any
    attention but flash ones and every K/V head on each tensor-parallel rank: a plan it would refuse ("Memory
    footprint … is more than available memory") is cut to the most blocks it accepts. 5.18+ sizes otherwise."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    from transformers.generation.continuous_batching import cache as paged

    from benchd.engines.transformers.paged_cache import accepted_blocks

    config = ContinuousBatchingConfig(block_size=32, max_batch_tokens=256, max_memory_percent=1.0)
    config.max_blocks_per_request = 0
    blocks = 10**9  # far more than this host's memory
    accepted = accepted_blocks(tiny.model.config, config, tiny.dtype, 256, blocks)
    if not hasattr(paged, "PagedAttentionMemoryHandler") or "group_size" not in str(
            paged.PagedAttentionMemoryHandler.__init__.__code__.co_varnames):
        assert accepted is None
        return
    handler = paged.PagedAttentionMemoryHandler(config=tiny.model.config, continuous_batching_config=config,
                                                dtype=tiny.dtype, group_types=["full_attention"], group_size=2)
    assert 0 < accepted < blocks
    assert handler.compute_memory_footprint(256, accepted) <= handler.available_memory
    assert handler.compute_memory_footprint(256, accepted + 1) > handler.available_memory
    assert accepted_blocks(tiny.model.config, config, tiny.dtype, 256, 64) == 64  # what it accepts, kept
