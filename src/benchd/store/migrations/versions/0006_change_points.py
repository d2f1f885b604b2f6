"""Change points found in each workload's series of runs, with what explains them and the matrix that confirmed
them (store/schema.py: change_points)."""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0006"
down_revision = "0005"

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "change_points",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("workload", sa.String(100), nullable=False, index=True),
        sa.Column("device", sa.String(253), nullable=False),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("figure", sa.String(32), nullable=False),
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("at", TIMESTAMP, nullable=False, index=True),
        sa.Column("direction", sa.String(8), nullable=False),
        sa.Column("relative_change", sa.Float, nullable=False),
        sa.Column("p_value", sa.Float, nullable=False),
        sa.Column("active", sa.Boolean, nullable=False, index=True),
        sa.Column("details", JSON, nullable=False),
        sa.Column("confirmation", JSON),
        sa.Column("matrix_id", sa.String(32), index=True),
        sa.Column("detected_at", TIMESTAMP, nullable=False),
        sa.Column("withdrawn_at", TIMESTAMP),
    )
    # A workload's history is read by workload and time: every run of the window, oldest first.
    op.create_index("ix_runs_workload_created_at", "runs", ["workload", "created_at"])


def downgrade() -> None:
    raise NotImplementedError("benchd's store migrates forward only")
