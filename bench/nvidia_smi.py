"""`nvidia-smi -q -x` (and `nvidia-smi nvlink -gt d`) read into benchd's reading names and base units, for the
GPU check."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

UNITS = {"%": 0.01, "MiB": 2**20, "KB/s": 1024.0, "MHz": 1e6, "W": 1.0, "C": 1.0}
ABSENT = {"N/A", "[N/A]", "Not Supported", "[Not Supported]", "Unknown Error", "Requested functionality has been "
          "deprecated", ""}


def number(text: str | None) -> float | None:
    """"87 %" → 0.87, "81559 MiB" → bytes, "1000 KB/s" → B/s, "1980 MHz" → Hz, "523.45 W", "61 C", "7" → 7."""
    if text is None or text.strip() in ABSENT:
        return None
    value, _, unit = text.strip().partition(" ")
    try:
        return float(value) * UNITS.get(unit.strip(), 1.0)
    except ValueError:
        return None


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def _flag(text: str | None) -> float | None:
    return None if text is None or text.strip() in ABSENT else float(text.strip() in ("Yes", "Active", "Enabled"))


def _ecc(node: ET.Element | None) -> dict[str, float]:
    """ECC counts by error type, summed over SRAM and DRAM as nvmlDeviceGetTotalEccErrors sums them (older
    nvidia-smi: single_bit/total and double_bit/total)."""
    if node is None:
        return {}
    values = {child.tag: number(child.text) for child in node}
    if node.find("single_bit/total") is not None:
        counts = {"correctable": number(node.findtext("single_bit/total")),
                  "uncorrectable": number(node.findtext("double_bit/total"))}
    else:
        sram_unc = values.get("sram_uncorrectable")
        if sram_unc is None and ("sram_uncorrectable_parity" in values or "sram_uncorrectable_secded" in values):
            sram_unc = (values.get("sram_uncorrectable_parity") or 0) + (values.get("sram_uncorrectable_secded") or 0)
        parts = {"correctable": [values.get("sram_correctable"), values.get("dram_correctable")],
                 "uncorrectable": [sram_unc, values.get("dram_uncorrectable")]}
        counts = {kind: sum(v for v in vs if v is not None) if any(v is not None for v in vs) else None
                  for kind, vs in parts.items()}
    return {kind: value for kind, value in counts.items() if value is not None}


def _memory(node: ET.Element | None) -> dict[str, float]:
    if node is None:
        return {}
    out = {f"memory_{part}_bytes": number(node.findtext(part)) for part in ("used", "free", "total")}
    return {k: v for k, v in out.items() if v is not None}


def parse(xml_text: str) -> dict:
    """{"driver_version", "cuda_version", "gpus": [per GPU: uuid, name, pci_bus_id, values, labelled, throttle,
    migs: {(gpu instance, compute instance): values}]}."""
    root = ET.fromstring(xml_text)
    gpus = []
    for gpu in root.findall("gpu"):
        power = gpu.find("gpu_power_readings")
        if power is None:
            power = gpu.find("power_readings")
        values = {
            "utilization_ratio": number(gpu.findtext("utilization/gpu_util")),
            "memory_utilization_ratio": number(gpu.findtext("utilization/memory_util")),
            "encoder_utilization_ratio": number(gpu.findtext("utilization/encoder_util")),
            "decoder_utilization_ratio": number(gpu.findtext("utilization/decoder_util")),
            # Newer drivers print the 1 s average and the instant draw instead of power_draw.
            "power_watts": _first(number(power.findtext("power_draw")), number(power.findtext("average_power_draw")))
            if power is not None else None,
            "instant_power_watts": number(power.findtext("instant_power_draw")) if power is not None else None,
            "power_limit_watts": number(power.findtext("enforced_power_limit")) if power is not None else None,
            "temperature_celsius": number(gpu.findtext("temperature/gpu_temp")),
            "sm_clock_hertz": number(gpu.findtext("clocks/sm_clock")),
            "memory_clock_hertz": number(gpu.findtext("clocks/mem_clock")),
            "pcie_transmit_bytes_per_second": number(gpu.findtext("pci/tx_util")),
            "pcie_receive_bytes_per_second": number(gpu.findtext("pci/rx_util")),
            "pcie_replays": number(gpu.findtext("pci/replay_counter")),
            "row_remap_pending": _flag(gpu.findtext("remapped_rows/remapped_row_pending")),
            "row_remap_failure": _flag(gpu.findtext("remapped_rows/remapped_row_failure")),
            **_memory(gpu.find("fb_memory_usage")),
        }
        remapped = {"correctable": number(gpu.findtext("remapped_rows/remapped_row_corr")),
                    "uncorrectable": number(gpu.findtext("remapped_rows/remapped_row_unc"))}
        labelled = {"ecc_volatile_errors": _ecc(gpu.find("ecc_errors/volatile")),
                    "ecc_aggregate_errors": _ecc(gpu.find("ecc_errors/aggregate")),
                    "remapped_rows": {k: v for k, v in remapped.items() if v is not None}}
        reasons = gpu.find("clocks_event_reasons")
        if reasons is None:
            reasons = gpu.find("clocks_throttle_reasons")
        throttle = {}
        for reason in reasons if reasons is not None else []:
            name = re.sub(r"^clocks_(event|throttle)_reason_", "", reason.tag)
            if (flag := _flag(reason.text)) is not None:
                throttle[name] = bool(flag)
        migs = {}
        for mig in gpu.findall("mig_devices/mig_device"):
            ids = (number(mig.findtext("gpu_instance_id")), number(mig.findtext("compute_instance_id")))
            if None not in ids:
                migs[(int(ids[0]), int(ids[1]))] = _memory(mig.find("fb_memory_usage"))
        gpus.append({
            "uuid": gpu.findtext("uuid"), "name": gpu.findtext("product_name"),
            "pci_bus_id": gpu.findtext("pci/pci_bus_id") or gpu.get("id"),
            "ecc_mode": gpu.findtext("ecc_mode/current_ecc"), "mig_mode": gpu.findtext("mig_mode/current_mig"),
            "values": {k: v for k, v in values.items() if v is not None},
            "labelled": {k: v for k, v in labelled.items() if v}, "throttle": throttle, "migs": migs,
        })
    return {"driver_version": root.findtext("driver_version"), "cuda_version": root.findtext("cuda_version"),
            "gpus": gpus}


def parse_nvlink(text: str) -> dict[int, dict[str, dict[str, float]]]:
    """`nvidia-smi nvlink -gt d`: {gpu index: {"nvlink_transmit_bytes": {link: bytes}, "nvlink_receive_bytes": …}}."""
    out: dict[int, dict[str, dict[str, float]]] = {}
    gpu = -1
    for line in text.splitlines():
        if match := re.match(r"GPU (\d+):", line.strip()):
            gpu = int(match.group(1))
            out[gpu] = {"nvlink_transmit_bytes": {}, "nvlink_receive_bytes": {}}
        elif gpu >= 0 and (match := re.search(r"Link (\d+): Data (Tx|Rx): (\d+) KiB", line)):
            key = "nvlink_transmit_bytes" if match.group(2) == "Tx" else "nvlink_receive_bytes"
            out[gpu][key][match.group(1)] = float(match.group(3)) * 1024
    return out
