"""Clock events in the verdict and in comparisons: each event NVML reports, a stage throttled in a share of its
samples, and two sides that ran under different clock states."""


import pytest

from tests.fake_nvml import (
    FakeGPU,
)
from tests.hardware.helpers import UUID0, UUID1, reader

CLOCK_EVENT_BITS = [(0x1, "gpu_idle"), (0x2, "clocks_setting"), (0x4, "power_cap"), (0x8, "hw_slowdown"),
                    (0x10, "sync_boost"), (0x20, "sw_thermal"), (0x40, "hw_thermal"), (0x80, "hw_power_brake"),
                    (0x100, "display_clocks")]


def judged(clocks, **rules):
    """A healthy closed-loop stage's verdict with these GPU clocks."""
    from benchd.measure.records import RequestRecord
    from benchd.measure.summary import summarize
    from benchd.spec.validity import ValidityRules

    records = [RequestRecord(index=i, request_id=f"r{i}", warmup=False, prompt_tokens=4, max_new_tokens=2,
                             scheduled_s=i * 0.1, submitted_s=i * 0.1, arrival_s=[i * 0.1 + 0.02, i * 0.1 + 0.03],
                             arrival_tokens=[1, 1], finished_s=i * 0.1 + 0.03) for i in range(30)]
    return summarize("concurrent=1", "succeeded", records, rules=ValidityRules(**rules), clocks=clocks)


@pytest.mark.parametrize(("bit", "event"), CLOCK_EVENT_BITS)
def test_each_clock_event_nvml_reports_gives_its_documented_verdict(bit, event):
    """Thermal and hardware slowdown (hw_slowdown, sw_thermal, hw_thermal, hw_power_brake) beyond the share make a
    stage INVALID: throttled, naming the reason; the power cap and the rest are shown, not judged."""
    from benchd.hardware.clocks import SLOWDOWN_EVENTS, stage_clocks

    hardware = reader(FakeGPU(UUID0, throttle_mask=bit, sm_mhz=1485), FakeGPU(UUID1, throttle_mask=0))
    snapshots = [hardware.read() for _ in range(8)]
    (clocks,) = stage_clocks(snapshots, snapshots[0].t, snapshots[-1].t, ["0"])  # the stage's GPU only
    assert clocks.gpu == "0" and clocks.samples == 8
    assert clocks.events[event] == 1.0 and sum(clocks.events.values()) == 1.0
    assert clocks.sm_clock_ratio == pytest.approx(0.75)  # 1,485 of 1,980 MHz
    summary = judged([clocks])
    assert summary.clocks == [clocks]
    if event in SLOWDOWN_EVENTS:
        assert summary.valid is False and [i.check for i in summary.invalid] == ["throttled"]
        assert summary.invalid[0].message.startswith("throttled: GPU 0: ") and \
            f"({event}) in 100% of 8 samples, over 5%" in summary.invalid[0].message
    else:
        assert summary.valid is True, summary.invalid


def test_a_stage_throttled_in_a_share_of_its_samples_is_judged_by_that_share():
    from benchd.hardware.clocks import stage_clocks

    gpu = FakeGPU(UUID0, throttle_mask=0x4)
    hardware = reader(gpu)

    def stage(thermal):  # 40 reads at its power cap all along, thermally slowed in those given
        snapshots = []
        for i in range(40):
            gpu.throttle_mask = 0x4 | (0x40 if i in thermal else 0)
            snapshots.append(hardware.read())
        (clocks,) = stage_clocks(snapshots, snapshots[0].t, snapshots[-1].t, ["0"])
        return clocks, snapshots

    some, _ = stage((10, 11))
    assert some.events["hw_thermal"] == 0.05 and some.events["power_cap"] == 1.0
    assert judged([some]).valid is True  # 5 %: at the rule, not over it
    more, snapshots = stage((10, 11, 30))
    assert more.events["hw_thermal"] == 0.075
    summary = judged([more])
    assert "thermal slowdown (HW) (hw_thermal) in 8% of 40 samples, over 5%" in summary.invalid[0].message
    assert judged([more], max_slowdown_share=0.1).valid is True  # the share is a rule
    assert judged([more], max_slowdown_share=None).valid is True
    # Each onset counted, as DCGM exporter's clock-event total counts them: 1 in the first stage, 2 in the second.
    assert snapshots[-1].gpus[0].labelled["clock_events"]["hw_thermal"] == 3
    assert snapshots[-1].gpus[0].labelled["clock_events"]["power_cap"] == 1


def test_comparisons_say_when_the_two_sides_ran_under_different_clock_states():
    from benchd.hardware.clocks import GPUClocks, clock_difference

    def gpu(power_cap, sm_hz=1980e6):
        events = {"power_cap": power_cap, "gpu_idle": 1 - power_cap}
        return GPUClocks(gpu="0", samples=100, events=events, sm_clock_mean_hertz=sm_hz, sm_clock_max_hertz=1980e6)

    assert clock_difference([[gpu(0.98, 1700e6)]], [[gpu(0.98, 1710e6)]]) is None
    assert clock_difference([[gpu(0.98)]], [[]]) is None  # no samples on B: nothing to say
    found = clock_difference([[gpu(0.98, 1700e6)], [gpu(0.96, 1690e6)]], [[gpu(0.0)]])
    assert found == ("the two sides ran under different clock states: power cap (power_cap) in 97% of A's samples "
                     "against 0% of B's; mean SM clock 86% of its maximum on A against 100% on B")
    # A regression comparison (and a matrix's, which is made of them) carries it, from each run's first stage.
    from benchd.measure.compare import compare
    from benchd.measure.sides import Side

    def side(name, clocks):
        return Side(run_ids=[name], samples={}, output_tokens_per_s=[None], energy_per_token_j=[None],
                    clocks=[[c.model_dump(mode="json") for c in clocks]])

    assert compare(side("a", [gpu(0.98)]), side("b", [gpu(0.97)])).clock_states is None
    assert compare(side("a", [gpu(0.98)]), side("b", [gpu(0.1)])).clock_states.startswith(
        "the two sides ran under different clock states: power cap (power_cap) in 98% of A's samples")
