"""The admin event log: who did what to keys, teams, templates, labels, snippets and jobs.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27

Rows are only ever appended (app/audit/events.py). `chain_seq` stays NULL until the audit chain
links the row; the partial index finds the rows still to link without scanning the log.
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# Written out, not imported from app/store/tables.py: a migration stays as it was written.
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
WHEN = sa.DateTime(timezone=True)
UNCHAINED = sa.text("chain_seq IS NULL")


def upgrade() -> None:
    op.create_table(
        "audit_events",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("at", WHEN, nullable=False),
        sa.Column("actor", sa.String(16), nullable=False),
        sa.Column("actor_key_id", sa.String(64), nullable=True),
        sa.Column("actor_team", sa.String(64), nullable=True),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(300), nullable=True),
        sa.Column("detail", JSON, nullable=False),
        sa.Column("remote_addr", sa.String(64), nullable=True),
        sa.Column("user_agent", sa.String(200), nullable=True),
        sa.Column("request_id", sa.String(128), nullable=True),
        sa.Column("chain_seq", sa.BigInteger, nullable=True),
    )
    op.create_index("ix_audit_events_at", "audit_events", ["at", "id"])
    op.create_index("ix_audit_events_action", "audit_events", ["action", "at", "id"])
    op.create_index("ix_audit_events_target", "audit_events", ["target", "at", "id"])
    op.create_index(
        "ix_audit_events_unchained",
        "audit_events",
        ["id"],
        sqlite_where=UNCHAINED,
        postgresql_where=UNCHAINED,
    )


def downgrade() -> None:
    op.drop_index("ix_audit_events_unchained", table_name="audit_events")
    op.drop_index("ix_audit_events_target", table_name="audit_events")
    op.drop_index("ix_audit_events_action", table_name="audit_events")
    op.drop_index("ix_audit_events_at", table_name="audit_events")
    op.drop_table("audit_events")
