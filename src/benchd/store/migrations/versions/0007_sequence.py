"""Runs and matrices get their place in the order the store took them (seq, one more each insert): listings and
histories are ordered by it, not by a clock that can jump (a clock corrected by a year must not bury every later
run). The rows stored before are numbered in the order they were listed in: newest created first, ties by id."""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for table in ("runs", "matrices"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("seq", sa.BigInteger))
        # Listed before as created_at descending, then id ascending: numbered so that seq descending lists the same.
        op.execute(f"UPDATE {table} SET seq = ordered.n FROM (SELECT id, row_number() OVER "
                   f"(ORDER BY created_at, id DESC) AS n FROM {table}) AS ordered WHERE {table}.id = ordered.id")
        if postgresql:  # the sequence numbers every insert (SQLite's take one more than the highest: operations.py)
            op.execute(f"CREATE SEQUENCE {table}_seq OWNED BY {table}.seq")
            op.execute(f"SELECT setval('{table}_seq', (SELECT COALESCE(MAX(seq), 0) + 1 FROM {table}), false)")
            op.execute(f"ALTER TABLE {table} ALTER COLUMN seq SET DEFAULT nextval('{table}_seq')")
            op.execute(f"ALTER TABLE {table} ALTER COLUMN seq SET NOT NULL")
        op.create_index(f"ix_{table}_seq", table, ["seq"], unique=True)
    # A workload's history is read by workload and place: its newest runs first.
    op.create_index("ix_runs_workload_seq", "runs", ["workload", "seq"])


def downgrade() -> None:
    raise NotImplementedError("benchd's store migrates forward only")
