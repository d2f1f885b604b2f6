"""The GPU scripts' CPU smoke modes: they run where CI runs, so the GPU session does not find them broken."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import free_port

ROOT = Path(__file__).resolve().parent.parent


def test_verdicts_script_runs_benchd_run_and_reads_its_verdicts(tmp_path):
    """Its closed loop, scaled to the tiny model: requests that cannot finish in the stage, cut at its drain."""
    done = subprocess.run([sys.executable, "bench/gpu_verdicts.py", "--smoke", "--cases", "closed"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "OUT": str(tmp_path)},
                          check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "benchd run said its stages end within 4.00 s of its first request" in done.stdout
    assert "concurrent=4: INVALID: cut" in done.stdout and re.search(r"drained \d\.\d s of ≤ 1 s", done.stdout)
    (stage,) = json.loads((tmp_path / "verdicts.json").read_text())["summaries"]["closed"]["stages"]
    assert stage["cut"] >= 1 and stage["drain_bound_s"] == 1


def test_overhead_script_accounts_for_both_paths(tmp_path):
    done = subprocess.run([sys.executable, "bench/gpu_overhead.py", "--smoke", "--repeats", "1",
                           "--modes", "bare", "bare-fresh", "local", "local-warm", "daemon", "--curl-scraper"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OUT": str(tmp_path)}, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "daemon / bare-fresh output tok/s by pair" in done.stdout
    assert "local / bare-fresh output tok/s by pair" in done.stdout
    assert "local-warm / local output tok/s by pair" in done.stdout  # a warm engine against a new one
    result = json.loads((tmp_path / "overhead.json").read_text())
    bare, fresh, local, daemon = (result["runs"][mode][0] for mode in ("bare", "bare-fresh", "local", "daemon"))
    assert fresh["tokens"] == 16 * 32 and fresh["step_calls"] > 0 and fresh["process_cpu_s"] > 0  # its own process
    for row in (bare, local):
        assert row["tokens"] == 16 * 32 and row["step_calls"] > 0 and row["schedule_calls"] >= row["step_calls"]
        assert row["generation_cpu_s"] > 0 and row["batches"] > 0
    assert bare["q_tokens"] >= 16 * 32 and local["q_tokens"] >= 16 * 32  # every prompt token went through
    assert local["consumer_cpu_s"] > 0 and "consumer_cpu_s" not in bare
    assert daemon["tokens"] == 16 * 32 and daemon["output_tok_s"] > 0
    warm = result["runs"]["local-warm"][0]
    assert warm["tokens"] == 16 * 32 and warm["step_calls"] > 0 and warm["q_tokens"] >= 16 * 32


def test_metrics_page_script_writes_both_pages_both_ways():
    done = subprocess.run([sys.executable, "bench/metrics_page.py", "--workloads", "2", "--repeats", "3"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("prometheus_client") == 2 and "OpenMetrics:" in done.stdout


def test_node_cost_script_measures_the_daemon_and_its_worker_idle_and_in_a_run():
    port = free_port()
    done = subprocess.run([sys.executable, "bench/node_cost.py", "--idle-s", "3", "--run-s", "3", "--port", str(port)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == "succeeded"
    for phase in ("idle", "run"):
        daemon, worker, every = (result[phase][kind] for kind in ("daemon", "worker", "all"))
        assert 50 < daemon["rss_max_mib"] < every["rss_max_mib"] and worker["pss_max_mib"] > 50
        assert every["cpu_mean_cores"] >= daemon["cpu_mean_cores"]
    assert result["run"]["worker"]["cpu_mean_cores"] > 0  # the engine ran in the worker


def test_gauges_script_checks_every_reading_against_nvidia_smi_output(tmp_path):
    """The GPU check's CPU smoke mode: the NVML stand-in against nvidia-smi's XML written from the same GPUs, every
    check passing, the scrape paths timed and a (stand-in) XID counted."""
    done = subprocess.run([sys.executable, "bench/gpu_gauges.py", "--smoke", "--seconds", "2", "--scrapes", "5",
                           "--xid"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OUT": str(tmp_path)}, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "every reading matched nvidia-smi" in done.stdout
    result = json.loads((tmp_path / "gauges.json").read_text())
    checks = result["checks"]
    for name in ("ecc_volatile_errors{correctable}", "remapped_rows{uncorrectable}", "pcie_replays",
                 "encoder_utilization_ratio", "nvlink_transmit_bytes{link=1}", "info: pci_bus_id",
                 "info: driver_version", "MIG 1g.10gb (2, 0) memory_used_bytes"):
        assert checks[name]["n"] > 0 and checks[name]["ok"] == checks[name]["n"], name
    assert set(result["scrape_ms"]) == {"NVML at scrape time (before)", "from the sampler, node label",
                                        "from the sampler, no node label"}
    assert result["xids"]["GPU-smoke-0"] == {"43": 1.0}


OLDER_SMI = """<?xml version="1.0" ?>
<nvidia_smi_log>
<driver_version>525.85.12</driver_version>
<cuda_version>12.0</cuda_version>
<gpu id="00000000:07:00.0">
  <product_name>NVIDIA A100-SXM4-40GB</product_name>
  <mig_mode><current_mig>Enabled</current_mig><pending_mig>Enabled</pending_mig></mig_mode>
  <mig_devices>
    <mig_device>
      <index>0</index><gpu_instance_id>1</gpu_instance_id><compute_instance_id>0</compute_instance_id>
      <fb_memory_usage><total>19968 MiB</total><reserved>0 MiB</reserved><used>13 MiB</used>
        <free>19954 MiB</free></fb_memory_usage>
    </mig_device>
  </mig_devices>
  <uuid>GPU-6109dd5c-d378-24ee-f344-79b537574ea6</uuid>
  <pci><pci_bus>07</pci_bus><pci_bus_id>00000000:07:00.0</pci_bus_id><replay_counter>2</replay_counter>
    <replay_rollover_counter>0</replay_rollover_counter><tx_util>250 KB/s</tx_util><rx_util>N/A</rx_util></pci>
  <fb_memory_usage><total>40960 MiB</total><reserved>571 MiB</reserved><used>33 MiB</used><free>40355 MiB</free>
  </fb_memory_usage>
  <utilization><gpu_util>N/A</gpu_util><memory_util>N/A</memory_util><encoder_util>N/A</encoder_util>
    <decoder_util>N/A</decoder_util></utilization>
  <ecc_mode><current_ecc>Enabled</current_ecc><pending_ecc>Enabled</pending_ecc></ecc_mode>
  <ecc_errors>
    <volatile><single_bit><device_memory>1</device_memory><total>3</total></single_bit>
      <double_bit><device_memory>0</device_memory><total>0</total></double_bit></volatile>
    <aggregate><sram_correctable>4</sram_correctable><sram_uncorrectable>1</sram_uncorrectable>
      <dram_correctable>10</dram_correctable><dram_uncorrectable>2</dram_uncorrectable>
      <sram_threshold_exceeded>No</sram_threshold_exceeded></aggregate>
  </ecc_errors>
  <remapped_rows><remapped_row_corr>5</remapped_row_corr><remapped_row_unc>0</remapped_row_unc>
    <remapped_row_pending>Yes</remapped_row_pending><remapped_row_failure>No</remapped_row_failure>
    <row_remapper_histogram><row_remapper_histogram_max>640 bank(s)</row_remapper_histogram_max>
    </row_remapper_histogram></remapped_rows>
  <temperature><gpu_temp>31 C</gpu_temp></temperature>
  <power_readings><power_state>P0</power_state><power_draw>54.18 W</power_draw><power_limit>400.00 W</power_limit>
    <enforced_power_limit>400.00 W</enforced_power_limit></power_readings>
  <clocks><graphics_clock>210 MHz</graphics_clock><sm_clock>210 MHz</sm_clock><mem_clock>1215 MHz</mem_clock></clocks>
  <clocks_throttle_reasons>
    <clocks_throttle_reason_gpu_idle>Active</clocks_throttle_reason_gpu_idle>
    <clocks_throttle_reason_sw_power_cap>Not Active</clocks_throttle_reason_sw_power_cap>
  </clocks_throttle_reasons>
