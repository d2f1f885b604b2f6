"""benchd's GPU gauges against `nvidia-smi -q -x` while the GPU works, and what a /metrics scrape costs.

    PYTHONPATH=/tmp/site:src python3 bench/gpu_gauges.py [--seconds 20] [--xid]
    python3 bench/gpu_gauges.py --smoke       # CPU: the NVML stand-in, and nvidia-smi's XML written from it

1. A bf16 matmul loop keeps GPU 0 busy. Every second nvidia-smi -q -x runs, then benchd's reader, then nvidia-smi
   again: each gauge must lie between the two nvidia-smi values (within their printed resolution), each counter and
   static value must equal one of them; MIG instances by (GPU instance, compute instance); NVLink per link against
   `nvidia-smi nvlink -gt d`; the info series against nvidia-smi's driver, CUDA version and PCI bus id. Energy, which
   nvidia-smi does not show, against the integral of the power readings.
2. The time each NVML field takes per call (PCIe throughput blocks ~20 ms per direction on an H100).
3. A scrape of the daemon's registry served from the sampler against the old path (NVML read at scrape time),
   interleaved, with and without the node label.
4. With --xid: a device-side assert in a child process, and benchd's XID counter before and after it (and the Xid
   lines of dmesg where it is readable).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

from common import ROOT, environment

sys.path.insert(0, str(ROOT))  # tests.fake_nvml for --smoke

from nvidia_smi import parse, parse_nvlink  # noqa: E402
from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402

from benchd.telemetry.exposition import NodeRegistry  # noqa: E402
from benchd.telemetry.gauges import HardwareCollector, families  # noqa: E402
from benchd.hardware.reader import HardwareReader  # noqa: E402
from benchd.hardware.host import HostReader  # noqa: E402
from benchd.telemetry.metrics import Metrics  # noqa: E402
from benchd.hardware.nvml import NVMLReader  # noqa: E402
from benchd.hardware.nvml_fields import gpu_fields  # noqa: E402
from benchd.hardware.sampler import HardwareSampler  # noqa: E402

# Gauges: benchd's value must lie between nvidia-smi's before and after, widened by nvidia-smi's resolution.
GAUGES = {"utilization_ratio": 0.01, "memory_utilization_ratio": 0.01, "encoder_utilization_ratio": 0.01,
          "decoder_utilization_ratio": 0.01, "memory_used_bytes": 2**20, "memory_free_bytes": 2**20,
          "power_watts": 0.01, "temperature_celsius": 1.0, "sm_clock_hertz": 1e6, "memory_clock_hertz": 1e6,
          "pcie_transmit_bytes_per_second": 1024.0, "pcie_receive_bytes_per_second": 1024.0}
# Counters and static values: equal to one of the two, within the resolution.
EXACT = {"memory_total_bytes": 2**20, "power_limit_watts": 0.01, "pcie_replays": 0.0, "row_remap_pending": 0.0,
         "row_remap_failure": 0.0}
LABELLED = ("ecc_volatile_errors", "ecc_aggregate_errors", "remapped_rows")


class Tally:
    """k of n checks passed per name, with the largest distance seen."""

    def __init__(self) -> None:
        self.rows: dict[str, dict] = {}

    def add(self, name: str, ours: float, before: float, after: float, tolerance: float, exact: bool) -> None:
        low, high = min(before, after) - tolerance, max(before, after) + tolerance
        ok = (abs(ours - before) <= tolerance or abs(ours - after) <= tolerance) if exact else low <= ours <= high
        row = self.rows.setdefault(name, {"ok": 0, "n": 0, "ours": [], "smi": [], "max_diff": 0.0,
                                          "kind": "equal" if exact else "inside"})
        row["ok"] += ok
        row["n"] += 1
        row["ours"].append(ours)
        row["smi"].append((before + after) / 2)
        row["max_diff"] = max(row["max_diff"], min(abs(ours - before), abs(ours - after)))

    def text(self, name: str, ok: bool) -> None:
        row = self.rows.setdefault(name, {"ok": 0, "n": 0, "kind": "equal"})
        row["ok"] += ok
        row["n"] += 1

    def print(self) -> list[str]:
        print(f"{'reading':44} {'benchd (mean)':>14} {'nvidia-smi':>14} {'max |diff|':>11}  check")
        failed = []
        for name, row in self.rows.items():
            if "ours" in row:
                print(f"{name:44} {statistics.fmean(row['ours']):14.6g} {statistics.fmean(row['smi']):14.6g} "
                      f"{row['max_diff']:11.4g}  {row['kind']} {row['ok']}/{row['n']}")
            else:
                print(f"{name:44} {'':14} {'':14} {'':11}  {row['kind']} {row['ok']}/{row['n']}")
            if row["ok"] < row["n"]:
                failed.append(name)
        return failed


def compare(tally: Tally, ours, before: dict, after: dict, info, smi_before: dict) -> None:
    """One benchd GPU reading against nvidia-smi's readings of that GPU before and after it."""
    for key, tolerance in (*GAUGES.items(), *EXACT.items()):
        if key in ours.values and key in before["values"] and key in after["values"]:
            tally.add(key, ours.values[key], before["values"][key], after["values"][key], tolerance, key in EXACT)
        elif (key in ours.values) != (key in before["values"]):
            tally.text(f"{key} (present in both)", False)
    if "instant_power_watts" in before["values"] and "power_watts" in ours.values:
        tally.add("power_watts (vs instant_power_draw)", ours.values["power_watts"],
                  before["values"]["instant_power_watts"], after["values"]["instant_power_watts"], 0.01, False)
    for key in LABELLED:
        for label, value in ours.labelled.get(key, {}).items():
            if label in before["labelled"].get(key, {}):
                tally.add(f"{key}{{{label}}}", value, before["labelled"][key][label], after["labelled"][key][label],
                          0.0, True)
        if bool(ours.labelled.get(key)) != bool(before["labelled"].get(key)):
            tally.text(f"{key} (present in both)", False)
    for reason, active in ours.throttle.items():
        if reason in before["throttle"]:
            tally.add(f"throttle {reason}", float(active), float(before["throttle"][reason]),
                      float(after["throttle"][reason]), 0.0, True)
    if info is not None:
        tally.text("info: name", info.name == before["name"])
        tally.text("info: pci_bus_id", info.pci_bus_id.upper() == (before["pci_bus_id"] or "").upper())
        tally.text("info: driver_version", info.driver_version == smi_before["driver_version"])
        tally.text("info: cuda_version", info.cuda_version == smi_before["cuda_version"])


