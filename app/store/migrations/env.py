"""Alembic environment: migrations always run on a connection the caller hands in."""

from __future__ import annotations

from alembic import context

from app.store.partitions import outside_partitions
from app.store.tables import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `genai db upgrade` (app.store.db.Database.migrate)")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=True,
    include_name=outside_partitions,  # jobs' month partitions are made at run time (0013)
)
with context.begin_transaction():
    context.run_migrations()
