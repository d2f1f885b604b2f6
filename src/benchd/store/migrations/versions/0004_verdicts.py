"""Runs get their verdict (valid, or not) and a capacity search's figure, so SQL, dashboards and baselines need no
JSON paths to tell a run that can be trusted."""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("valid", sa.Boolean))
        batch.add_column(sa.Column("capacity_requests_per_s", sa.Float))


def downgrade() -> None:
    raise NotImplementedError("benchd's store migrates forward only")
