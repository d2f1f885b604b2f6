"""Builds benchd's Grafana dashboards (live and fleet: Prometheus; history: PostgreSQL) as JSON. Edit here, then run

    python grafana/dashboards.py

to rewrite grafana/dashboards/*.json (a test checks that the committed files are what this writes).
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).parent / "dashboards"
PROMETHEUS = {"type": "prometheus", "uid": "prometheus"}
POSTGRES = {"type": "grafana-postgresql-datasource", "uid": "benchd-postgres"}
# Every series carries the node's hostname: each selector keeps to the chosen nodes and each aggregation keeps them
# apart (by hostname), so that a fleet's nodes never merge into one line.
NODE = 'hostname=~"$node"'
SEL = f'{NODE}, model=~"$model", workload=~"$workload"'
GPU = f'{NODE}, gpu=~"$gpu"'
# Clock events that cut a GPU's clocks whatever its work (spec/validity.py, SLOWDOWN_EVENTS): a stage slowed by them
# is INVALID: throttled. DCGM exporter's clock_event names.
SLOWDOWN = "hw_slowdown|sw_thermal|hw_thermal|hw_power_brake"


class Layout:
    """Panels two to a row, 8 units high."""

    def __init__(self) -> None:
        self.panels: list[dict] = []

    def add(self, panel: dict, width: int = 12) -> None:
        x = sum(p["gridPos"]["w"] for p in self.panels) % 24
        y = (sum(p["gridPos"]["w"] for p in self.panels) // 24) * 8
        if x + width > 24:
            x, y = 0, y + 8
        panel["id"] = len(self.panels) + 1
        panel["gridPos"] = {"h": 8, "w": width, "x": x, "y": y}
        self.panels.append(panel)


def prom_panel(title: str, unit: str, targets: list[tuple[str, str]], exemplars: bool = False,
               description: str = "") -> dict:
    return {
        "type": "timeseries", "title": title, "description": description, "datasource": PROMETHEUS,
        "fieldConfig": {"defaults": {"unit": unit, "custom": {"showPoints": "auto"}}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [{"refId": chr(65 + i), "datasource": PROMETHEUS, "expr": expr, "legendFormat": legend,
                     "exemplar": exemplars, "range": True}
                    for i, (expr, legend) in enumerate(targets)],
    }


def quantiles(metric: str) -> list[tuple[str, str]]:
    return [(f"histogram_quantile({q}, sum by (le, hostname, gpu, model, workload) (rate({metric}_bucket{{{SEL}}}"
             f"[$__rate_interval])))", f"p{p} {{{{workload}}}} {{{{hostname}}}} {{{{gpu}}}}")
            for q, p in (("0.5", 50), ("0.95", 95), ("0.99", 99))]


def variable(name: str, query: str, datasource: dict, label: str, every: bool = True, description: str = "") -> dict:
    """every: several values or All (the default); else exactly one."""
    choice = {"includeAll": True, "multi": True, "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
              **({"allValue": ".*"} if datasource is PROMETHEUS else {})} if every else \
        {"includeAll": False, "multi": False, "current": {}}
    return {"name": name, "label": label, "type": "query", "datasource": datasource,
            **({"description": description} if description else {}),
            "query": query if datasource is POSTGRES else {"query": query, "refId": name},
            "definition": query, "refresh": 2, "sort": 1, **choice}


NODE_VARIABLE = variable("node", "label_values(benchd_hardware_sampler_stalled, hostname)", PROMETHEUS, "node")


CHANGE = f'{NODE}, workload=~"$workload"'
CHANGE_POINTS = [
    (f"max by (hostname, workload, figure, device) (benchd_change_point_relative_change{{{CHANGE}}})",
     "{{workload}} {{figure}} {{device}} {{hostname}}"),
    (f"max by (hostname, workload, figure, device) (benchd_change_point_direction{{{CHANGE}}})",
     "direction {{workload}} {{figure}} {{device}} {{hostname}}"),
]
# A mark at each latest change point's time: the series' value is the time (Grafana's "series value as
# timestamp"), the first run of its new segment.
CHANGE_POINT_ANNOTATION = {
    "name": "change points", "datasource": PROMETHEUS, "enable": True, "iconColor": "rgba(242, 73, 92, 1)",
    "expr": f"max by (hostname, workload, figure, device) (benchd_change_point_timestamp_seconds{{{CHANGE}}}) * 1000",
    "useValueForTime": True, "step": "1m", "titleFormat": "change point",
    "textFormat": "{{workload}}: {{figure}} on {{device}} ({{hostname}})",
}


def live() -> dict:
    layout = Layout()
    latency = "Per request from its scheduled time; exemplars link each tail bucket to the request's trace."
    layout.add(prom_panel("Time to first token", "s", quantiles("benchd_time_to_first_token_seconds"), True, latency))
    layout.add(prom_panel("Inter-token latency (per token)", "s", quantiles("benchd_inter_token_latency_seconds"),
                          True, "A chunk of k tokens counts as k equal gaps."))
    layout.add(prom_panel("Time per output token", "s", quantiles("benchd_time_per_output_token_seconds"), True))
    layout.add(prom_panel("End-to-end latency", "s", quantiles("benchd_request_duration_seconds"), True, latency))
    layout.add(prom_panel("Output throughput", "none", [
        # The run's series goes when it ends: each point is its latest value within the interval.
        (f"sum by (hostname, gpu, model, workload) (last_over_time(benchd_run_output_tokens_per_second{{{SEL}}}"
         f"[$__rate_interval]))", "run {{workload}} {{hostname}} {{gpu}} tok/s"),
        (f"sum by (hostname, gpu, model, workload) (rate(benchd_generation_tokens_total{{{SEL}}}[$__rate_interval]))",
         "generated {{workload}} {{hostname}} {{gpu}} tok/s"),
    ]))
    layout.add(prom_panel("Requests running and waiting", "none", [
        (f"sum by (hostname, workload) (benchd_requests_running{{{SEL}}})", "running {{workload}} {{hostname}}"),
        (f"sum by (hostname, workload) (benchd_requests_waiting{{{SEL}}})", "waiting {{workload}} {{hostname}}"),
    ]))
    layout.add(prom_panel("KV-cache occupancy", "percentunit", [
        (f"max by (hostname, gpu, workload) (benchd_kv_cache_usage_ratio{{{SEL}}})", "{{workload}} {{hostname}} {{gpu}}"),
    ]))
    layout.add(prom_panel("Dispatch lag (benchd's own lateness)", "s", [
        (f"histogram_quantile(0.99, sum by (le, hostname, workload) (rate(benchd_dispatch_lag_seconds_bucket{{{SEL}}}"
         f"[$__rate_interval])))", "p99 {{workload}} {{hostname}}"),
    ]))
    layout.add(prom_panel("Finished requests by outcome", "reqps", [
        (f"sum by (hostname, outcome) (rate(benchd_requests_total{{{SEL}}}[$__rate_interval]))", "{{outcome}} {{hostname}}"),
    ]))
    layout.add(prom_panel("Energy per output token (latest run)", "J", [
        (f"benchd_run_energy_per_output_token_joules{{{SEL}}}", "{{workload}} {{hostname}} {{gpu}}"),
    ]))
    layout.add(prom_panel("How far from the hardware (latest run)", "percentunit", [
        (f"benchd_run_memory_bandwidth_utilization_ratio{{{SEL}}}", "MBU {{workload}} {{hostname}} {{gpu}}"),
        (f"benchd_run_flops_utilization_ratio{{{SEL}}}", "MFU {{workload}} {{hostname}} {{gpu}}"),
        (f"benchd_run_roofline_bound_ratio{{{SEL}}}", "of roofline bound {{workload}} {{hostname}} {{gpu}}"),
    ], description="The latest run's last stage with steps its engine counted (docs/figures.md, how far from the "
                   "hardware): the bytes and FLOPs its steps must move and do, per second, over the device's "
                   "measured bandwidth (MBU) and matmul rate (MFU); and the fastest those steps could run, each at "
                   "its binding ceiling, over the time they took."))
    layout.add(prom_panel("Device limits: memory bandwidth", "Bps", [
        (f'{{__name__=~"benchd_(gpu|cpu)_peak_memory_bandwidth_bytes_per_second", {NODE}}}',
         "{{hostname}} {{gpu}} {{name}} {{source}}"),
    ], description="Each device's memory bandwidth as its worker measured it once (a copy larger than the caches), "
                   "and the datasheet's where the model is known: a GPU's benchd_gpu_peak_*, the CPU's "
                   "benchd_cpu_peak_*. gpu: NVML's index; empty for the CPU."))
    layout.add(prom_panel("Device limits: dense matmul rate", "flops", [
        (f'{{__name__=~"benchd_(gpu|cpu)_peak_flops_per_second", {NODE}}}', "{{hostname}} {{gpu}} {{name}} "
                                                                             "{{dtype}} {{source}}"),
    ], description="Each device's matmul rate by dtype as its worker measured it once (a large GEMM), and the "
                   "datasheet's where the model is known: a GPU's benchd_gpu_peak_flops_per_second, the CPU's "
                   "benchd_cpu_peak_flops_per_second."))
    layout.add(prom_panel("Capacity under SLO and validity (latest run)", "reqps", [
        (f"benchd_capacity_requests_per_second{{{SEL}}}", "capacity {{workload}}"),
        (f"benchd_run_valid{{{SEL}}}", "{{workload}} valid (1) or not (0)"),
    ], description="A capacity search's figure: the highest request rate whose stage met the SLO's stage objectives. "
                   "A run is valid when every stage met its validity rules (dispatch lag, rate sent, duration, "
                   "requests, errors); an invalid run is never a baseline."))
    layout.add(prom_panel("Every GPU: output tok/s ÷ its siblings' median (latest run)", "percentunit", [
        (f'benchd_gpu_relative_throughput{{{NODE}, workload=~"$workload"}}', "{{hostname}} {{workload}} GPU {{gpu}}"),
        (f'benchd_gpu_outlier{{{NODE}, workload=~"$workload"}}',
         "{{hostname}} {{workload}} GPU {{gpu}} slow (1) or not (0)"),
    ], description="Runs with placement every_gpu: each GPU against the median of the others; a GPU marked slow is "
                   "slower beyond the threshold with the bootstrap interval agreeing (alert BenchdGPUOutlier)."))
    matrix = ("The latest matrix of each workload (POST /matrices), a series per variant: its values name it "
              "(quantization=int8_weight_only,attn_implementation=eager); its report page has every metric.")
    layout.add(prom_panel("Matrix variants: output tok/s (latest matrix)", "none", [
        (f'benchd_matrix_variant_output_tokens_per_second{{{NODE}, workload=~"$workload"}}',
         "{{workload}} {{variant}}"),
    ], description=matrix))
    layout.add(prom_panel("Matrix variants against the baseline (latest matrix)", "percentunit", [
        (f'benchd_matrix_variant_relative_change{{{NODE}, workload=~"$workload", '
         'metric=~"output_tokens_per_s|ttft_s.p50|itl_s.p50|weight_bytes"}', "{{variant}}: {{metric}} change"),
        (f'benchd_matrix_variant_token_agreement_ratio{{{NODE}, workload=~"$workload"}}',
         "{{variant}}: greedy tokens = baseline"),
    ], description=matrix + " Change: (variant − baseline) / baseline; greedy tokens: the share identical to the "
                   "baseline's for the same prompts."))
    layout.add(prom_panel("GPU utilization", "percentunit", [
        (f"benchd_gpu_utilization_ratio{{{GPU}}}", "{{hostname}} GPU {{gpu}} {{name}}"),
    ]))
    layout.add(prom_panel("GPU memory", "bytes", [
        (f"benchd_gpu_memory_used_bytes{{{GPU}}}", "used {{hostname}} {{gpu}}"),
        (f"benchd_gpu_memory_total_bytes{{{GPU}}}", "total {{hostname}} {{gpu}}"),
    ]))
    layout.add(prom_panel("GPU power", "watt", [
        (f"benchd_gpu_power_watts{{{GPU}}}", "draw {{hostname}} {{gpu}}"),
        (f"benchd_gpu_power_limit_watts{{{GPU}}}", "limit {{hostname}} {{gpu}}"),
    ]))
    layout.add(prom_panel("GPU temperature", "celsius", [
        (f"benchd_gpu_temperature_celsius{{{GPU}}}", "{{hostname}} GPU {{gpu}}"),
    ]))
    layout.add(prom_panel("GPU clocks", "hertz", [
        (f"benchd_gpu_sm_clock_hertz{{{GPU}}}", "SM {{hostname}} {{gpu}}"),
        (f"benchd_gpu_memory_clock_hertz{{{GPU}}}", "memory {{hostname}} {{gpu}}"),
    ]))
    layout.add(prom_panel("GPU clock events: share of time, and the SM clock of its maximum", "percentunit", [
        (f"max by (hostname, gpu, clock_event) (avg_over_time(benchd_gpu_clock_event{{{GPU}}}[$__rate_interval]))",
         "{{hostname}} {{gpu}} {{clock_event}}"),
        (f"max by (hostname, gpu) (benchd_gpu_sm_clock_hertz{{{GPU}}}) / max by (hostname, gpu) "
         f"(benchd_gpu_max_sm_clock_hertz{{{GPU}}})", "SM clock of max {{hostname}} {{gpu}}"),
    ], description="The share of the sampler's reads under each clock event (DCGM exporter's names). hw_slowdown, "
                   "sw_thermal, hw_thermal and hw_power_brake cut the clocks whatever the work: a stage slowed by "
                   "them beyond BENCHD_VALIDITY__MAX_SLOWDOWN_SHARE is INVALID: throttled. power_cap is a heavy "
                   "workload's own state, shown, not judged; gpu_idle is a GPU with nothing to do."))
    layout.add(prom_panel("GPU clock events: onsets", "none", [
        (f"sum by (hostname, gpu, clock_event) (increase(benchd_gpu_clock_events_total{{{GPU}}}[$__rate_interval]))",
         "{{hostname}} {{gpu}} {{clock_event}}"),
    ], description="Times each clock event began in each interval (DCGM_EXP_CLOCK_EVENTS_TOTAL's count, at the "
                   "sampler's resolution)."))
    layout.add(prom_panel("Host CPU", "percentunit", [
        (f"benchd_host_cpu_utilization_ratio{{{NODE}}}", "all cores {{hostname}}"),
        (f"benchd_host_process_cpu_utilization_ratio{{{NODE}}}", "benchd {{process}} {{hostname}}"),
    ], description="A benchd process's share is of the cores it may use (its affinity)."))
    layout.add(prom_panel("benchd processes: CPU cores busy", "none", [
        (f"sum by (hostname, process) (rate(benchd_host_process_cpu_seconds_total{{{NODE}}}[$__rate_interval]))",
         "{{process}} {{hostname}}"),
        (f"max by (hostname, process) (benchd_host_process_cpu_cores{{{NODE}}})", "may use: {{process}} {{hostname}}"),
    ], description="CPU seconds per second, user and kernel together: 2 is two cores kept busy."))
    layout.add(prom_panel("Host memory", "bytes", [
        (f"benchd_host_memory_used_bytes{{{NODE}}}", "used {{hostname}}"),
        (f"benchd_host_memory_total_bytes{{{NODE}}}", "total {{hostname}}"),
    ]))
    for panel in gpu_health():
        layout.add(panel)
    layout.add(prom_panel("Change points: the latest of each figure (history)", "percentunit", CHANGE_POINTS,
                          description="Each workload's series is analysed after every run (GET /changes, "
                                      "docs/guides/history.md): the latest change point of each figure on each GPU "
                                      "model, (after − before) / before of its two segments, and its direction (1: "
                                      "for the worse, alert BenchdChangePoint; -1: for the better). The annotations "
                                      "mark each at the time of the first run of its new segment."))
    return {
        "uid": "benchd-live", "title": "benchd — live", "tags": ["benchd"], "editable": False,
        "schemaVersion": 39, "version": 1, "refresh": "10s", "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [
            NODE_VARIABLE,
            variable("model", f"label_values(benchd_time_to_first_token_seconds_count{{{NODE}}}, model)", PROMETHEUS,
                     "model"),
            variable("workload", f'label_values(benchd_time_to_first_token_seconds_count{{{NODE}, model=~"$model"}}, '
                                 f'workload)', PROMETHEUS, "workload"),
            variable("gpu", f"label_values(benchd_gpu_utilization_ratio{{{NODE}}}, gpu)", PROMETHEUS, "GPU"),
        ]},
        "annotations": {"list": [{
            "name": "runs", "datasource": PROMETHEUS, "enable": True, "iconColor": "rgba(0, 211, 255, 1)",
            "expr": f"changes(benchd_runs_total{{{SEL}}}[1m]) > 0", "titleFormat": "run ended",
            "textFormat": "{{workload}}: {{status}}",
        }, CHANGE_POINT_ANNOTATION]},
        "links": [{"title": "fleet", "type": "link", "url": "/d/benchd-fleet"},
                  {"title": "history", "type": "link", "url": "/d/benchd-history"}],
        "panels": layout.panels,
    }


def gpu_health() -> list[dict]:
    """What a DCGM exporter user watches: XIDs, ECC, row remapping, PCIe and NVLink, the video engines, and whether
    benchd's own hardware reads are current."""
    by = "hostname, gpu"
    return [
        prom_panel("GPU health: XID errors by code", "none", [
            # A code's series appears at its first event; every codes' together ("all") is there from the start.
            (f"sum by ({by}, xid) (increase(benchd_gpu_xid_errors_total{{{GPU}}}[$__rate_interval])) or "
             f"label_replace(sum by ({by}) (increase(benchd_gpu_xid_events_total{{{GPU}}}[$__rate_interval])), "
             f'"xid", "all", "", "")', "{{hostname}} GPU {{gpu}} XID {{xid}}"),
            (f"benchd_gpu_last_xid_code{{{GPU}}}", "latest code {{hostname}} {{gpu}}"),
        ], description="Events in each interval, every code together (all: 0 on a healthy GPU) and by code "
                       "(NVIDIA's XID catalogue says what each means), and the latest code since benchd started "
                       "(0: none)."),
        prom_panel("GPU health: ECC errors", "none", [
            (f"sum by ({by}, error_type) (increase(benchd_gpu_ecc_volatile_errors_total{{{GPU}}}[$__rate_interval]))",
             "volatile {{error_type}} {{hostname}} {{gpu}}"),
            (f"max by ({by}, error_type) (benchd_gpu_ecc_aggregate_errors_total{{{GPU}}})",
             "lifetime {{error_type}} {{hostname}} {{gpu}}"),
        ], description="Volatile: new errors in each interval (since the driver loaded); lifetime: the GPU's total."),
        prom_panel("GPU health: row remapping", "none", [
            (f"max by ({by}, error_type) (benchd_gpu_remapped_rows_total{{{GPU}}})", "remapped {{error_type}} "
                                                                                     "{{hostname}} {{gpu}}"),
            (f"max by ({by}) (benchd_gpu_row_remap_pending{{{GPU}}})", "pending (reset needed) {{hostname}} {{gpu}}"),
            (f"max by ({by}) (benchd_gpu_row_remap_failure{{{GPU}}})", "failed (service needed) {{hostname}} {{gpu}}"),
        ]),
        prom_panel("GPU health: PCIe", "Bps", [
            (f"benchd_gpu_pcie_transmit_bytes_per_second{{{GPU}}}", "TX {{hostname}} {{gpu}}"),
            (f"benchd_gpu_pcie_receive_bytes_per_second{{{GPU}}}", "RX {{hostname}} {{gpu}}"),
            (f"sum by ({by}) (rate(benchd_gpu_pcie_replays_total{{{GPU}}}[$__rate_interval]))",
             "replays/s {{hostname}} {{gpu}}"),
        ], description="Replays are retried transfers: a count that keeps growing is a bad link."),
        prom_panel("GPU health: NVLink per link", "Bps", [
            (f"sum by ({by}, link) (rate(benchd_gpu_nvlink_transmit_bytes_total{{{GPU}}}[$__rate_interval]))",
             "TX {{hostname}} {{gpu}} link {{link}}"),
            (f"sum by ({by}, link) (rate(benchd_gpu_nvlink_receive_bytes_total{{{GPU}}}[$__rate_interval]))",
             "RX {{hostname}} {{gpu}} link {{link}}"),
        ]),
        prom_panel("GPU health: video encoder and decoder", "percentunit", [
            (f"benchd_gpu_encoder_utilization_ratio{{{GPU}}}", "encoder {{hostname}} {{gpu}}"),
            (f"benchd_gpu_decoder_utilization_ratio{{{GPU}}}", "decoder {{hostname}} {{gpu}}"),
        ]),
        prom_panel("Hardware sampler", "s", [
            (f"benchd_hardware_sample_age_seconds{{{NODE}}}", "snapshot age {{hostname}}"),
            (f"benchd_hardware_sample_duration_seconds{{{NODE}}}", "read took {{hostname}}"),
            (f"benchd_hardware_sampler_stalled{{{NODE}}}", "stalled (1) {{hostname}}"),
        ], description="Stalled: no read has completed for the stale threshold (a hung NVML call); the hardware "
                       "series leave /metrics meanwhile."),
    ]


