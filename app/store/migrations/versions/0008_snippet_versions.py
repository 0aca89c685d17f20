"""Snippets become immutable versions; jobs record the snippet versions they used.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27

Every existing snippet becomes version 1 of its identifier, live (the version served), with the
checksum (`sha256:<hex>` of its text) drift and replay compare against. One row per
(identifier, version); at most one live row per identifier (a partial unique index, as for
templates). Jobs gain `snippet_versions` ([{identifier, version, source, sha256}]); older jobs
keep null there.
"""

import hashlib

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _checksum(text: str) -> str:
    # Written out, not imported from app/tracking: a migration stays as it was written.
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def upgrade() -> None:
    with op.batch_alter_table("snippets") as batch:
        batch.add_column(sa.Column("version", sa.Integer, nullable=False, server_default="1"))
        batch.add_column(sa.Column("checksum", sa.String(71), nullable=True))
        batch.add_column(sa.Column("live", sa.Boolean, nullable=False, server_default=sa.true()))
    snippets = sa.table(
        "snippets",
        sa.column("id", sa.Integer),
        sa.column("text", sa.Text),
        sa.column("checksum", sa.String),
    )
    bind = op.get_bind()
    for row_id, text in bind.execute(sa.select(snippets.c.id, snippets.c.text)).all():
        bind.execute(
            snippets.update().where(snippets.c.id == row_id).values(checksum=_checksum(text))
        )
    with op.batch_alter_table("snippets") as batch:
        batch.alter_column("version", server_default=None)
        batch.alter_column("live", server_default=None)
        batch.alter_column("checksum", existing_type=sa.String(71), nullable=False)
        batch.drop_index("uq_snippets_identifier")
        batch.create_index("uq_snippets_identifier_version", ["identifier", "version"], unique=True)
        batch.create_index(
            "uq_snippets_one_live",
            ["identifier"],
            unique=True,
            sqlite_where=sa.text("live"),
            postgresql_where=sa.text("live"),
        )
    op.add_column("jobs", sa.Column("snippet_versions", JSON, nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "snippet_versions")
    # Only the live version of each identifier survives (a retired snippet is dropped).
    op.execute(sa.text("DELETE FROM snippets WHERE NOT live"))
    with op.batch_alter_table("snippets") as batch:
        batch.drop_index("uq_snippets_one_live")
        batch.drop_index("uq_snippets_identifier_version")
        batch.create_index("uq_snippets_identifier", ["identifier"], unique=True)
        batch.drop_column("live")
        batch.drop_column("checksum")
        batch.drop_column("version")
