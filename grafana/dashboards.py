"""Builds benchd's Grafana dashboards (live: Prometheus; history: PostgreSQL) as JSON. Edit here, then run

    python grafana/dashboards.py

to rewrite grafana/dashboards/*.json (a test checks that the committed files are what this writes).
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).parent / "dashboards"
PROMETHEUS = {"type": "prometheus", "uid": "prometheus"}
POSTGRES = {"type": "grafana-postgresql-datasource", "uid": "benchd-postgres"}
SEL = 'model=~"$model", workload=~"$workload"'
GPU = 'gpu=~"$gpu"'


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
    return [(f"histogram_quantile({q}, sum by (le, model, workload) (rate({metric}_bucket{{{SEL}}}"
             f"[$__rate_interval])))", f"p{p} {{{{workload}}}}") for q, p in (("0.5", 50), ("0.95", 95), ("0.99", 99))]


def variable(name: str, query: str, datasource: dict, label: str) -> dict:
    return {"name": name, "label": label, "type": "query", "datasource": datasource,
            "query": query if datasource is POSTGRES else {"query": query, "refId": name},
            "definition": query, "refresh": 2, "includeAll": True, "multi": True, "sort": 1,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            **({"allValue": ".*"} if datasource is PROMETHEUS else {})}


def live() -> dict:
    layout = Layout()
    latency = "Per request from its scheduled time; exemplars link each tail bucket to the request's trace."
    layout.add(prom_panel("Time to first token", "s", quantiles("benchd_time_to_first_token_seconds"), True, latency))
    layout.add(prom_panel("Inter-token latency (per token)", "s", quantiles("benchd_inter_token_latency_seconds"),
                          True, "A chunk of k tokens counts as k equal gaps."))
    layout.add(prom_panel("Time per output token", "s", quantiles("benchd_time_per_output_token_seconds"), True))
    layout.add(prom_panel("End-to-end latency", "s", quantiles("benchd_request_duration_seconds"), True, latency))
    layout.add(prom_panel("Output throughput", "none", [
        (f"sum by (model, workload) (benchd_run_output_tokens_per_second{{{SEL}}})", "run {{workload}} tok/s"),
        (f"sum by (model, workload) (rate(benchd_generation_tokens_total{{{SEL}}}[$__rate_interval]))",
         "generated {{workload}} tok/s"),
    ]))
    layout.add(prom_panel("Requests running and waiting", "none", [
        (f"sum by (workload) (benchd_requests_running{{{SEL}}})", "running {{workload}}"),
        (f"sum by (workload) (benchd_requests_waiting{{{SEL}}})", "waiting {{workload}}"),
    ]))
    layout.add(prom_panel("KV-cache occupancy", "percentunit", [
        (f"max by (workload) (benchd_kv_cache_usage_ratio{{{SEL}}})", "{{workload}}"),
    ]))
    layout.add(prom_panel("Dispatch lag (benchd's own lateness)", "s", [
        (f"histogram_quantile(0.99, sum by (le, workload) (rate(benchd_dispatch_lag_seconds_bucket{{{SEL}}}"
         f"[$__rate_interval])))", "p99 {{workload}}"),
    ]))
    layout.add(prom_panel("Finished requests by outcome", "reqps", [
        (f"sum by (outcome) (rate(benchd_requests_total{{{SEL}}}[$__rate_interval]))", "{{outcome}}"),
    ]))
    layout.add(prom_panel("Energy per output token (latest run)", "J", [
        (f"benchd_run_energy_per_output_token_joules{{{SEL}}}", "{{workload}}"),
    ]))
    layout.add(prom_panel("Capacity under SLO and validity (latest run)", "reqps", [
        (f"benchd_capacity_requests_per_second{{{SEL}}}", "capacity {{workload}}"),
        (f"benchd_run_valid{{{SEL}}}", "{{workload}} valid (1) or not (0)"),
    ], description="A capacity search's figure: the highest request rate whose stage met the SLO's stage objectives. "
                   "A run is valid when every stage met its validity rules (dispatch lag, rate sent, duration, "
                   "requests, errors); an invalid run is never a baseline."))
    layout.add(prom_panel("Every GPU: output tok/s ÷ its siblings' median (latest run)", "percentunit", [
        ('benchd_gpu_relative_throughput{workload=~"$workload"}', "{{workload}} GPU {{gpu}}"),
        ('benchd_gpu_outlier{workload=~"$workload"}', "{{workload}} GPU {{gpu}} slow (1) or not (0)"),
    ], description="Runs with placement every_gpu: each GPU against the median of the others; a GPU marked slow is "
                   "slower beyond the threshold with the bootstrap interval agreeing (alert BenchdGPUOutlier)."))
    layout.add(prom_panel("GPU utilization", "percentunit", [
        (f"benchd_gpu_utilization_ratio{{{GPU}}}", "GPU {{gpu}} {{name}}"),
    ]))
    layout.add(prom_panel("GPU memory", "bytes", [
        (f"benchd_gpu_memory_used_bytes{{{GPU}}}", "used {{gpu}}"),
        (f"benchd_gpu_memory_total_bytes{{{GPU}}}", "total {{gpu}}"),
    ]))
    layout.add(prom_panel("GPU power", "watt", [
        (f"benchd_gpu_power_watts{{{GPU}}}", "draw {{gpu}}"),
        (f"benchd_gpu_power_limit_watts{{{GPU}}}", "limit {{gpu}}"),
    ]))
    layout.add(prom_panel("GPU temperature", "celsius", [
        (f"benchd_gpu_temperature_celsius{{{GPU}}}", "GPU {{gpu}}"),
    ]))
    layout.add(prom_panel("GPU clocks", "hertz", [
        (f"benchd_gpu_sm_clock_hertz{{{GPU}}}", "SM {{gpu}}"),
        (f"benchd_gpu_memory_clock_hertz{{{GPU}}}", "memory {{gpu}}"),
    ]))
    layout.add(prom_panel("GPU clock events (throttling)", "none", [
        (f"max by (gpu, reason) (benchd_gpu_clock_throttle_reason{{{GPU}}})", "{{gpu}} {{reason}}"),
    ]))
    layout.add(prom_panel("Host CPU", "percentunit", [
        ("benchd_host_cpu_utilization_ratio", "all cores"),
        ("benchd_host_process_cpu_utilization_ratio", "benchd"),
    ]))
    layout.add(prom_panel("Host memory", "bytes", [
        ("benchd_host_memory_used_bytes", "used"),
        ("benchd_host_memory_total_bytes", "total"),
    ]))
    return {
        "uid": "benchd-live", "title": "benchd — live", "tags": ["benchd"], "editable": False,
        "schemaVersion": 39, "version": 1, "refresh": "10s", "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [
            variable("model", "label_values(benchd_time_to_first_token_seconds_count, model)", PROMETHEUS, "model"),
            variable("workload", 'label_values(benchd_time_to_first_token_seconds_count{model=~"$model"}, workload)',
                     PROMETHEUS, "workload"),
            variable("gpu", "label_values(benchd_gpu_utilization_ratio, gpu)", PROMETHEUS, "GPU"),
        ]},
        "annotations": {"list": [{
            "name": "runs", "datasource": PROMETHEUS, "enable": True, "iconColor": "rgba(0, 211, 255, 1)",
            "expr": f"changes(benchd_runs_total{{{SEL}}}[1m]) > 0", "titleFormat": "run ended",
            "textFormat": "{{workload}}: {{status}}",
        }]},
        "links": [{"title": "history", "type": "link", "url": "/d/benchd-history"}],
        "panels": layout.panels,
    }


# ---- history -------------------------------------------------------------------------------------

FILTER = "r.model IN ($model) AND r.workload IN ($workload)"
LEGEND = "r.model || ' · ' || r.workload || ' · ' || COALESCE(r.label, r.run_metadata->>'transformers_version')"


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


RUNS_SQL = """SELECT r.created_at AS "time", r.id, r.status, r.workload, r.model, r.engine, r.label,
       s.ttft_p99_s AS ttft_p99_s, s.itl_p50_s AS itl_p50_s, s.output_tokens_per_s AS tokens_per_s,
       r.energy_per_token_j AS joules_per_token, r.run_metadata->>'trace_id' AS trace_id