def compare_mig(tally: Tally, ours, before: dict, after: dict) -> None:
    key = (ours.mig.gpu_instance_id, ours.mig.compute_instance_id)
    if key not in before["migs"] or key not in after["migs"]:
        tally.text(f"MIG {key} (in nvidia-smi)", False)
        return
    for name in ("memory_used_bytes", "memory_total_bytes"):
        if name in ours.values and name in before["migs"][key]:
            tally.add(f"MIG {ours.mig.profile} {key} {name}", ours.values[name], before["migs"][key][name],
                      after["migs"][key][name], 2**20, name == "memory_total_bytes")


def percentiles(values: list[float]) -> str:
    q = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else values * 99
    return f"p50 {q[49] * 1e3:7.2f} ms  p99 {q[98] * 1e3:7.2f} ms  max {max(values) * 1e3:7.2f} ms"


class ScrapeTimeRead:
    """The path benchd had before: NVML and psutil read inside the scrape."""

    def __init__(self, reader: HardwareReader) -> None:
        self.reader = reader

    def collect(self):
        return families(self.reader.read())


def registries(reader: HardwareReader, old_reader: HardwareReader, sampler: HardwareSampler) -> dict:
    """The daemon's registry three ways, each with the same latency histograms filled for three workloads."""
    def filled(registry):
        metrics = Metrics(registry)
        for workload in ("short", "long", "reference"):
            labels = ("llama-3.2-1b", "transformers", workload)
            for i in range(2000):
                metrics.ttft.labels(*labels).observe(0.001 * (i % 300), {"trace_id": f"{i:032x}"})
                metrics.itl.labels(*labels).observe(0.0001 * (i % 100))
                metrics.e2e.labels(*labels).observe(0.01 * (i % 200))
            metrics.generation_tokens.labels(*labels).inc(5000)
        return registry

    old = filled(CollectorRegistry())
    old.register(ScrapeTimeRead(old_reader))
    new = filled(NodeRegistry("gpu-node-0"))
    new.register(HardwareCollector(sampler))
    unlabelled = filled(CollectorRegistry())
    unlabelled.register(HardwareCollector(sampler))
    return {"NVML at scrape time (before)": old, "from the sampler, node label": new,
            "from the sampler, no node label": unlabelled}


