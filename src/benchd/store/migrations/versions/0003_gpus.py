"""A run on every GPU keeps each GPU's requests and stage figures apart: requests and run_stages get a gpu column
(NVML's index; empty for a run on one device) in their keys, and runs the per-GPU part of their results."""

import warnings

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0003"
down_revision = "0002"

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("parts", JSON))
    for table, keys in (("requests", ("run_id", "stage_index", "gpu", "index")),
                        ("run_stages", ("run_id", "stage_index", "gpu"))):
        # The table is made again with the new key (SQLite alters no key in place; its keys have no name).
        # SQLAlchemy warns that the copy's key differs from the reflected one's: that is the change made.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Table '_alembic_tmp_", sa.exc.SAWarning)
            with op.batch_alter_table(table, recreate="always") as batch:
                batch.add_column(sa.Column("gpu", sa.String(32), nullable=False, server_default=""))
                batch.create_primary_key(f"{table}_pkey", list(keys))


def downgrade() -> None:
    raise NotImplementedError("benchd's store migrates forward only")
