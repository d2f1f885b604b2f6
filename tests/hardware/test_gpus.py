"""GPU gauges and health through an injected NVML stand-in, as DCGM's users expect them: units and labels, health
counters, what a driver lacks, NVLink, XIDs, MIG instances, GPM, CUDA_VISIBLE_DEVICES, a GPU failing mid-run."""

import logging

import pytest

from benchd.hardware.nvml import visible_devices
from tests.fake_nvml import (
    FakeGPU,
    FakeMig,
    FakeNVML,
    NVMLError_FunctionNotFound,
    NVMLError_LibraryNotFound,
    NVMLError_NoPermission,
)
from tests.hardware.helpers import UUID0, UUID1, gpu_value, reader, scraped


def test_every_gpu_gauge_with_units_and_labels():
    with scraped(reader(FakeGPU(UUID0), FakeGPU(UUID1, util_percent=3))) as registry:
        assert gpu_value(registry, "benchd_gpu_utilization_ratio") == 0.87
        assert gpu_value(registry, "benchd_gpu_utilization_ratio", gpu="1", uuid=UUID1) == 0.03
        assert gpu_value(registry, "benchd_gpu_memory_utilization_ratio") == 0.41
        assert gpu_value(registry, "benchd_gpu_memory_used_bytes") == 40 * 2**30  # v2: as nvidia-smi counts it
        assert gpu_value(registry, "benchd_gpu_memory_free_bytes") == 40 * 2**30 - 512 * 2**20  # less the reserve
        assert gpu_value(registry, "benchd_gpu_memory_total_bytes") == 80 * 2**30
        assert gpu_value(registry, "benchd_gpu_power_watts") == pytest.approx(523.456)  # mW → W
        assert gpu_value(registry, "benchd_gpu_power_limit_watts") == 700.0
        assert gpu_value(registry, "benchd_gpu_energy_joules_total") == 1000.0  # mJ → J, a counter
        assert gpu_value(registry, "benchd_gpu_temperature_celsius") == 61
        assert gpu_value(registry, "benchd_gpu_sm_clock_hertz") == 1980e6  # MHz → Hz
        assert gpu_value(registry, "benchd_gpu_memory_clock_hertz") == 2619e6
        assert gpu_value(registry, "benchd_gpu_pcie_transmit_bytes_per_second") == 1000 * 1024  # KB/s → B/s
        assert gpu_value(registry, "benchd_gpu_pcie_receive_bytes_per_second") == 2000 * 1024
        assert gpu_value(registry, "benchd_gpu_max_sm_clock_hertz") == 1980e6
        # Clock events by DCGM exporter's clock_event names: now, as NVML's mask, and onsets since the start.
        assert gpu_value(registry, "benchd_gpu_clock_event", clock_event="power_cap") == 1
        assert gpu_value(registry, "benchd_gpu_clock_event", clock_event="hw_thermal") == 0
        assert gpu_value(registry, "benchd_gpu_clocks_event_reasons") == 0x4
        assert gpu_value(registry, "benchd_gpu_clock_events_total", clock_event="power_cap") == 1
        assert gpu_value(registry, "benchd_gpu_clock_events_total", clock_event="hw_thermal") == 0
        reasons = {s.labels["clock_event"] for f in registry.collect() if f.name == "benchd_gpu_clock_event"
                   for s in f.samples if s.labels["gpu"] == "0"}
        assert reasons == {"gpu_idle", "clocks_setting", "power_cap", "hw_slowdown", "sync_boost", "sw_thermal",
                           "hw_thermal", "hw_power_brake", "display_clocks"}
        assert gpu_value(registry, "benchd_gpu_sm_activity_ratio") is None  # no GPM on this GPU


def test_health_counters_and_the_info_series_as_dcgm_users_expect():
    gpu = FakeGPU(UUID0, bus_id="00000000:9A:00.0", ecc={(0, 0): 2, (1, 0): 0, (0, 1): 12, (1, 1): 1},
                  remapped_rows=(3, 1, 1, 0), pcie_replays=7, encoder_percent=3, decoder_percent=5)
    with scraped(reader(gpu)) as registry:
        assert gpu_value(registry, "benchd_gpu_ecc_volatile_errors_total", error_type="correctable") == 2
        assert gpu_value(registry, "benchd_gpu_ecc_volatile_errors_total", error_type="uncorrectable") == 0
        assert gpu_value(registry, "benchd_gpu_ecc_aggregate_errors_total", error_type="correctable") == 12
        assert gpu_value(registry, "benchd_gpu_ecc_aggregate_errors_total", error_type="uncorrectable") == 1
        assert gpu_value(registry, "benchd_gpu_remapped_rows_total", error_type="correctable") == 3
        assert gpu_value(registry, "benchd_gpu_remapped_rows_total", error_type="uncorrectable") == 1
        assert gpu_value(registry, "benchd_gpu_row_remap_pending") == 1
        assert gpu_value(registry, "benchd_gpu_row_remap_failure") == 0
        assert gpu_value(registry, "benchd_gpu_pcie_replays_total") == 7
        assert gpu_value(registry, "benchd_gpu_encoder_utilization_ratio") == 0.03  # % → 0–1
        assert gpu_value(registry, "benchd_gpu_decoder_utilization_ratio") == 0.05
        assert gpu_value(registry, "benchd_gpu_last_xid_code") == 0  # watching, none yet
        assert gpu_value(registry, "benchd_gpu_info", pci_bus_id="00000000:9A:00.0", driver_version="570.133.20",
                         cuda_version="12.8") == 1


