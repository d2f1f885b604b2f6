"""Requests get the store's own columns: every arrival's stamp and token count as numbers (JSON arrays) instead of
the CSV's space-joined text; runs get a timeline, the stage a failure happened in, and the node and pod that ran
them (daemons of a fleet share one database)."""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0002"
down_revision = "0001"

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def arrivals_from_text(token_times: str | None) -> tuple[list[float], list[int]]:
    """The old text repeated a chunk's stamp once per token it carried: equal neighbours were one arrival (the
    guess compare used to make each time; made once here)."""
    stamps: list[float] = []
    counts: list[int] = []
    for text in (token_times or "").split():
        t = float(text)
        if stamps and stamps[-1] == t:
            counts[-1] += 1
        else:
            stamps.append(t)
            counts.append(1)
    return stamps, counts


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("timeline", JSON))
        batch.add_column(sa.Column("error_stage", sa.String(32)))
        batch.add_column(sa.Column("node", sa.String(253)))
        batch.add_column(sa.Column("pod", sa.String(253)))
        batch.create_index("ix_runs_node", ["node"])
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("arrival_s", JSON))
        batch.add_column(sa.Column("arrival_tokens", JSON))

    requests = sa.table("requests", sa.column("run_id"), sa.column("stage_index"), sa.column("index"),
                        sa.column("token_times_s"), sa.column("arrival_s", JSON),
                        sa.column("arrival_tokens", JSON))
    connection = op.get_bind()
    rows = connection.execute(sa.select(requests.c.run_id, requests.c.stage_index, requests.c["index"],
                                        requests.c.token_times_s)).all()
    update = (requests.update()
              .where(requests.c.run_id == sa.bindparam("r"), requests.c.stage_index == sa.bindparam("s"),
                     requests.c["index"] == sa.bindparam("i"))
              .values(arrival_s=sa.bindparam("a"), arrival_tokens=sa.bindparam("n")))
    params = []
    for run_id, stage_index, index, token_times in rows:
        stamps, counts = arrivals_from_text(token_times)
        params.append({"r": run_id, "s": stage_index, "i": index, "a": stamps, "n": counts})
    if params:
        connection.execute(update, params)

    with op.batch_alter_table("requests") as batch:
        batch.drop_column("token_times_s")
        batch.drop_column("first_token_s")
        batch.drop_column("last_token_s")
        batch.alter_column("warmup", type_=sa.Boolean, existing_type=sa.Integer, existing_nullable=True,
                           nullable=False, postgresql_using="warmup <> 0")


def downgrade() -> None:
    raise NotImplementedError("benchd's store migrates forward only")