# ---- fleet ---------------------------------------------------------------------------------------

FLEET_NODES = 'cluster=~"$cluster", hostname=~"$node"'
FLEET = f'{FLEET_NODES}, workload=~"$workload"'


def fleet_figures(window: str) -> list[tuple[str, str, str]]:
    """(column, unit, expression) per node and GPU for one workload over the window: the same workload side by side
    on every GPU of the fleet."""
    def quantile(q: str, metric: str) -> str:
        return (f"histogram_quantile({q}, sum by (le, hostname, gpu) ({'increase' if window == '$__range' else 'rate'}"
                f"({metric}_bucket{{{FLEET}}}[{window}])))")

    def latest(metric: str) -> str:
        return f"max by (hostname, gpu) (last_over_time({metric}{{{FLEET}}}[{window}]))"

    return [
        ("TTFT p99", "s", quantile("0.99", "benchd_time_to_first_token_seconds")),
        ("ITL p50", "s", quantile("0.5", "benchd_inter_token_latency_seconds")),
        ("output tok/s", "none", latest("benchd_run_output_tokens_per_second")),
        ("J/token", "J", latest("benchd_run_energy_per_output_token_joules")),
        ("relative throughput", "percentunit", latest("benchd_gpu_relative_throughput")),
        ("slow GPU", "none", latest("benchd_gpu_outlier")),
    ]


