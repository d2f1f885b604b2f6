"""The store's tables at the newest migration: what the code reads and writes (migrations/ gets a database there)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from benchd.spec import LABEL_MAX, MODEL_MAX, NAME_MAX  # what validation admits fits these columns

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)


metadata = sa.MetaData()

runs = sa.Table(
    "runs", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("status", sa.String(16), nullable=False, index=True),
    sa.Column("workload", sa.String(NAME_MAX), nullable=False, index=True),
    sa.Column("model", sa.String(MODEL_MAX), nullable=False, index=True),
    sa.Column("engine", sa.String(32), nullable=False),
    sa.Column("label", sa.String(LABEL_MAX)),
    sa.Column("schedule", sa.String(NAME_MAX), index=True),
    sa.Column("spec", JSON, nullable=False),
    sa.Column("summary", JSON),  # list of stage summaries
    sa.Column("run_metadata", JSON),
    sa.Column("hardware", JSON),  # the run's hardware summary
    sa.Column("timeline", JSON),  # engine load and hardware samples over the run (report pages)
    sa.Column("parts", JSON),  # a run on every GPU: each GPU's stage summaries and hardware, and the verdicts
    sa.Column("quality", JSON),  # what it generated and its probe's figures (measure/quality.py: QualitySummary)
    sa.Column("probe", JSON),  # the probe position by position (protocol/probe.py): what comparisons read
    sa.Column("energy_per_token_j", sa.Float),
    sa.Column("valid", sa.Boolean),  # the run's verdict (outcome.RunResult.valid); NULL: a timed run, or older
    sa.Column("capacity_requests_per_s", sa.Float),  # a capacity search's figure
    sa.Column("good_tokens", JSON),  # its good tokens, devices, window and energy (measure/cost.py: GoodTokens)
    sa.Column("error", sa.Text),
    sa.Column("error_stage", sa.String(32)),  # where a failed run failed: queue, load, start, run, store…
    sa.Column("node", sa.String(253), index=True),  # the node (host) that ran it: daemons may share a database
    sa.Column("pod", sa.String(253)),
    sa.Column("matrix_id", sa.String(32), index=True),  # the matrix it is a variant's run of
    # Its place in the order the store took runs (one more each insert: operations.py), what listings and histories
    # are ordered by; created_at is a clock's, which can jump.
    sa.Column("seq", sa.BigInteger, unique=True),
    sa.Column("created_at", TIMESTAMP, nullable=False, index=True),
    sa.Column("started_at", TIMESTAMP),
    sa.Column("finished_at", TIMESTAMP),
)

# One row per stage with the figures dashboards plot, so SQL needs no JSON paths.
run_stages = sa.Table(
    "run_stages", metadata,
    sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("stage_index", sa.Integer, primary_key=True),
    sa.Column("gpu", sa.String(32), primary_key=True, server_default=""),  # "": the whole run
    sa.Column("stage", sa.String(100), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("requests", sa.Integer, nullable=False),
    sa.Column("errors", sa.Integer, nullable=False),
    sa.Column("duration_s", sa.Float, nullable=False),
    sa.Column("output_tokens_per_s", sa.Float, nullable=False),
    sa.Column("requests_per_s", sa.Float, nullable=False),
    sa.Column("ttft_p50_s", sa.Float),
    sa.Column("ttft_p99_s", sa.Float),
    sa.Column("itl_p50_s", sa.Float),
    sa.Column("itl_p99_s", sa.Float),
    sa.Column("tpot_p50_s", sa.Float),
    sa.Column("e2e_p99_s", sa.Float),
    sa.Column("kv_cache_occupancy_peak", sa.Float),
)

# One row per request. Stamps are seconds from the stage's start; arrival_s holds every arrival (a token or a
# stream chunk) and arrival_tokens how many tokens each carried, so every latency can be derived again exactly.
# The derived columns are kept for SQL.
requests = sa.Table(
    "requests", metadata,
    sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("stage_index", sa.Integer, primary_key=True),
    sa.Column("gpu", sa.String(32), primary_key=True, server_default=""),  # the GPU of a run on every GPU
    sa.Column("index", sa.Integer, primary_key=True),
    sa.Column("stage", sa.String(100)),
    sa.Column("request_id", sa.String(64)),
    sa.Column("warmup", sa.Boolean, nullable=False),
    sa.Column("prompt_tokens", sa.Integer),
    sa.Column("max_new_tokens", sa.Integer),
    sa.Column("output_tokens", sa.Integer),
    sa.Column("scheduled_s", sa.Float),
    sa.Column("submitted_s", sa.Float),
    sa.Column("admitted_s", sa.Float),
    sa.Column("finished_s", sa.Float),
    sa.Column("dispatch_lag_s", sa.Float),
    sa.Column("queue_s", sa.Float),
    sa.Column("ttft_s", sa.Float),
    sa.Column("tpot_s", sa.Float),
    sa.Column("e2e_s", sa.Float),
    sa.Column("error", sa.Text),
    sa.Column("trace_id", sa.String(32)),
    sa.Column("arrival_s", JSON),
    sa.Column("arrival_tokens", JSON),
    sa.Column("token_ids", JSON),  # what the request generated: a matrix compares variants' greedy tokens
    sa.Column("logprobs", JSON),  # their log-probabilities, where the engine gave them (measure/quality.py)
    sa.Column("counts", JSON),  # a server's request: its tokens as the server and as benchd counted them
)

# Timed runs (training steps, kernels): every repetition, warm-up flagged, so nothing measured is lost.
timings = sa.Table(
    "timings", metadata,
    sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("stage_index", sa.Integer, primary_key=True),
    sa.Column("series", sa.String(32), primary_key=True),
    sa.Column("index", sa.Integer, primary_key=True),
    sa.Column("warmup", sa.Boolean, nullable=False),
    sa.Column("seconds", sa.Float, nullable=False),
)

schedules = sa.Table(
    "schedules", metadata,
    sa.Column("name", sa.String(NAME_MAX), primary_key=True),
    sa.Column("spec", JSON, nullable=False),
    sa.Column("interval_s", sa.Float, nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False),
    sa.Column("created_at", TIMESTAMP, nullable=False),
)

baselines = sa.Table(
    "baselines", metadata,
    sa.Column("workload", sa.String(NAME_MAX), primary_key=True),
    sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("set_at", TIMESTAMP, nullable=False),
)

# A matrix: its document (spec, matrix, repeats, baseline), its variants ({index, label, values, spec}), its runs in
# the order they execute ({run_id, round, variant}), and the comparison made once every run has ended.
matrices = sa.Table(
    "matrices", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("status", sa.String(16), nullable=False, index=True),
    sa.Column("workload", sa.String(NAME_MAX), nullable=False, index=True),
    sa.Column("document", JSON, nullable=False),
    sa.Column("variants", JSON, nullable=False),
    sa.Column("runs", JSON, nullable=False),
    sa.Column("baseline", sa.Integer, nullable=False),
    sa.Column("comparison", JSON),
    sa.Column("error", sa.Text),
    sa.Column("node", sa.String(253), index=True),
    sa.Column("seq", sa.BigInteger, unique=True),  # as a run's
    sa.Column("created_at", TIMESTAMP, nullable=False, index=True),
    sa.Column("started_at", TIMESTAMP),
    sa.Column("finished_at", TIMESTAMP),
)

# Change points found in a workload's series (measure/history.py): one row each, kept when a later analysis no longer
# finds it (active false, withdrawn_at), so that what was reported stays explained; details hold its segments,
# interval and the stack between them, confirmation the interleaved matrix that checked it.
change_points = sa.Table(
    "change_points", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("workload", sa.String(NAME_MAX), nullable=False, index=True),
    sa.Column("device", sa.String(253), nullable=False),  # the GPU's model (the run metadata's device_name)
    sa.Column("node", sa.String(253), nullable=False),
    sa.Column("figure", sa.String(32), nullable=False),
    sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("at", TIMESTAMP, nullable=False, index=True),  # the first run of the new segment's creation
    sa.Column("direction", sa.String(8), nullable=False),  # worse | better
    sa.Column("relative_change", sa.Float, nullable=False),
    sa.Column("p_value", sa.Float, nullable=False),
    sa.Column("active", sa.Boolean, nullable=False, index=True),
    sa.Column("details", JSON, nullable=False),
    sa.Column("confirmation", JSON),
    sa.Column("matrix_id", sa.String(32), index=True),  # the confirmation's matrix
    sa.Column("detected_at", TIMESTAMP, nullable=False),
    sa.Column("withdrawn_at", TIMESTAMP),
)
# The fleet's view, kept as runs end (store/fleet.py, measure/fleet.py): each node's newest runs of each workload on
# each GPU model, at most FLEET_RUNS, with the figures the fleet compares, its good tokens and the stack that
# explains a node apart. A node writes only its own rows; a fleet read is O(nodes × FLEET_RUNS) rows of a workload,
# whatever the history holds.
fleet_runs = sa.Table(
    "fleet_runs", metadata,
    sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("workload", sa.String(NAME_MAX), nullable=False),
    sa.Column("device", sa.String(253), nullable=False),  # the GPU's model (the run metadata's device_name)
    sa.Column("node", sa.String(253), nullable=False),
    sa.Column("created_at", TIMESTAMP, nullable=False),
    sa.Column("valid", sa.Boolean),
    sa.Column("figures", JSON, nullable=False),  # figure name → value (measure/fleet.py, FLEET_FIGURES)
    sa.Column("good_output_tokens", sa.Integer),
    sa.Column("device_seconds", sa.Float),
    sa.Column("energy_j", sa.Float),
    sa.Column("state", JSON, nullable=False),  # clock state and the host's load over the run
    sa.Column("stack", JSON, nullable=False),  # measure/stack.py's stack_of: what explains a node apart
)
sa.Index("ix_fleet_runs_workload_device_node", fleet_runs.c.workload, fleet_runs.c.device, fleet_runs.c.node,
         fleet_runs.c.created_at)
# A workload's history is read by workload and place: every run of the window, newest first.
sa.Index("ix_runs_workload_created_at", runs.c.workload, runs.c.created_at)
sa.Index("ix_runs_workload_seq", runs.c.workload, runs.c.seq)