def test_what_a_gpu_driver_or_binding_lacks_is_absent_never_an_error(caplog):
    class OldBindings(FakeNVML):  # nvidia-ml-py from before row remapping and NVLink field values
        def __getattribute__(self, name):
            if name in ("nvmlDeviceGetRemappedRows", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX"):
                raise AttributeError(name)
            return super().__getattribute__(name)

    gpu = FakeGPU(UUID0, ecc_enabled=False, nvlink_kib={0: (1, 2)}, event_types=0x1,
                  unsupported={"nvmlDeviceGetEncoderUtilization"},
                  errors={"nvmlDeviceGetPcieReplayCounter": NVMLError_FunctionNotFound,
                          "nvmlDeviceGetDecoderUtilization": NVMLError_NoPermission})
    with caplog.at_level(logging.INFO, logger="benchd.hardware.reader"):
        hardware = reader(gpu, nvml=OldBindings([gpu]))
        with scraped(hardware) as registry:
            names = {f.name for f in registry.collect()}
            assert gpu_value(registry, "benchd_gpu_power_watts") == pytest.approx(523.456)  # the rest is served
    for absent in ("benchd_gpu_ecc_volatile_errors", "benchd_gpu_remapped_rows", "benchd_gpu_row_remap_pending",
                   "benchd_gpu_nvlink_transmit_bytes", "benchd_gpu_pcie_replays",
                   "benchd_gpu_encoder_utilization_ratio", "benchd_gpu_decoder_utilization_ratio",
                   "benchd_gpu_xid_errors", "benchd_gpu_last_xid_code"):
        assert absent not in names
    assert "ECC is off" in caplog.text and "lacks nvmlDeviceGetRemappedRows" in caplog.text
    assert "reports no XID events" in caplog.text


def test_nvlink_bytes_per_active_link():
    with scraped(reader(FakeGPU(UUID0, nvlink_kib={0: (100, 200), 2: (300, 400)}), FakeGPU(UUID1))) as registry:
        assert gpu_value(registry, "benchd_gpu_nvlink_transmit_bytes_total", link="0") == 100 * 1024  # KiB → B
        assert gpu_value(registry, "benchd_gpu_nvlink_receive_bytes_total", link="0") == 200 * 1024
        assert gpu_value(registry, "benchd_gpu_nvlink_receive_bytes_total", link="2") == 400 * 1024
        links = {(s.labels["gpu"], s.labels["link"]) for f in registry.collect()
                 if f.name == "benchd_gpu_nvlink_transmit_bytes" for s in f.samples}
        assert links == {("0", "0"), ("0", "2")}  # link 1 is down; the second GPU has no NVLink


def test_xid_events_are_counted_by_code_with_a_bounded_label_set():
    gpus = [FakeGPU(UUID0), FakeGPU(UUID1), FakeGPU("GPU-cccc")]
    nvml = FakeNVML(gpus)
    hardware = reader(nvml=nvml, visible="0,1")
    for code in (79, 79, 48, 5000):
        nvml.emit(gpus[0], 0x8, code)
    nvml.emit(gpus[0], 0x1, 0)  # a single-bit ECC event: not an XID
    nvml.emit(gpus[2], 0x8, 13)  # a GPU benchd does not watch
    first = {g.uuid: g for g in hardware.read().gpus}
    assert first[UUID0].labelled["xid_errors"] == {"79": 2, "48": 1, "other": 1}
    assert first[UUID0].values["last_xid_code"] == 5000
    assert first[UUID1].labelled["xid_errors"] == {} and first[UUID1].values["last_xid_code"] == 0
    assert first[UUID0].values["xid_events"] == 4 and first[UUID1].values["xid_events"] == 0  # every code together
    nvml.emit(gpus[1], 0x8, 31)
    second = {g.uuid: g for g in hardware.read().gpus}
    assert second[UUID0].labelled["xid_errors"] == {"79": 2, "48": 1, "other": 1}  # counts since start
    assert second[UUID1].labelled["xid_errors"] == {"31": 1} and second[UUID1].values["last_xid_code"] == 31
    with scraped(hardware) as registry:
        assert gpu_value(registry, "benchd_gpu_xid_errors_total", xid="79") == 2
        assert gpu_value(registry, "benchd_gpu_xid_errors_total", gpu="1", uuid=UUID1, xid="31") == 1
        assert gpu_value(registry, "benchd_gpu_xid_events_total") == 4


def test_mig_instances_with_dcgm_labels_and_their_own_memory():
    migs = [FakeMig(1, 0, "3g.40gb", "MIG-1111", memory_used=5 * 2**30, memory_total=40 * 2**30),
            FakeMig(2, 0, "1g.10gb", "MIG-2222"), FakeMig(2, 1, "1g.10gb", "MIG-3333")]
    hardware = reader(FakeGPU(UUID0, mig=migs))
    with scraped(hardware) as registry:
        labels = {"GPU_I_ID": "1", "GPU_I_PROFILE": "3g.40gb", "GPU_CI_ID": "0"}
        assert gpu_value(registry, "benchd_gpu_memory_used_bytes", **labels) == 5 * 2**30
        assert gpu_value(registry, "benchd_gpu_memory_total_bytes", **labels) == 40 * 2**30
        assert gpu_value(registry, "benchd_gpu_memory_used_bytes") == 40 * 2**30  # the whole GPU, no MIG labels
        assert gpu_value(registry, "benchd_gpu_utilization_ratio") is None  # N/A in MIG mode
        assert gpu_value(registry, "benchd_gpu_power_watts") == pytest.approx(523.456)
        assert gpu_value(registry, "benchd_gpu_mig_info", mig_uuid="MIG-3333", GPU_I_ID="2", GPU_I_PROFILE="1g.10gb",
                         GPU_CI_ID="1") == 1
        instances = {(s.labels.get("GPU_I_ID"), s.labels.get("GPU_CI_ID")) for f in registry.collect()
                     if f.name == "benchd_gpu_memory_used_bytes" for s in f.samples}
        assert instances == {(None, None), ("1", "0"), ("2", "0"), ("2", "1")}
    # CUDA_VISIBLE_DEVICES naming one MIG device: its GPU stays (its health is the instance's), with that instance.
    only = reader(FakeGPU(UUID0, mig=migs), visible="MIG-2222")
    assert [(gpu, m.uuid) for gpu, m in only.nvml.migs] == [("0", "MIG-2222")]
    old_style = reader(FakeGPU(UUID0, mig=migs), visible=f"MIG-{UUID0}/2/1")
    assert [m.uuid for _, m in old_style.nvml.migs] == ["MIG-3333"]


def test_gpm_metrics_on_hopper_class_gpus():
    with scraped(reader(FakeGPU(UUID0, gpm=True))) as registry:
        assert gpu_value(registry, "benchd_gpu_sm_activity_ratio") == 0.55
        assert gpu_value(registry, "benchd_gpu_tensor_activity_ratio") == 0.33
        assert gpu_value(registry, "benchd_gpu_dram_bandwidth_utilization_ratio") == 0.22


def test_cuda_visible_devices_is_respected():
    gpus = [FakeGPU(UUID0), FakeGPU(UUID1), FakeGPU("GPU-cccc")]
    assert [d[0] for d in reader(*gpus, visible="2,0").nvml.devices] == ["0", "2"]
    assert [d[1] for d in reader(*gpus, visible="GPU-bbbb").nvml.devices] == [UUID1]
    assert reader(*gpus, visible="").nvml.devices == []
    assert visible_devices("1,-1,0") == ["1"]  # CUDA stops at the first invalid entry
    assert visible_devices(None) is None


def test_unsupported_fields_are_left_out_once(caplog):
    gpu = FakeGPU(UUID0, unsupported={"nvmlDeviceGetPowerUsage", "nvmlDeviceGetPcieThroughput"})
    hardware = reader(gpu)
    with caplog.at_level(logging.WARNING, logger="benchd.hardware.reader"):
        for _ in range(3):
            values = hardware.read().gpus[0].values
            assert "power_watts" not in values and "pcie_transmit_bytes_per_second" not in values
            assert values["temperature_celsius"] == 61
    assert sum("does not support power" in r.message for r in caplog.records) == 1


def test_no_nvml_means_no_gpu_gauges_and_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="benchd.hardware.reader"):
        hardware = reader(FakeGPU(UUID0), init_error=NVMLError_LibraryNotFound("libnvidia-ml.so.1 not found"))
    assert not hardware.nvml.available and "NVML is not available" in caplog.text
    with scraped(hardware) as registry:
        assert not [f for f in registry.collect() if f.name.startswith("benchd_gpu")]
        assert registry.get_sample_value("benchd_host_cpu_utilization_ratio") is not None


def test_a_gpu_failing_mid_run_pauses_its_gauges(caplog):
    bad, good = FakeGPU(UUID0), FakeGPU(UUID1)
    hardware = reader(bad, good)
    assert len(hardware.read().gpus) == 2
    bad.lost = True
    with caplog.at_level(logging.WARNING, logger="benchd.hardware.reader"):
        readings = [hardware.read() for _ in range(3)]
    assert all([g.uuid for g in r.gpus] == [UUID1] for r in readings)
    assert sum("failed to read" in r.message for r in caplog.records) == 1  # said once, not per read
    bad.lost = False
    assert len(hardware.read().gpus) == 2  # and it comes back