FLEET_HEALTH = [
    ("XIDs", "none", f"sum by (hostname, gpu) (increase(benchd_gpu_xid_events_total{{{FLEET_NODES}}}[$__range]))"),
    ("uncorrectable ECC", "none", f"sum by (hostname, gpu) (increase(benchd_gpu_ecc_volatile_errors_total"
                                  f"{{{FLEET_NODES}, error_type=\"uncorrectable\"}}[$__range]))"),
    ("row remap pending", "none", f"max by (hostname, gpu) (benchd_gpu_row_remap_pending{{{FLEET_NODES}}})"),
    ("row remap failed", "none", f"max by (hostname, gpu) (benchd_gpu_row_remap_failure{{{FLEET_NODES}}})"),
    ("throttled", "none", f'max by (hostname, gpu) (benchd_gpu_clock_event{{{FLEET_NODES}, '
                          f'clock_event=~"{SLOWDOWN}"}})'),
    # The node's sampler, on each of its GPUs' rows.
    ("sampler stalled", "none", f"max by (hostname, gpu) (benchd_gpu_info{{{FLEET_NODES}}}) * on (hostname) "
                                f"group_left () max by (hostname) (benchd_hardware_sampler_stalled{{{FLEET_NODES}}})"),
]


def table_panel(title: str, columns: list[tuple[str, str, str]], description: str = "",
                red_at: dict[str, float] | None = None) -> dict:
    """One row per node and GPU: instant queries merged on their labels, a column per query."""
    overrides = [{"matcher": {"id": "byName", "options": f"Value #{chr(65 + i)}"},
                  "properties": [{"id": "displayName", "value": name}, {"id": "unit", "value": unit}] + (
                      [{"id": "custom.cellOptions", "value": {"type": "color-background"}},
                       {"id": "thresholds", "value": {"mode": "absolute", "steps": [
                           {"color": "green", "value": None}, {"color": "red", "value": red_at[name]}]}}]
                      if red_at and name in red_at else [])}
                 for i, (name, unit, _) in enumerate(columns)]
    return {
        "type": "table", "title": title, "description": description, "datasource": PROMETHEUS,
        "fieldConfig": {"defaults": {"unit": "none"}, "overrides": overrides},
        "options": {"showHeader": True, "sortBy": [{"displayName": "hostname"}]},
        "transformations": [{"id": "merge", "options": {}},
                            {"id": "organize", "options": {"excludeByName": {"Time": True}}}],
        "targets": [{"refId": chr(65 + i), "datasource": PROMETHEUS, "expr": expr, "format": "table",
                     "instant": True, "range": False, "exemplar": False, "legendFormat": ""}
                    for i, (_, _, expr) in enumerate(columns)],
    }