</gpu>
</nvidia_smi_log>"""


def test_an_older_nvidia_smi_layout_reads_into_the_same_names():
    sys.path.insert(0, str(ROOT / "bench"))
    from nvidia_smi import parse, parse_nvlink

    smi = parse(OLDER_SMI)
    assert (smi["driver_version"], smi["cuda_version"]) == ("525.85.12", "12.0")
    gpu = smi["gpus"][0]
    assert gpu["pci_bus_id"] == "00000000:07:00.0" and gpu["mig_mode"] == "Enabled"
    values = gpu["values"]
    assert "utilization_ratio" not in values and "pcie_receive_bytes_per_second" not in values  # N/A: absent
    assert values["pcie_transmit_bytes_per_second"] == 250 * 1024 and values["pcie_replays"] == 2
    assert values["memory_used_bytes"] == 33 * 2**20 and values["memory_total_bytes"] == 40960 * 2**20
    assert values["power_watts"] == 54.18 and values["power_limit_watts"] == 400.0
    assert values["sm_clock_hertz"] == 210e6 and values["temperature_celsius"] == 31
    assert values["row_remap_pending"] == 1 and values["row_remap_failure"] == 0
    assert gpu["labelled"]["ecc_volatile_errors"] == {"correctable": 3, "uncorrectable": 0}  # single/double bit
    assert gpu["labelled"]["ecc_aggregate_errors"] == {"correctable": 14, "uncorrectable": 3}  # SRAM + DRAM
    assert gpu["labelled"]["remapped_rows"] == {"correctable": 5, "uncorrectable": 0}
    assert gpu["throttle"] == {"gpu_idle": True, "sw_power_cap": False}
    assert gpu["migs"] == {(1, 0): {"memory_used_bytes": 13 * 2**20, "memory_free_bytes": 19954 * 2**20,
                                    "memory_total_bytes": 19968 * 2**20}}
    links = parse_nvlink("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-x)\n\t Link 0: Data Tx: 12 KiB\n"
                         "\t Link 0: Data Rx: 34 KiB\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-y)\n")
    assert links == {0: {"nvlink_transmit_bytes": {"0": 12 * 1024}, "nvlink_receive_bytes": {"0": 34 * 1024}},
                     1: {"nvlink_transmit_bytes": {}, "nvlink_receive_bytes": {}}}


def test_loadgen_comparison_runs_benchd_against_the_c_mock(tmp_path):
    """The peers' comparison with benchd alone, two short rates: the mock builds, records its stamps, and the
    table compares benchd's figures with them."""
    done = subprocess.run([sys.executable, "bench/loadgen_peers.py", "--tools", "benchd", "--cases", "short",
                           "--rates", "20,40", "--seconds", "2", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = [line.split("|") for line in done.stdout.splitlines() if line.startswith("| benchd | short |")]
    assert len(rows) >= 2
    for row in rows[-2:]:
        rate, at_server, errors = float(row[3]), float(row[4]), int(row[5])
        assert errors == 0 and at_server == pytest.approx(rate, rel=0.2)
        ttft_truth_p50 = float(row[8].split("/")[0])
        assert 19.5 < ttft_truth_p50 < 25  # the mock's own stamp of its 20 ms first token
        for itl in (row[10], row[11]):  # every gap, and each request's mean gap: benchd's, the mock's, the error
            figure, truth, err = (float(x) for x in itl.split("/"))
            assert truth > 4.9 and figure == pytest.approx(truth + err, abs=0.011)  # the mock's 5 ms, or later
    stamps = (tmp_path / "short" / "stamps.txt").read_text().splitlines()
    assert len(stamps) >= 2 * (20 + 40) * 0.9 and all(len(line.split()) == 17 for line in stamps)  # read + 16


def test_loadgen_scaling_mode_prints_its_table(tmp_path):
    """--processes: benchd alone with 1 and 2 client processes (cores clipped to this machine's), prompts from a
    file made ahead, and the compact table at the end."""
    done = subprocess.run([sys.executable, "bench/loadgen_peers.py", "--processes", "1,2", "--scale-rates", "20",
                           "--seconds", "2", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    table = done.stdout.split("| client processes |")[1].splitlines()
    assert [line.split("|")[1].strip() for line in table[2:4]] == ["1", "2"]
    runs = [line for line in done.stdout.splitlines() if line.startswith("| benchd ×2 | short | 40 |")]
    assert runs and int(runs[0].split("|")[5]) == 0  # 40 requests/s over two client processes, none failed
    assert len((tmp_path / "scale" / "prompts.jsonl").read_text().splitlines()) == 2000


def test_the_stack_matrix_script_prints_its_table_and_what_each_method_needed(tmp_path):
    out = tmp_path / "matrix.json"
    done = subprocess.run([sys.executable, "bench/gpu_matrix.py", "--smoke", "--repeats", "1", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "8 of 8 runs" in done.stdout and "× bf16 sdpa" in done.stdout
    assert "torchao 0.17" in done.stdout or "torchao 0.1" in done.stdout  # the method and its version
    result = json.loads(out.read_text())
    variants = result["comparison"]["variants"]
    assert len(variants) == 8 and variants[0]["baseline"] and not result["errors"]
    assert {v["values"]["engine"] for v in variants} == {"transformers", "static"}
    int8 = [v for v in variants if v["values"]["quantization"] == "int8_weight_only"]
    assert all(v["quantized_layers"] == 14 and v["tokens"]["ratio"] > 0 for v in int8)


def test_server_page_script_prints_both_costs():
    done = subprocess.run([sys.executable, "bench/server_page.py", "--reads", "5"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "benchd's read:" in done.stdout and "the whole page parsed:" in done.stdout


def test_http_load_script_pairs_an_unloaded_and_a_loaded_run(tmp_path):
    # One daemon (each costs a worker's start): the real-time class where there is the privilege for it, else the
    # default; the script runs each level it is given the same way.
    levels = [1] if os.geteuid() == 0 else [0]
    done = subprocess.run([sys.executable, "bench/http_load.py", "--pairs", "1", "--clients", "4", "--rate", "20",
                           "--requests", "8", "--cpu-threads", "1", "--out",
                           str(tmp_path / "out"), "--dispatch-priorities", ",".join(map(str, levels)), "--floor"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = json.loads((tmp_path / "out" / "http_load.json").read_text())
    assert [row["dispatch_priority"] for row in rows] == levels
    for row in rows:
        assert row["unloaded"]["status"] == row["loaded"]["status"] == "succeeded"
        assert row["metrics_requests"] > 0 and row["runs_requests"] > 0 and row["errors"] == 0
    for level in levels:
        assert f"dispatch priority {level}: median loaded/unloaded TTFT p99" in done.stdout
    bound = json.loads((tmp_path / "out" / "http_load_floor.json").read_text())
    assert bound["served_per_s"] > 0 and bound["errors"] == 0 and bound["page_bytes"] > 1000
    assert "floor, a bare FastAPI app answering the same pages as bytes" in done.stdout


def test_dispatch_lag_script_prints_a_line_for_the_idle_engine_and_each_switch_interval():
    done = subprocess.run([sys.executable, "bench/dispatch_lag.py", "--requests", "8", "--rate", "40",
                           "--switch-intervals", "0.005,0.001"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [line.split(": dispatch lag p50 ") for line in done.stdout.splitlines() if ": dispatch lag p50 " in line]
    assert [case for case, _ in lines] == [
        "idle engine (4/1 tokens), switch interval 5 ms, handoff on",
        *(f"generating (32/32 tokens), switch interval {ms} ms, handoff {handoff}"
          for ms in (5, 1) for handoff in ("on", "off"))]
    assert all("latest dispatches" in figures for _, figures in lines)


def test_worker_orphans_script_shows_the_next_daemon_ending_the_hung_worker():
    done = subprocess.run([sys.executable, "bench/worker_orphans.py", "--grace-s", "1", "--port", str(free_port())],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    hung = next(line for line in lines if line.startswith("daemon SIGKILLed"))
    assert "GiB" in hung and "gone" not in hung  # the orphan still held its memory
    assert ": ended; the new worker" in done.stdout
    assert "an ordinary run on the new worker: succeeded" in done.stdout


def test_memory_grid_script_doubles_an_open_loop_and_prints_its_table(tmp_path):
    """bench/gpu_memory_grid.py through a live daemon on the tiny model: a closed loop, then an open loop doubled
    from 16/s up to its limit; every row saved as it ends."""
    done = subprocess.run([sys.executable, "bench/gpu_memory_grid.py", "--smoke", "--out", str(tmp_path),
                           "--port", str(free_port())], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = json.loads((tmp_path / "memory_grid.json").read_text())["rows"]
    assert [r["title"] for r in rows][:2] == ["closed 4 × 16/8", "open 16/s × 16/8"]
    assert all(r["status"] == "succeeded" and r["restarts"] == 0 for r in rows)
    assert "| tiny | open 16/s × 16/8 | succeeded |" in done.stdout and "no run ran out of memory" in done.stdout


def test_before_after_runs_the_script_with_its_arguments_on_both_versions_in_turn(tmp_path):
    """The options after -- are the script's (argparse's REMAINDER once took --rounds for the script's name). The
    script is the cheapest that imports benchd (a page parsed, no model): what is checked is the harness."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the earlier commit's worktree lands here
    try:
        done = subprocess.run([sys.executable, "bench/before_after.py", "HEAD", "--rounds", "2", "--",
                               "server_page.py", "--reads", "3"],
                              cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tmp_path / "benchd-before-HEAD")], cwd=ROOT,
                       capture_output=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    heads = [line for line in done.stdout.splitlines() if line.startswith("== round")]
    script = "server_page.py --reads 3 (exit 0)"
    assert heads == [f"== round 1, before (HEAD): {script}", f"== round 1, after (this checkout): {script}",
                     f"== round 2, after (this checkout): {script}", f"== round 2, before (HEAD): {script}"]
    assert done.stdout.count("benchd's read: ") == 4


def test_roofline_script_prints_the_limits_and_each_variant_on_the_roofline(tmp_path):
    """bench/gpu_roofline.py --smoke: the CPU's limits measured for real, then continuous batching and static batches
    of 64 of 16 requests × 32 prompt × 32 output tokens, each with its steps, MBU, MFU and fraction of the bound, and
    (--profile) where a profiled round's time went."""
    done = subprocess.run([sys.executable, "bench/gpu_roofline.py", "--smoke", "--profile"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "OUT": str(tmp_path)},
                          check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "measured limits" in done.stdout and "bound by" in done.stdout
    result = json.loads((tmp_path / "roofline.json").read_text())
    assert result["limits"][0]["limit"] == "bandwidth GB/s" and result["limits"][0]["measured"] > 0.1
    continuous, static = result["runs"]
    assert (continuous["variant"], static["variant"]) == ("continuous", "static-64")
    for run in (continuous, static):
        assert run["prefill_tokens"] == 16 * 32 and run["decode_tokens"] == 16 * 31  # the last token fed to none
        assert run["mbu"] > 0 and run["mfu"] > 0 and run["of_bound"] > 0 and run["bound_s"] > 0
    assert static["steps"] == 32  # one batch of 16: a prefill and 31 decodes
    for run in (continuous, static):  # the engine's thread's operators, seen by the profiler
        names = [k["name"] for k in run["where"]["top"]]
        assert "aten::mm" in names and run["where"]["busy_s"] > 0 and run["where"]["wall_s"] > 0


def test_change_points_script_reports_detection_false_change_points_speed_and_measured_noise(tmp_path):
    """bench/change_points.py on a few series, with the tiny model's noise measured over three runs."""
    done = subprocess.run([sys.executable, "bench/change_points.py", "--trials", "3", "--horizon", "12",
                           "--noise-runs", "300", "--speed-runs", "2000", "--measure", "3", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "| 2.0% given | 5% step |" in done.stdout and "| output tok/s, measured | 10% step |" in done.stdout
    report = json.loads((tmp_path / "change-points-cpu-tiny.json").read_text())
    assert report["measured"]["figures"]["itl_s.p50"]["runs"] == 3 and report["false"][0]["runs"] == 1_000
    ten = next(r for r in report["detection"] if r["shape"] == "step" and r["size"] == 0.10
               and r["noise_label"] == "2.0% given")
    assert ten["detected"] == 1.0  # a 10 % step in 2 % noise, every time
    assert report["speed"]["runs"] == 2000 and report["speed"]["seven_figures_s"] > 0
