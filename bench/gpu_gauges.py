"""benchd's NVML gauges against nvidia-smi, read at the same moments while the GPU works.

    python bench/gpu_gauges.py [--seconds 20]

A bf16 matrix-multiply loop keeps the GPU busy in a thread; once a second benchd's reader and
`nvidia-smi --query-gpu` read back to back (nvidia-smi first, then benchd, then nvidia-smi again, so each
benchd value is bracketed). Energy is compared as the counters' increase over the whole run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import threading
import time

import torch
from common import environment

from benchd.hardware import NVIDIA_SMI_FIELDS, HardwareReader, parse_nvidia_smi

PAIRS = {  # benchd reading → nvidia-smi field
    "utilization_ratio": "utilization.gpu",
    "memory_utilization_ratio": "utilization.memory",
    "memory_used_bytes": "memory.used",
    "memory_total_bytes": "memory.total",
    "power_watts": "power.draw",
    "power_limit_watts": "enforced.power.limit",
    "temperature_celsius": "temperature.gpu",
    "sm_clock_hertz": "clocks.sm",
    "memory_clock_hertz": "clocks.mem",
    "energy_joules": "total_energy_consumption",
}


def supported_fields() -> list[str]:
    """The fields this nvidia-smi knows (an unknown one makes the whole query fail)."""
    fields = []
    for name in NVIDIA_SMI_FIELDS:
        probe = subprocess.run(["nvidia-smi", f"--query-gpu={name}", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True)
        if probe.returncode == 0:
            fields.append(name)
        else:
            print(f"nvidia-smi does not know {name}: {probe.stdout.strip() or probe.stderr.strip()}")
    return fields


def smi(fields: list[str]) -> dict:
    text = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, check=True).stdout.splitlines()[0]
    cells = dict(zip(fields, (c.strip() for c in text.split(","))))
    # Back into parse_nvidia_smi's column order, with the unknown fields as [N/A].
    return parse_nvidia_smi(", ".join(cells.get(name, "[N/A]") for name in NVIDIA_SMI_FIELDS))[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=20)
    args = parser.parse_args()
    print(environment(), flush=True)
    stop = threading.Event()

    def load() -> None:
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        while not stop.is_set():
            for _ in range(20):
                a @ b
            torch.cuda.synchronize()

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    time.sleep(2)
    fields = supported_fields()
    energy_help = subprocess.run("nvidia-smi --help-query-gpu | grep -i -B1 -A2 energy", shell=True,
                                 capture_output=True, text=True).stdout
    print(energy_help.strip() or "nvidia-smi lists no energy field")
    reader = HardwareReader.default()
    rows = []
    for _ in range(args.seconds):
        before = smi(fields)
        t = time.perf_counter()
        ours = reader.read().gpus[0]
        after = smi(fields)
        rows.append({"t": t, "benchd": ours.values, "smi_before": before, "smi_after": after,
                     "throttle": ours.throttle})
        time.sleep(1)
    stop.set()
    worker.join()
    first, last = rows[0], rows[-1]
    print(f"GPU {reader.nvml.devices[0]}, GPM metrics: "
          f"{sorted(k for k in last['benchd'] if k.endswith('activity_ratio') or k.startswith('dram'))}")
    print(f"{'reading':26} {'benchd (mean)':>16} {'nvidia-smi (mean)':>18} {'max |diff|':>12}  (inside the bracket)")
    summary = {}
    for ours_key, smi_key in PAIRS.items():
        if ours_key == "energy_joules":
            continue
        pairs = [(r["benchd"][ours_key], (r["smi_before"][smi_key] + r["smi_after"][smi_key]) / 2,
                  min(r["smi_before"][smi_key], r["smi_after"][smi_key]) <= r["benchd"][ours_key]
                  <= max(r["smi_before"][smi_key], r["smi_after"][smi_key]))
                 for r in rows if ours_key in r["benchd"] and smi_key in r["smi_before"] and smi_key in r["smi_after"]]
        if not pairs:
            print(f"{ours_key:26} {'–':>16} {'–':>18}")
            continue
        ours_mean = sum(p[0] for p in pairs) / len(pairs)
        smi_mean = sum(p[1] for p in pairs) / len(pairs)
        diff = max(abs(p[0] - p[1]) for p in pairs)
        inside = sum(p[2] for p in pairs)
        summary[ours_key] = {"benchd": ours_mean, "nvidia_smi": smi_mean, "max_abs_diff": diff,
                             "inside_bracket": f"{inside}/{len(pairs)}"}
        print(f"{ours_key:26} {ours_mean:16.4g} {smi_mean:18.4g} {diff:12.4g}  {inside}/{len(pairs)}")
    # nvidia-smi has no energy field on recent drivers: check the counter against ∫ power dt (trapezoids).
    integral = sum((b["t"] - a["t"]) * (a["benchd"]["power_watts"] + b["benchd"]["power_watts"]) / 2
                   for a, b in zip(rows, rows[1:]))
    ours_energy = last["benchd"]["energy_joules"] - first["benchd"]["energy_joules"]
    print(f"energy counter increase {ours_energy:.1f} J; ∫ power dt from the same readings {integral:.1f} J "
          f"({ours_energy / integral - 1:+.2%})")
    smi_energy = last["smi_before"].get("total_energy_consumption", 0) - first["smi_before"].get(
        "total_energy_consumption", 0)
    print(f"energy over the run: benchd {ours_energy:.1f} J, nvidia-smi {smi_energy:.1f} J "
          f"(raw nvidia-smi counter {first['smi_before'].get('total_energy_consumption')})")
    summary["energy_joules_over_run"] = {"benchd": ours_energy, "nvidia_smi": smi_energy}
    with open(os.path.join(os.environ.get("OUT", "."), "gauges.json"), "w") as f:
        json.dump({"environment": environment(), "summary": summary, "rows": rows}, f, indent=2, default=str)


if __name__ == "__main__":
    main()
