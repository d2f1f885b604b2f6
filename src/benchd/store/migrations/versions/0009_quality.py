"""Quality beside speed (measure/quality.py): requests keep their tokens' log-probabilities and, against a server,
the counts benchd and the server each made; runs keep their quality summary and their probe (store/schema.py)."""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0009"
down_revision = "0008"

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("logprobs", JSON))
        batch.add_column(sa.Column("counts", JSON))
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("quality", JSON))
        batch.add_column(sa.Column("probe", JSON))


def downgrade() -> None:
    raise NotImplementedError("benchd's store migrates forward only")
