"""What nvidia-smi would print for the NVML stand-in's GPUs: `-q -x` (the elements the GPU check reads, in
nvidia-smi's units and layout) and `nvlink -gt d`."""

from __future__ import annotations

from xml.sax.saxutils import escape

from benchd.hardware.readings import THROTTLE_REASONS
from tests.fake_nvml import FakeGPU, FakeNVML


def _memory(used: int, total: int, reserved: int = 0) -> str:
    mib = 2**20
    return (f"<total>{total // mib} MiB</total><reserved>{reserved // mib} MiB</reserved>"
            f"<used>{used // mib} MiB</used><free>{(total - used - reserved) // mib} MiB</free>")


def _ecc(gpu: FakeGPU, counter: int) -> str:
    # nvidia-smi splits the counts by memory; the stand-in has them all in DRAM.
    return (f"<sram_correctable>0</sram_correctable><sram_uncorrectable_parity>0</sram_uncorrectable_parity>"
            f"<sram_uncorrectable_secded>0</sram_uncorrectable_secded><dram_correctable>{gpu.ecc[(0, counter)]}"
            f"</dram_correctable><dram_uncorrectable>{gpu.ecc[(1, counter)]}</dram_uncorrectable>")


def _gpu(gpu: FakeGPU, index: int) -> str:
    reasons = "".join(f"<clocks_event_reason_{r}>{'Active' if gpu.throttle_mask & bit else 'Not Active'}"
                      f"</clocks_event_reason_{r}>" for r, bit in THROTTLE_REASONS.items())
    corr, unc, pending, failure = gpu.remapped_rows
    migs = "".join(
        f"<mig_device><index>{i}</index><gpu_instance_id>{m.gpu_instance_id}</gpu_instance_id>"
        f"<compute_instance_id>{m.compute_instance_id}</compute_instance_id>"
        f"<fb_memory_usage>{_memory(m.memory_used, m.memory_total)}</fb_memory_usage></mig_device>"
        for i, m in enumerate(gpu.mig))
    util = "N/A" if gpu.mig else None
    return f"""<gpu id="{gpu.bus_id}">
<product_name>{escape(gpu.name)}</product_name>
<mig_mode><current_mig>{"Enabled" if gpu.mig else "Disabled"}</current_mig></mig_mode>
<mig_devices>{migs or "None"}</mig_devices>
<uuid>{gpu.uuid}</uuid>
<minor_number>{index}</minor_number>
<pci><pci_bus_id>{gpu.bus_id}</pci_bus_id><replay_counter>{gpu.pcie_replays}</replay_counter>
<replay_rollover_counter>0</replay_rollover_counter><tx_util>{gpu.pcie_tx_kbs} KB/s</tx_util>
<rx_util>{gpu.pcie_rx_kbs} KB/s</rx_util></pci>
<fb_memory_usage>{_memory(gpu.memory_used, gpu.memory_total, 512 * 2**20)}</fb_memory_usage>
<utilization><gpu_util>{util or f"{gpu.util_percent} %"}</gpu_util>
<memory_util>{util or f"{gpu.mem_util_percent} %"}</memory_util>
<encoder_util>{gpu.encoder_percent} %</encoder_util><decoder_util>{gpu.decoder_percent} %</decoder_util></utilization>
<ecc_mode><current_ecc>{"Enabled" if gpu.ecc_enabled else "Disabled"}</current_ecc></ecc_mode>
<ecc_errors><volatile>{_ecc(gpu, 0)}</volatile><aggregate>{_ecc(gpu, 1)}</aggregate></ecc_errors>
<remapped_rows><remapped_row_corr>{corr}</remapped_row_corr><remapped_row_unc>{unc}</remapped_row_unc>
<remapped_row_pending>{"Yes" if pending else "No"}</remapped_row_pending>
<remapped_row_failure>{"Yes" if failure else "No"}</remapped_row_failure></remapped_rows>
<temperature><gpu_temp>{gpu.temperature_c} C</gpu_temp></temperature>
<gpu_power_readings><power_draw>{gpu.power_mw / 1000:.2f} W</power_draw>
<enforced_power_limit>{gpu.power_limit_mw / 1000:.2f} W</enforced_power_limit></gpu_power_readings>
<clocks><sm_clock>{gpu.sm_mhz} MHz</sm_clock><mem_clock>{gpu.mem_mhz} MHz</mem_clock></clocks>
<clocks_event_reasons>{reasons}</clocks_event_reasons>
</gpu>"""


def smi_xml(nvml: FakeNVML) -> str:
    version = f"{nvml.cuda_version // 1000}.{nvml.cuda_version % 1000 // 10}"
    gpus = "\n".join(_gpu(gpu, i) for i, gpu in enumerate(nvml.gpus))
    return f"""<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
<driver_version>{nvml.driver_version}</driver_version>
<cuda_version>{version}</cuda_version>
<attached_gpus>{len(nvml.gpus)}</attached_gpus>
{gpus}
</nvidia_smi_log>"""


def nvlink_text(nvml: FakeNVML) -> str:
    lines = []
    for i, gpu in enumerate(nvml.gpus):
        lines.append(f"GPU {i}: {gpu.name} (UUID: {gpu.uuid})")
        for link, (tx, rx) in sorted(gpu.nvlink_kib.items()):
            lines += [f"\t Link {link}: Data Tx: {tx} KiB", f"\t Link {link}: Data Rx: {rx} KiB"]
    return "\n".join(lines)
