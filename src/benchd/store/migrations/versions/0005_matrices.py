"""Matrices (a spec's variants run interleaved and compared with a baseline) get a table of their own, and requests
keep the token ids they generated and runs the matrix they belong to, so a variant's greedy tokens can be compared
with the baseline's."""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0005"
down_revision = "0004"

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("token_ids", JSON))
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("matrix_id", sa.String(32)))
        batch.create_index("ix_runs_matrix_id", ["matrix_id"])
    op.create_table(
        "matrices",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("workload", sa.String(100), nullable=False, index=True),
        sa.Column("document", JSON, nullable=False),
        sa.Column("variants", JSON, nullable=False),
        sa.Column("runs", JSON, nullable=False),
        sa.Column("baseline", sa.Integer, nullable=False),
        sa.Column("comparison", JSON),
        sa.Column("error", sa.Text),
        sa.Column("node", sa.String(253), index=True),
        sa.Column("created_at", TIMESTAMP, nullable=False, index=True),
        sa.Column("started_at", TIMESTAMP),
        sa.Column("finished_at", TIMESTAMP),
    )


def downgrade() -> None:
    raise NotImplementedError("benchd's store migrates forward only")