# Each node's place among the nodes of its GPU model (benchd_fleet_node_*: each daemon reads its own from the shared
# store and exports it, docs/guides/fleet.md): a row per node and GPU model.
def place(metric: str, figure: str | None = None) -> str:
    selector = FLEET + (f', figure="{figure}"' if figure else "")
    return f"max by (hostname, device) ({metric}{{{selector}}})"


FLEET_PLACE = [
    ("tok/s per GPU", "none", place("benchd_fleet_node_value", "output_tokens_per_s")),
    ("÷ the fleet's median", "none", place("benchd_fleet_node_relative_ratio", "output_tokens_per_s")),
    ("interval low", "none", place("benchd_fleet_node_interval_low_ratio", "output_tokens_per_s")),
    ("interval high", "none", place("benchd_fleet_node_interval_high_ratio", "output_tokens_per_s")),
    ("ITL p50 ÷ the fleet's", "none", place("benchd_fleet_node_relative_ratio", "itl_s.p50")),
    ("outlier", "none", place("benchd_fleet_node_outlier")),
    ("J / good token", "J", place("benchd_fleet_node_energy_per_good_token_joules")),
    ("cost / M good tokens", "none", place("benchd_fleet_node_cost_per_million_good_tokens")),
    ("nodes", "none", place("benchd_fleet_nodes")),
]
# The distribution across the nodes of a GPU model: deliberately over the nodes (the one place the fleet's
# dashboard merges them), each node's value the median of its newest runs.
ACROSS = [(f'quantile by (device) ({q}, benchd_fleet_node_value{{{FLEET}, figure="output_tokens_per_s"}})',
           f"{name} {{{{device}}}}") for q, name in (("0.1", "p10"), ("0.5", "median"), ("0.9", "p90"))]


