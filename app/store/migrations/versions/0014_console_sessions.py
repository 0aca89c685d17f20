"""Console sessions: the web console's signed-in browsers.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27

Only the SHA-256 of a session cookie is stored, so a copy of the database signs nobody in.
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("token_sha256", sa.String(64), primary_key=True),
        sa.Column("key_id", sa.String(64), nullable=True),
        sa.Column("csrf", sa.String(64), nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("expires_at", WHEN, nullable=False),
    )
    op.create_index("ix_console_sessions_expires_at", "console_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_console_sessions_expires_at", table_name="console_sessions")
    op.drop_table("console_sessions")
