"""What is read from NVML for each GPU and MIG instance, converted to base units, and the names it needs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# A field reads one device (its handle and active NVLinks) into reading names → values; a dict value is a reading
# with a label of its own (error type, link). Exceptions are NVML's: the reader sorts them.
Field = Callable[[Any, list[int]], dict[str, Any]]
# Each field with the pynvml names it needs: older bindings lack some, and then that field is left out.
Fields = dict[str, tuple[tuple[str, ...], Field]]


def gpu_fields(nvml: Any) -> Fields:
    def utilization(h, _):
        u = nvml.nvmlDeviceGetUtilizationRates(h)  # percent
        return {"utilization_ratio": u.gpu / 100, "memory_utilization_ratio": u.memory / 100}

    def throttle(h, _):
        get = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        return {"_throttle_mask": float(get(h))}

    def pcie(h, _):  # KB/s. Each call blocks ~20 ms (NVML samples over 20 ms): the sampler's thread pays it.
        throughput = nvml.nvmlDeviceGetPcieThroughput
        return {"pcie_transmit_bytes_per_second": throughput(h, nvml.NVML_PCIE_UTIL_TX_BYTES) * 1024.0,
                "pcie_receive_bytes_per_second": throughput(h, nvml.NVML_PCIE_UTIL_RX_BYTES) * 1024.0}

    def ecc(h, _):
        def counts(counter: int) -> dict[str, float]:
            return {kind: float(nvml.nvmlDeviceGetTotalEccErrors(h, error_type, counter)) for kind, error_type in (
                ("correctable", nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                ("uncorrectable", nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED))}
        return {"ecc_volatile_errors": counts(nvml.NVML_VOLATILE_ECC),
                "ecc_aggregate_errors": counts(nvml.NVML_AGGREGATE_ECC)}

    def row_remap(h, _):  # Ampere and newer
        correctable, uncorrectable, pending, failure = nvml.nvmlDeviceGetRemappedRows(h)
        return {"remapped_rows": {"correctable": float(correctable), "uncorrectable": float(uncorrectable)},
                "row_remap_pending": float(bool(pending)), "row_remap_failure": float(bool(failure))}

    def nvlink(h, links):  # cumulative KiB per link; one call for every link and direction
        if not links:
            return {}
        tx, rx = nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
        values = nvml.nvmlDeviceGetFieldValues(h, [(field, link) for link in links for field in (tx, rx)])
        out: dict[str, dict[str, float]] = {"nvlink_transmit_bytes": {}, "nvlink_receive_bytes": {}}
        for value in values:
            if value.nvmlReturn == 0:  # NVML_SUCCESS; a link that failed alone is left out alone
                key = "nvlink_transmit_bytes" if value.fieldId == tx else "nvlink_receive_bytes"
                out[key][str(value.scopeId)] = value.value.ullVal * 1024.0
        return {key: per_link for key, per_link in out.items() if per_link}

    return {
        "utilization": (("nvmlDeviceGetUtilizationRates",), utilization),
        "memory": (("nvmlDeviceGetMemoryInfo",), memory(nvml)),
        "power": (("nvmlDeviceGetPowerUsage",), lambda h, _: {"power_watts": nvml.nvmlDeviceGetPowerUsage(h) / 1000.0}),
        "power_limit": (("nvmlDeviceGetEnforcedPowerLimit",),
                        lambda h, _: {"power_limit_watts": nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0}),
        "energy": (("nvmlDeviceGetTotalEnergyConsumption",),  # mJ
                   lambda h, _: {"energy_joules": nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0}),
        "temperature": (("nvmlDeviceGetTemperature", "NVML_TEMPERATURE_GPU"), lambda h, _: {
            "temperature_celsius": float(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU))}),
        "clocks": (("nvmlDeviceGetClockInfo", "NVML_CLOCK_SM", "NVML_CLOCK_MEM"), lambda h, _: {  # MHz
            "sm_clock_hertz": nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM) * 1e6,
            "memory_clock_hertz": nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM) * 1e6}),
        "max_clocks": (("nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_SM"), lambda h, _: {  # MHz: the boost maximum
            "sm_clock_max_hertz": nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_SM) * 1e6}),
        "throttle": ((), throttle),
        "pcie": (("nvmlDeviceGetPcieThroughput", "NVML_PCIE_UTIL_TX_BYTES", "NVML_PCIE_UTIL_RX_BYTES"), pcie),
        "encoder": (("nvmlDeviceGetEncoderUtilization",),  # [percent, sampling period in µs]
                    lambda h, _: {"encoder_utilization_ratio": nvml.nvmlDeviceGetEncoderUtilization(h)[0] / 100}),
        "decoder": (("nvmlDeviceGetDecoderUtilization",),
                    lambda h, _: {"decoder_utilization_ratio": nvml.nvmlDeviceGetDecoderUtilization(h)[0] / 100}),
        "pcie_replays": (("nvmlDeviceGetPcieReplayCounter",),
                         lambda h, _: {"pcie_replays": float(nvml.nvmlDeviceGetPcieReplayCounter(h))}),
        "ecc": (("nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetEccMode", "NVML_MEMORY_ERROR_TYPE_CORRECTED",
                 "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC", "NVML_AGGREGATE_ECC"), ecc),
        "row_remap": (("nvmlDeviceGetRemappedRows",), row_remap),
        "nvlink": (("nvmlDeviceGetFieldValues", "nvmlDeviceGetNvLinkState", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX",
                    "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX"), nvlink),
    }


def mig_fields(nvml: Any) -> Fields:
    """A MIG device answers for its own memory; utilization, power, clocks and health are the whole GPU's."""
    return {"memory": (("nvmlDeviceGetMemoryInfo",), memory(nvml))}


def memory(nvml: Any) -> Field:
    def read(h, _):
        # v2 counts the driver's reservation apart from "used", as nvidia-smi does (v1 folds ~0.5 GiB of it into
        # "used" on an H100); v1 where the driver or bindings lack v2.
        version = getattr(nvml, "nvmlMemory_v2", None)
        m = nvml.nvmlDeviceGetMemoryInfo(h, version=version) if version else nvml.nvmlDeviceGetMemoryInfo(h)
        return {"memory_used_bytes": float(m.used), "memory_free_bytes": float(m.free),  # bytes
                "memory_total_bytes": float(m.total)}
    return read
