"""Brings a database to the newest schema with Alembic; one daemon at a time on a shared PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

HEAD = "head"
_LOCK = 0x62656E6368  # "bench": the advisory lock daemons sharing one PostgreSQL take while migrating


def alembic_config(connection: sa.Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    config.attributes["connection"] = connection
    return config


def upgrade(engine: sa.Engine) -> None:
    """A database written before benchd had migrations (tables, no alembic_version) is stamped at 0001 first."""
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK})
        config = alembic_config(connection)
        tables = set(sa.inspect(connection).get_table_names())
        if "runs" in tables and "alembic_version" not in tables:
            command.stamp(config, "0001")
        command.upgrade(config, HEAD)


def head() -> str:
    """The newest revision of benchd's migrations."""
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    newest = ScriptDirectory.from_config(config).get_current_head()
    assert newest is not None  # store/migrations/versions holds the revisions
    return newest


def revision(engine: sa.Engine) -> str | None:
    with engine.connect() as connection:
        if "alembic_version" not in sa.inspect(connection).get_table_names():
            return None
        return connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
