"""What one hardware read returns: per-GPU and per-MIG-instance values, the host's, and the processes watched."""

from __future__ import annotations

from dataclasses import dataclass, field

# Clock event (throttle) reasons, by NVML's bit masks.
THROTTLE_REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
# The reasons that mean the GPU runs slower than it could for the work it has (idle and settings do not).
SLOWING_REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                   "hw_power_brake_slowdown")
# NVML's reasons (nvidia-smi's names, THROTTLE_REASONS') → DCGM exporter's clock_event label values
# (DCGM_EXP_CLOCK_EVENTS_*, dcgm-exporter's internal/pkg/collector/clock_events_collector.go), the names benchd's
# series, summaries and verdicts use (hardware/clocks.py, CLOCK_EVENTS).
CLOCK_EVENT_OF: dict[str, str] = {
    "gpu_idle": "gpu_idle",
    "applications_clocks_setting": "clocks_setting",
    "sw_power_cap": "power_cap",
    "hw_slowdown": "hw_slowdown",
    "sync_boost": "sync_boost",
    "sw_thermal_slowdown": "sw_thermal",
    "hw_thermal_slowdown": "hw_thermal",
    "hw_power_brake_slowdown": "hw_power_brake",
    "display_clock_setting": "display_clocks",
}


@dataclass(slots=True, frozen=True)
class GPUInfo:
    """What does not change while the daemon runs; exported as an info series."""

    gpu: str  # NVML index, as nvidia-smi and DCGM number GPUs
    uuid: str
    name: str
    pci_bus_id: str = ""  # as nvidia-smi and DCGM write it: 00000000:17:00.0
    driver_version: str = ""
    cuda_version: str = ""  # the newest CUDA the driver supports, as nvidia-smi shows it: 12.8


@dataclass(slots=True, frozen=True)
class MigInstance:
    """A MIG device: one compute instance of one GPU instance, labelled as DCGM exporter labels it."""

    gpu_instance_id: int
    compute_instance_id: int
    profile: str  # 1g.10gb; "" where the name does not say
    uuid: str  # MIG-…, what CUDA_VISIBLE_DEVICES names


@dataclass(slots=True)
class GPUReading:
    gpu: str
    uuid: str
    name: str
    values: dict[str, float] = field(default_factory=dict)  # reading name → value in base units (gauges.GPU_SERIES)
    throttle: dict[str, bool] = field(default_factory=dict)
    # Readings with one label of their own: ECC counts by error type, NVLink bytes by link, XIDs by code.
    labelled: dict[str, dict[str, float]] = field(default_factory=dict)
    t: float | None = None  # perf_counter() at the middle of the energy counter's read; None: not read
    mig: MigInstance | None = None  # set on a MIG instance's reading; None on a whole GPU's

    @property
    def throttled(self) -> bool:
        return any(self.throttle.get(reason, False) for reason in SLOWING_REASONS)


@dataclass(slots=True)
class ProcessReading:
    resident_bytes: float
    # CPU time as a share of the cores the process may use (its affinity), 0–1, over a window of at least
    # host.MIN_CPU_WINDOW_S
    cpu_ratio: float
    cpu_user_s: float = 0.0  # CPU time since the process started, in user mode
    cpu_system_s: float = 0.0  # and in the kernel
    cores: int = 1  # the cores it may use


@dataclass(slots=True)
class HostReading:
    cpu_ratio: float | None = None
    cpu_core_ratios: list[float] = field(default_factory=list)
    load: tuple[float, float, float] | None = None
    memory_used_bytes: float | None = None
    memory_available_bytes: float | None = None
    memory_total_bytes: float | None = None
    processes: dict[str, ProcessReading] = field(default_factory=dict)  # "daemon", and what HostReader.watch named


@dataclass(slots=True)
class Snapshot:
    t: float  # perf_counter() when the read began
    gpus: list[GPUReading]
    host: HostReading
    duration_s: float = 0.0  # how long the whole read took
