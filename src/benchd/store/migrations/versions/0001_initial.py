"""The schema benchd wrote before it had migrations (commit 28a5763): its databases are stamped at this revision."""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("workload", sa.String(100), nullable=False, index=True),
        sa.Column("model", sa.String(500), nullable=False, index=True),
        sa.Column("engine", sa.String(32), nullable=False),
        sa.Column("label", sa.String(200)),
        sa.Column("schedule", sa.String(100), index=True),
        sa.Column("spec", JSON, nullable=False),
        sa.Column("summary", JSON),
        sa.Column("run_metadata", JSON),
        sa.Column("hardware", JSON),
        sa.Column("energy_per_token_j", sa.Float),
        sa.Column("error", sa.Text),
        sa.Column("created_at", TIMESTAMP, nullable=False, index=True),
        sa.Column("started_at", TIMESTAMP),
        sa.Column("finished_at", TIMESTAMP),
    )
    op.create_table(
        "run_stages",
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("stage_index", sa.Integer, primary_key=True),
        sa.Column("stage", sa.String(100), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("requests", sa.Integer, nullable=False),
        sa.Column("errors", sa.Integer, nullable=False),
        sa.Column("duration_s", sa.Float, nullable=False),
        sa.Column("output_tokens_per_s", sa.Float, nullable=False),
        sa.Column("requests_per_s", sa.Float, nullable=False),
        *(sa.Column(name, sa.Float) for name in ("ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s",
                                                  "tpot_p50_s", "e2e_p99_s", "kv_cache_occupancy_peak")),
    )
    # Its columns were the CSV report's.
    integers = {"index", "warmup", "prompt_tokens", "max_new_tokens", "output_tokens"}
    texts = {"stage": sa.String(100), "request_id": sa.String(64), "error": sa.Text, "trace_id": sa.String(32),
             "token_times_s": sa.Text}
    columns = ["stage", "index", "request_id", "warmup", "prompt_tokens", "max_new_tokens", "output_tokens",
               "scheduled_s", "submitted_s", "admitted_s", "first_token_s", "last_token_s", "finished_s",
               "dispatch_lag_s", "queue_s", "ttft_s", "tpot_s", "e2e_s", "error", "trace_id", "token_times_s"]
    op.create_table(
        "requests",
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("stage_index", sa.Integer, primary_key=True),
        *(sa.Column(name, sa.Integer if name in integers else texts.get(name, sa.Float), primary_key=name == "index")
          for name in columns),
    )
    op.create_table(
        "timings",
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("stage_index", sa.Integer, primary_key=True),
        sa.Column("series", sa.String(32), primary_key=True),
        sa.Column("index", sa.Integer, primary_key=True),
        sa.Column("warmup", sa.Boolean, nullable=False),
        sa.Column("seconds", sa.Float, nullable=False),
    )
    op.create_table(
        "schedules",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("spec", JSON, nullable=False),
        sa.Column("interval_s", sa.Float, nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
    )
    op.create_table(
        "baselines",
        sa.Column("workload", sa.String(100), primary_key=True),
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("set_at", TIMESTAMP, nullable=False),
    )


def downgrade() -> None:
    for table in ("baselines", "schedules", "timings", "requests", "run_stages", "runs"):
        op.drop_table(table)
