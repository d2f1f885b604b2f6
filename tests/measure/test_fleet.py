"""The fleet's view (measure/fleet.py) and what a good token costs (measure/cost.py) on fleets whose truth is known:
the distribution across nodes, each node's place with its interval, the slowed node flagged and explained."""

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from benchd.hardware.sampler import GPUSummary, HardwareSummary
from benchd.measure.cost import GoodTokens, Prices, good_tokens
from benchd.measure.fleet import FleetRun, FleetSettings
from benchd.measure.fleet_changes import classify
from benchd.measure.fleet_place import view
from benchd.measure.history import ChangePoint, SegmentView, StackShift
from benchd.measure.summary import LatencyStats, StageSummary

T0 = datetime(2026, 11, 1, tzinfo=UTC)
STACK = {"driver_version": "580.95", "torch_version": "2.11.0", "device_name": "NVIDIA H200", "node": "?"}


def fleet(nodes=6, runs=10, slow: dict[str, float] | None = None, seed=0, spread=0.03) -> list[FleetRun]:
    """nodes × runs of one workload on one GPU model: 1,000 tok/s and 20 ms ITL a GPU, each run's figures with a
    3 % spread; slow: node → factor its speed is multiplied by."""
    rng = np.random.default_rng(seed)
    out = []
    for n in range(nodes):
        node = f"node-{n}"
        factor = (slow or {}).get(node, 1.0)
        for r in range(runs):
            noise = math.exp(rng.normal(0, spread))
            out.append(FleetRun(
                run_id=f"{node}-{r}", workload="reference", node=node, device="NVIDIA H200",
                at=T0 + timedelta(minutes=r), valid=True,
                figures={"output_tokens_per_s": 1000 * factor * noise, "itl_s.p50": 0.02 / factor / noise,
                         "ttft_s.p99": 0.3 * noise, "energy_per_token_j": 0.5 / factor},
                good_output_tokens=60_000, device_seconds=60.0, energy_j=30_000.0 / factor,
                state={"clock_state": "slowed" if factor < 1 else "nominal",
                       "sm_clock_ratio": 0.6 if factor < 1 else 0.99, "cpu_utilization_mean": 0.1},
                stack={**STACK, "node": node, **({"driver_version": "570.10"} if factor < 1 else {})}))
    return out


def test_the_slowed_node_is_flagged_and_explained_and_the_others_are_not():
    found = view(fleet(slow={"node-3": 0.7}), FleetSettings(), Prices(gpu_hour=3.6, kwh=0.2))
    (group,) = found.groups
    assert (group.workload, group.device, group.nodes, group.runs) == ("reference", "NVIDIA H200", 6, 60)
    assert group.outliers == ["node-3"] and group.places[0].node == "node-3"
    slow = group.places[0]
    assert slow.decisions["output_tokens_per_s"].verdict == "slower"
    assert slow.decisions["output_tokens_per_s"].ci_high < 1 / 1.1
    assert slow.relative["output_tokens_per_s"] == pytest.approx(0.7, abs=0.05)
    assert any(r.startswith("output tok/s per GPU ÷ the fleet's median 0.7") for r in slow.reasons), slow.reasons
    assert any(r.startswith("ITL p50 1.4") for r in slow.reasons), slow.reasons
    assert [(s.field, s.before, s.after) for s in slow.stack] == [("driver_version", "580.95", "570.10")]
    assert "clock state slowed (the fleet's: nominal)" in slow.state
    assert any(s.startswith("SM clock 60% of its maximum") for s in slow.state)
    for place in group.places[1:]:
        assert not place.outlier and place.decisions["output_tokens_per_s"].verdict in ("equivalent",
                                                                                          "inconclusive")
        assert place.stack == [] and place.state == []
    # The distribution across the nodes: each node's median run.
    throughput = group.distribution["output_tokens_per_s"]
    assert throughput.nodes == 6 and throughput.quantiles["0"] == pytest.approx(700, rel=0.05)
    assert throughput.quantiles["0.5"] == pytest.approx(1000, rel=0.03)
    # 60 s of one GPU at 3.6 an hour (0.06) and 30 kJ at 0.2 a kWh (0.00167) over 60,000 good tokens.
    healthy = group.places[-1]
    assert healthy.cost_per_million_good_tokens == pytest.approx((0.06 + 30_000 / 3.6e6 * 0.2) / 0.06, rel=1e-9)
    assert healthy.energy_per_good_token_j == pytest.approx(0.5)
    assert slow.energy_per_good_token_j == pytest.approx(0.5 / 0.7)
    assert found.currency == "USD" and group.cost_per_million_good_tokens is not None


def test_a_healthy_fleet_flags_no_node():
    """Twenty fleets of eight healthy nodes (3 % run to run, 2 % node to node): no node flagged."""
    flagged = []
    for seed in range(20):
        runs = fleet(nodes=8, seed=seed)
        rng = np.random.default_rng(100 + seed)
        skew = {f"node-{n}": math.exp(rng.normal(0, 0.02)) for n in range(8)}
        for run in runs:
            run.figures = {k: v * (skew[run.node] if k == "output_tokens_per_s" else 1 / skew[run.node])
                           for k, v in run.figures.items()}
        flagged += view(runs).groups[0].outliers
    assert flagged == []


