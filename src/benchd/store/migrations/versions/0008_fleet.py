"""The fleet's view: each run's good tokens (runs.good_tokens), and each node's newest runs of each workload on each
GPU model with the figures the fleet compares (store/schema.py: fleet_runs), filled from the runs stored before."""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0008"
down_revision = "0007"

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("good_tokens", JSON))
    op.create_table(
        "fleet_runs",
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("workload", sa.String(100), nullable=False),
        sa.Column("device", sa.String(253), nullable=False),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("valid", sa.Boolean),
        sa.Column("figures", JSON, nullable=False),
        sa.Column("good_output_tokens", sa.Integer),
        sa.Column("device_seconds", sa.Float),
        sa.Column("energy_j", sa.Float),
        sa.Column("state", JSON, nullable=False),
        sa.Column("stack", JSON, nullable=False),
    )
    op.create_index("ix_fleet_runs_workload_device_node", "fleet_runs", ["workload", "device", "node", "created_at"])
    from benchd.store.fleet import backfill

    backfill(op.get_bind())


def downgrade() -> None:
    raise NotImplementedError("benchd's store migrates forward only")