def fleet() -> dict:
    layout = Layout()
    layout.add(table_panel(
        "$workload: each node against the other nodes of its GPU model", FLEET_PLACE,
        "From the shared store: each node's newest runs (at most 20) against the median of the other nodes of its "
        "GPU model, decided by the deciding rule (interval: output tok/s ÷ the others' median at each look's "
        "confidence); an outlier is decided worse by more than the effect (10 %) in output tok/s or ITL p50. "
        "GET /fleet?format=html names what sets an outlier apart.", red_at={"outlier": 1}), width=24)
    layout.add(prom_panel("Output tok/s per GPU across the nodes", "none", [
        *ACROSS, (place("benchd_fleet_node_value", "output_tokens_per_s"), "{{hostname}} {{device}}")],
        description="Each node's value (the median of its newest runs) and the distribution across the nodes of "
                    "each GPU model (p10, median, p90 over the nodes)."))
    layout.add(prom_panel("Each node ÷ the fleet's median", "none", [
        (place("benchd_fleet_node_relative_ratio", "output_tokens_per_s"), "tok/s {{hostname}} {{device}}"),
        (place("benchd_fleet_node_interval_high_ratio", "output_tokens_per_s"), "high {{hostname}} {{device}}"),
    ], description="Below 1 / 1.1 with its interval's high end there too: decided slower by more than 10 %."))
    layout.add(prom_panel("What a good token costs", "none", [
        (place("benchd_fleet_node_cost_per_million_good_tokens"), "per million {{hostname}} {{device}}"),
    ], description="Each node's newest runs: device-hours and kWh at the daemon's prices (BENCHD_PRICES__*) per "
                   "million output tokens of requests meeting the SLO."))
    layout.add(prom_panel("Energy per good token", "J", [
        (place("benchd_fleet_node_energy_per_good_token_joules"), "{{hostname}} {{device}}"),
    ]))
    layout.add(table_panel(
        "$workload on every node and GPU", fleet_figures("$__range"),
        "Over the dashboard's time range: latency percentiles from the histograms, the latest run's output tok/s "
        "and energy per token, and the slow-GPU verdict of the latest every-GPU run (relative throughput: the GPU's "
        "output tok/s over its siblings' median).", red_at={"slow GPU": 1}), width=24)
    legend = "{{hostname}} GPU {{gpu}}"
    for name, unit, expr in fleet_figures("$__rate_interval"):
        layout.add(prom_panel(name, unit, [(expr, legend)]))
    layout.add(table_panel("GPU health", FLEET_HEALTH, "Events over the dashboard's time range and states now; "
                           "any red cell needs a look (the live dashboard has the detail).",
                           red_at={name: 1 for name, _, _ in FLEET_HEALTH}), width=24)
    return {
        "uid": "benchd-fleet", "title": "benchd — fleet", "tags": ["benchd"], "editable": False,
        "schemaVersion": 39, "version": 1, "refresh": "1m", "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [
            variable("cluster", "label_values(benchd_hardware_sampler_stalled, cluster)", PROMETHEUS, "cluster",
                     description="The cluster label your Prometheus adds to benchd's series (benchd sets none: the "
                                 "chart's serviceMonitor.relabelings, or a scrape config's relabel_configs; see "
                                 "docs/guides/telemetry.md, labels). Empty when none does: every node shows."),
            variable("node", 'label_values(benchd_hardware_sampler_stalled{cluster=~"$cluster"}, hostname)',
                     PROMETHEUS, "node"),
            variable("workload", 'label_values(benchd_time_to_first_token_seconds_count{cluster=~"$cluster", '
                                 'hostname=~"$node"}, workload)', PROMETHEUS, "workload", every=False),
        ]},
        "annotations": {"list": []},
        "links": [{"title": "live", "type": "link", "url": "/d/benchd-live"},
                  {"title": "history", "type": "link", "url": "/d/benchd-history"}],
        "panels": layout.panels,
    }