def field_timings(reader: HardwareReader, calls: int) -> dict[str, list[float]]:
    device = reader.nvml._devices[0]  # the bench reaches inside: the handle and active links of GPU 0
    out = {}
    for name, (_, read) in gpu_fields(reader.nvml._nvml).items():
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            try:
                read(device.handle, device.links)
            except Exception as error:  # noqa: BLE001 - a field this GPU lacks: say so and go on
                print(f"  {name}: {type(error).__name__}")
                break
            times.append(time.perf_counter() - started)
        if times:
            out[name] = times
    started = time.perf_counter()
    reader.nvml.xids.drain()
    out["xid drain (no event)"] = [time.perf_counter() - started]
    return out


def trigger_xid(device_index: int) -> None:
    """A device-side assert in a child process: the driver reports an XID for the faulting context."""
    code = ("import torch; x = torch.zeros(4, device='cuda'); i = torch.tensor([1 << 20], device='cuda'); "
            "x[i] = 1; torch.cuda.synchronize()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                               "CUDA_VISIBLE_DEVICES": str(device_index)})
    print(f"child exit {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1][:160]}")


def dmesg_xids() -> list[str] | None:
    done = subprocess.run(["dmesg"], capture_output=True, text=True)
    return [line for line in done.stdout.splitlines() if "Xid" in line] if done.returncode == 0 else None


def smoke_setup():
    """The NVML stand-in: one GPU with NVLink and H100-like blocking reads, one in MIG mode."""
    from tests.fake_nvml import FakeGPU, FakeMig, FakeNVML
    from tests.fake_smi import nvlink_text, smi_xml

    delays = {"nvmlDeviceGetPcieThroughput": 0.021, "nvmlDeviceGetTotalEnergyConsumption": 0.003}  # H100's
    gpus = [FakeGPU("GPU-smoke-0", nvlink_kib={0: (1000, 2000), 1: (3000, 4000)}, delays=delays),
            FakeGPU("GPU-smoke-1", bus_id="00000000:9A:00.0",
                    mig=[FakeMig(1, 0, "3g.40gb", "MIG-smoke-1"), FakeMig(2, 0, "1g.10gb", "MIG-smoke-2")])]
    nvml = FakeNVML(gpus)

    def reader():
        nvml_reader = NVMLReader(nvml)
        nvml_reader.start()
        return HardwareReader(nvml_reader, HostReader())

    def work():  # what a working GPU does between reads: counters grow
        for gpu in gpus:
            gpu.energy_mj += 150_000
            gpu.nvlink_kib = {link: (tx + 512, rx + 256) for link, (tx, rx) in gpu.nvlink_kib.items()}

    return reader, lambda: smi_xml(nvml), lambda: nvlink_text(nvml), work, lambda: nvml.emit(gpus[0], 0x8, 43)


def gpu_setup():
    import torch

    stop = threading.Event()

    def load() -> None:
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        while not stop.is_set():
            for _ in range(20):
                a @ b
            torch.cuda.synchronize()

    threading.Thread(target=load, daemon=True).start()
    time.sleep(2)

    def run(*command: str) -> str:
        return subprocess.run(command, capture_output=True, text=True, check=True, timeout=120).stdout

    def nvlink() -> str:
        done = subprocess.run(["nvidia-smi", "nvlink", "-gt", "d"], capture_output=True, text=True, timeout=120)
        return done.stdout if done.returncode == 0 else ""

    return HardwareReader.default, lambda: run("nvidia-smi", "-q", "-x"), nvlink, lambda: None, None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=20, help="comparison rounds, one a second")
    parser.add_argument("--scrapes", type=int, default=200, help="scrapes timed per path")
    parser.add_argument("--xid", action="store_true", help="trigger a device-side assert and count the XID")
    parser.add_argument("--smoke", action="store_true", help="the NVML stand-in on the CPU: checks the script")
    args = parser.parse_args()
    print(environment(), flush=True)
    new_reader, smi_xml, nvlink_text, work, emit_xid = smoke_setup() if args.smoke else gpu_setup()
    reader = new_reader()
    if not reader.nvml.available:
        print("NVML is not available")
        return 1
    info = {g.uuid: g for g in reader.nvml.info}
    print("GPUs:", ", ".join(f"{g.gpu} {g.name} {g.pci_bus_id}" for g in info.values()),
          f"driver {next(iter(info.values())).driver_version}, CUDA {next(iter(info.values())).cuda_version}")
    print(f"MIG instances: {reader.nvml.migs or 'none'}")

    # 1. Every gauge against nvidia-smi.
    tally, rows = Tally(), []
    for _ in range(args.seconds):
        work()
        smi_before, links_before = parse(smi_xml()), parse_nvlink(nvlink_text())
        t = time.perf_counter()
        snapshot = reader.read()
        smi_after, links_after = parse(smi_xml()), parse_nvlink(nvlink_text())
        before = {g["uuid"]: g for g in smi_before["gpus"]}
        after = {g["uuid"]: g for g in smi_after["gpus"]}
        for ours in snapshot.gpus:
            if ours.uuid not in before or ours.uuid not in after:
                tally.text(f"GPU {ours.uuid} (in nvidia-smi)", False)
            elif ours.mig is not None:
                compare_mig(tally, ours, before[ours.uuid], after[ours.uuid])
            else:
                compare(tally, ours, before[ours.uuid], after[ours.uuid], info.get(ours.uuid), smi_before)
                index = int(ours.gpu)
                for key in ("nvlink_transmit_bytes", "nvlink_receive_bytes"):
                    for link, value in ours.labelled.get(key, {}).items():
                        smi_b = links_before.get(index, {}).get(key, {}).get(link)
                        smi_a = links_after.get(index, {}).get(key, {}).get(link)
                        if smi_b is None or smi_a is None:
                            tally.text(f"{key} link {link} (in nvidia-smi nvlink)", False)
                        else:
                            tally.add(f"{key}{{link={link}}}", value, smi_b, smi_a, 1024.0, False)
        rows.append({"t": t, "gpus": [{"uuid": g.uuid, "mig": g.mig and g.mig.uuid, "values": g.values,
                                       "labelled": g.labelled, "energy_t": g.t} for g in snapshot.gpus]})
        if not args.smoke:
            time.sleep(1)
    failed = tally.print()
    first = {g["uuid"]: g for g in rows[0]["gpus"] if g["mig"] is None}
    for g in [] if args.smoke else (g for g in rows[-1]["gpus"] if g["mig"] is None and "energy_joules" in g["values"]):
        series = [(r["t"], x["values"]) for r in rows for x in r["gpus"] if x["uuid"] == g["uuid"] and not x["mig"]]
        integral = sum((t1 - t0) * (a["power_watts"] + b["power_watts"]) / 2
                       for (t0, a), (t1, b) in zip(series, series[1:]) if "power_watts" in a and "power_watts" in b)
        counted = g["values"]["energy_joules"] - first[g["uuid"]]["values"]["energy_joules"]
        print(f"energy {g['uuid']}: counter +{counted:.1f} J, ∫ power dt {integral:.1f} J"
              + (f" ({counted / integral - 1:+.2%})" if integral else ""))
    print("every reading matched nvidia-smi" if not failed else f"MISMATCHED: {', '.join(failed)}", flush=True)

    # 2. What each NVML field costs per call.
    print("\nNVML time per call, GPU 0 (median / max over the calls):")
    timings = field_timings(reader, 5 if args.smoke else 20)
    for name, times in timings.items():
        print(f"  {name:22} {statistics.median(times) * 1e3:8.3f} ms  {max(times) * 1e3:8.3f} ms")
    read_times = []
    for _ in range(5 if args.smoke else 20):
        started = time.perf_counter()
        reader.read()
        read_times.append(time.perf_counter() - started)
    print(f"  {'whole read':22} {statistics.median(read_times) * 1e3:8.3f} ms  {max(read_times) * 1e3:8.3f} ms")

    # 3. A scrape, served from the sampler or read at scrape time.
    sampler = HardwareSampler(reader, interval_s=1.0)
    sampler.start()
    while sampler.latest is None:
        time.sleep(0.01)
    paths = registries(reader, new_reader(), sampler)
    durations: dict[str, list[float]] = {name: [] for name in paths}
    sizes = {}
    for _ in range(args.scrapes):
        for name, registry in paths.items():  # interleaved: what drifts favours none
            started = time.perf_counter()
            page = generate_latest(registry)
            durations[name].append(time.perf_counter() - started)
            sizes[name] = len(page)
    sampler.stop()
    print(f"\n/metrics scrape ({args.scrapes} each, interleaved, text format):")
    for name, times in durations.items():
        print(f"  {name:34} {percentiles(times)}  {sizes[name] / 1024:.0f} KiB")
    before_p50 = statistics.median(durations["NVML at scrape time (before)"])
    after_p50 = statistics.median(durations["from the sampler, node label"])
    print(f"  before / after p50: {before_p50 / after_p50:.1f}x")

    # 4. A real XID.
    xids = {}
    if args.xid:
        before_counts = {g.uuid: dict(g.labelled.get("xid_errors", {})) for g in reader.read().gpus if not g.mig}
        dmesg_before = dmesg_xids()
        trigger_xid(0) if emit_xid is None else emit_xid()
        time.sleep(3)
        after_counts = {g.uuid: dict(g.labelled.get("xid_errors", {})) for g in reader.read().gpus if not g.mig}
        for uuid, counts in after_counts.items():
            new = {code: n - before_counts.get(uuid, {}).get(code, 0) for code, n in counts.items()
                   if n > before_counts.get(uuid, {}).get(code, 0)}
            print(f"XID events counted on {uuid}: {new or 'none'}")
            xids[uuid] = new
        dmesg_after = dmesg_xids()
        if dmesg_before is None or dmesg_after is None:
            print("dmesg is not readable here: compare with the host's kernel log")
        else:
            print("dmesg, new Xid lines:", *dmesg_after[len(dmesg_before):] or ["none"], sep="\n  ")
    with open(os.path.join(os.environ.get("OUT", "."), "gauges.json"), "w") as f:
        json.dump({"environment": environment(), "checks": tally.rows, "failed": failed, "rows": rows,
                   "field_ms": {k: [t * 1e3 for t in v] for k, v in timings.items()},
                   "scrape_ms": {k: [t * 1e3 for t in v] for k, v in durations.items()}, "xids": xids},
                  f, indent=1, default=str)
    return 1 if args.smoke and failed else 0


if __name__ == "__main__":
    sys.exit(main())