FROM runs r LEFT JOIN run_stages s ON s.run_id = r.id AND s.stage_index = 0
WHERE $__timeFilter(r.created_at) AND r.model IN ($model) AND r.workload IN ($workload)
ORDER BY r.created_at DESC
LIMIT 500"""

ANNOTATIONS_SQL = """SELECT extract(epoch FROM r.started_at) * 1000 AS "time",
       extract(epoch FROM r.finished_at) * 1000 AS timeend,
       r.workload || ' (' || r.engine || ', ' || r.model || '): ' || r.status AS text, r.status AS tags
FROM runs r
WHERE $__timeFilter(r.started_at) AND r.finished_at IS NOT NULL AND r.model IN ($model) AND r.workload IN ($workload)"""


def history() -> dict:
    layout = Layout()
    layout.add(sql_panel("TTFT p99 per run", "s", series_sql("s.ttft_p99_s"),
                         description="One point per succeeded run (first stage), by model · workload · version "
                                     "(the run's label, else the transformers version)."))
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
            variable("model", "SELECT DISTINCT model FROM runs ORDER BY 1", POSTGRES, "model"),
            variable("workload", "SELECT DISTINCT workload FROM runs WHERE model IN ($model) ORDER BY 1", POSTGRES,
                     "workload"),
        ]},
        "annotations": {"list": [{"name": "runs", "datasource": POSTGRES, "enable": True,
                                  "iconColor": "rgba(255, 152, 48, 1)", "rawQuery": ANNOTATIONS_SQL,
                                  "target": {"refId": "Anno", "rawSql": ANNOTATIONS_SQL, "format": "table",
                                             "rawQuery": True, "editorMode": "code"}}]},
        "links": [{"title": "live", "type": "link", "url": "/d/benchd-live"}],
        "panels": layout.panels,
    }


DASHBOARDS = {"benchd-live.json": live, "benchd-history.json": history}


def render(build) -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    for name, build in DASHBOARDS.items():
        (OUT / name).write_text(render(build))
        print(f"wrote {OUT / name}")
