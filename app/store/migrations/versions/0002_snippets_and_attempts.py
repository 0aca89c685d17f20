"""Snippet library table; structured-output attempts on jobs.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "snippets",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("identifier", sa.String(100), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("tags", JSON, nullable=False),
        sa.Column("metadata", JSON, nullable=False),
        sa.Column("active", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("uq_snippets_identifier", "snippets", ["identifier"], unique=True)
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("attempts", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("attempts")
    op.drop_table("snippets")