# ---- history -------------------------------------------------------------------------------------

FILTER = "r.node IN ($node) AND r.model IN ($model) AND r.workload IN ($workload)"
LEGEND = ("r.node || ' · ' || r.model || ' · ' || r.workload || ' · ' || "
          "COALESCE(r.label, r.run_metadata->>'transformers_version')")


def series_sql(value: str, joined: bool = True) -> str:
    # gpu = '': the whole run (a run on every GPU keeps a row per GPU beside it)
    source = ("runs r JOIN run_stages s ON s.run_id = r.id AND s.stage_index = 0 AND s.gpu = ''" if joined
              else "runs r")
    return (f"SELECT r.finished_at AS \"time\", {LEGEND} AS metric, {value} AS value\n"
            f"FROM {source}\n"
            f"WHERE $__timeFilter(r.finished_at) AND r.status = 'succeeded' AND {FILTER} AND {value} IS NOT NULL\n"
            f"ORDER BY 1")


def sql_panel(title: str, unit: str, sql: str, kind: str = "timeseries", description: str = "") -> dict:
    panel = {
        "type": kind, "title": title, "description": description, "datasource": POSTGRES,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": "A", "datasource": POSTGRES, "editorMode": "code", "rawQuery": True, "rawSql": sql,
                     "format": "time_series" if kind == "timeseries" else "table"}],
    }
    if kind == "timeseries":
        panel["fieldConfig"]["defaults"]["custom"] = {"drawStyle": "line", "showPoints": "always"}
    return panel