def test_invalid_runs_are_left_out_and_each_node_keeps_its_newest_twenty():
    runs = fleet(nodes=3, runs=25)
    runs[0].valid = False  # node-0's oldest: beyond the newest 20 anyway
    runs[24].valid = False  # node-0's newest
    (group,) = view(runs).groups
    first = next(p for p in group.places if p.node == "node-0")
    assert (first.runs, first.excluded, first.latest_run) == (19, 1, "node-0-23")
    assert group.runs == 59
    # One node alone has no fleet to stand in: no place relative to it, and no verdict.
    (alone,) = view([r for r in runs if r.node == "node-1"]).groups
    assert alone.places[0].relative == {} and not alone.outliers


def stage(tokens=100, good=80, duration=2.0):
    return StageSummary(stage="s", status="succeeded", requests=10, errors=0, warmup_requests=0,
                        duration_s=duration, prompt_tokens=50, output_tokens=tokens,
                        output_tokens_per_s=tokens / duration, total_tokens_per_s=0, requests_per_s=5,
                        good_output_tokens=good, ttft_s=LatencyStats(count=0), itl_s=LatencyStats(count=0),
                        tpot_s=LatencyStats(count=0), e2e_s=LatencyStats(count=0), queue_s=LatencyStats(count=0),
                        dispatch_lag_s=LatencyStats(count=0))


def test_a_good_tokens_cost_counts_the_runs_devices_and_never_understates():
    hardware = HardwareSummary(samples=3, window_s=10.0, gpus=[
        GPUSummary(gpu="0", uuid="a", name="H200", energy_joules=4000.0),
        GPUSummary(gpu="1", uuid="b", name="H200", energy_joules=6000.0)])
    one = good_tokens([stage(), stage()], hardware, ["1"], Prices(gpu_hour=3.6, kwh=0.36))
    assert (one.good_output_tokens, one.output_tokens, one.devices, one.device_seconds) == (160, 200, 1, 10.0)
    assert one.energy_j == 6000 and one.energy_per_good_token_j == pytest.approx(6000 / 160)
    # 10 GPU-seconds at 3.6 an hour (0.01) and 6 kJ at 0.36 a kWh (0.0006), over 160 good tokens, a million.
    assert one.cost_per_million_good_tokens == pytest.approx(0.0106 / 160 * 1e6) and one.currency == "USD"
    both = good_tokens([stage()], hardware, ["0", "1"])
    assert both.devices == 2 and both.energy_j == 10_000 and both.cost_per_million_good_tokens is None
    cpu = good_tokens([stage()], None, [""])
    assert (cpu.devices, cpu.device_seconds, cpu.energy_j) == (1, 2.0, None)
    assert cpu.cost_per_million(Prices(gpu_hour=1.0)) == pytest.approx(2 / 3600 / 80 * 1e6)
    assert cpu.cost_per_million(Prices(gpu_hour=1.0, kwh=0.1)) is None  # its energy is unknown: no cost
    assert GoodTokens(good_output_tokens=0, output_tokens=5, devices=1, device_seconds=1, energy_j=1,
                      energy_per_good_token_j=None).cost_per_million(Prices(gpu_hour=1)) is None
    assert good_tokens([stage().model_copy(update={"good_output_tokens": None})], None, [""]) is None


def change(node: str, at: datetime, figure="output_tokens_per_s", stack=(), relative=-0.2):
    segment = SegmentView(runs=5, first_run="a", last_run="b", start=at, end=at, mean=1.0, ci_low=0.9, ci_high=1.1)
    return ChangePoint(id=f"{node}-{at:%H%M}", workload="reference", device="NVIDIA H200", node=node, figure=figure,
                       run_id="r", at=at, direction="worse", relative_change=relative, ci_low=relative - 0.05,
                       ci_high=relative + 0.05, p_value=1e-5, confidence=0.95, before=segment, after=segment,
                       stack=[StackShift(field=f, before=b, after=a) for f, b, a in stack], detected_at=at)


def test_a_change_on_every_node_at_once_is_the_stacks_and_one_on_a_node_alone_is_the_nodes():
    runs = fleet(nodes=5, runs=3, slow={"node-4": 0.8})
    upgrade = [("transformers_version", "5.17.0", "5.18.0"), ("node", "x", "y")]
    at = T0 + timedelta(hours=3)
    together = [change(f"node-{n}", at + timedelta(minutes=20 * n), stack=upgrade) for n in range(4)]
    alone = change("node-4", T0 + timedelta(days=1), stack=[("driver_version", "580.95", "570.10")])
    found = classify([*together, alone], runs, window_s=6 * 3600)
    node, stack = found
    assert stack.scope == "fleet" and stack.nodes == ["node-0", "node-1", "node-2", "node-3"]
    assert stack.nodes_seen == 5 and [s.field for s in stack.stack] == ["transformers_version"]
    assert stack.explanation.startswith("output tok/s −20.0 %".replace("−", "-") + " on 4 of the 5 NVIDIA H200 nodes")
    assert "the stack changed on them: transformers 5.17.0 → 5.18.0" in stack.explanation
    assert node.scope == "node" and node.nodes == ["node-4"] and node.change_points == [alone.id]
    assert "NVIDIA driver 580.95 → 570.10 (theirs → its own)" in node.differs
    assert "clock state slowed (the fleet's: nominal)" in node.differs
    assert "on node-4 alone, of the 5 NVIDIA H200 nodes: the node changed" in node.explanation
    # Far apart in time, the same change on two nodes is two nodes' changes; a withdrawn one is no change.
    apart = classify([change("node-0", T0), change("node-1", T0 + timedelta(hours=7))], runs, window_s=6 * 3600)
    assert [c.scope for c in apart] == ["node", "node"]
    withdrawn = change("node-2", T0).model_copy(update={"active": False})
    assert classify([withdrawn], runs, 3600) == []
