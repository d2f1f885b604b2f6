"""Alembic's environment: benchd passes the connection in (benchd.store.migrate), so no URL lives here."""

from alembic import context

from benchd.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