RUNS_SQL = """SELECT r.created_at AS "time", r.id, r.status, r.node, r.pod, r.workload, r.model, r.engine, r.label,
       s.ttft_p99_s AS ttft_p99_s, s.itl_p50_s AS itl_p50_s, s.output_tokens_per_s AS tokens_per_s,
       r.energy_per_token_j AS joules_per_token, r.run_metadata->>'trace_id' AS trace_id
FROM runs r LEFT JOIN run_stages s ON s.run_id = r.id AND s.stage_index = 0
WHERE $__timeFilter(r.created_at) AND r.node IN ($node) AND r.model IN ($model) AND r.workload IN ($workload)
ORDER BY r.created_at DESC
LIMIT 500"""

ANNOTATIONS_SQL = """SELECT extract(epoch FROM r.started_at) * 1000 AS "time",
       extract(epoch FROM r.finished_at) * 1000 AS timeend,
       r.workload || ' (' || r.engine || ', ' || r.model || ') on ' || r.node || ': ' || r.status AS text,
       r.status AS tags
FROM runs r
WHERE $__timeFilter(r.started_at) AND r.finished_at IS NOT NULL AND r.node IN ($node) AND r.model IN ($model)
  AND r.workload IN ($workload)"""


def history() -> dict:
    layout = Layout()
    layout.add(sql_panel("TTFT p99 per run", "s", series_sql("s.ttft_p99_s"),
                         description="One point per succeeded run (first stage), by node · model · workload · "
                                     "version (the run's label, else the transformers version)."))
    layout.add(sql_panel("ITL p50 per run", "s", series_sql("s.itl_p50_s")))
    layout.add(sql_panel("Output tokens/s per run", "none", series_sql("s.output_tokens_per_s")))
    layout.add(sql_panel("Energy per output token per run", "J", series_sql("r.energy_per_token_j", joined=False)))
    runs = sql_panel("Runs", "none", RUNS_SQL, kind="table", description="Newest first; the trace id opens the "
                     "run's trace (its span and every request's) in Tempo.")
    runs["fieldConfig"]["overrides"] = [
        {"matcher": {"id": "byName", "options": "trace_id"}, "properties": [{"id": "links", "value": [{
            "title": "Open the run's trace", "url": "",
            "internal": {"datasourceUid": "tempo", "datasourceName": "Tempo",
                         "query": {"query": "${__value.raw}", "queryType": "traceql"}}}]}]},
        *({"matcher": {"id": "byName", "options": name}, "properties": [{"id": "unit", "value": "s"}]}
          for name in ("ttft_p99_s", "itl_p50_s")),
    ]
    layout.add(runs, width=24)
    return {
        "uid": "benchd-history", "title": "benchd — run history", "tags": ["benchd"], "editable": False,
        "schemaVersion": 39, "version": 1, "refresh": "1m", "time": {"from": "now-7d", "to": "now"},
        "templating": {"list": [
            variable("node", "SELECT DISTINCT node FROM runs WHERE node IS NOT NULL ORDER BY 1", POSTGRES, "node"),
            variable("model", "SELECT DISTINCT model FROM runs WHERE node IN ($node) ORDER BY 1", POSTGRES, "model"),
            variable("workload", "SELECT DISTINCT workload FROM runs WHERE node IN ($node) AND model IN ($model) "
                                 "ORDER BY 1", POSTGRES, "workload"),
        ]},
        "annotations": {"list": [{"name": "runs", "datasource": POSTGRES, "enable": True,
                                  "iconColor": "rgba(255, 152, 48, 1)", "rawQuery": ANNOTATIONS_SQL,
                                  "target": {"refId": "Anno", "rawSql": ANNOTATIONS_SQL, "format": "table",
                                             "rawQuery": True, "editorMode": "code"}}]},
        "links": [{"title": "live", "type": "link", "url": "/d/benchd-live"},
                  {"title": "fleet", "type": "link", "url": "/d/benchd-fleet"}],
        "panels": layout.panels,
    }


DASHBOARDS = {"benchd-live.json": live, "benchd-fleet.json": fleet, "benchd-history.json": history}


def render(build) -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    for name, build in DASHBOARDS.items():
        (OUT / name).write_text(render(build))
        print(f"wrote {OUT / name}")
