"""Keys carry limits and belong to teams; jobs say who asked and what the prompt cache did.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26

Teams share budgets and rate limits among their keys. `limit_counters` holds the budget and rate
counters when Redis is not configured. Jobs gain the calling key and team (usage by key or team),
prompt-cache writes (5-minute and 1-hour, billed differently) and what the cache saved; usage
reports get a covering index on a time range (ix_jobs_usage, in place of ix_jobs_created_at).
Every new column is nullable or has a default: existing keys stay unlimited, existing jobs keep
no caller.
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# Written out, not imported from app/store/tables.py: a migration stays as it was written.
USAGE_INDEX_COLUMNS = (
    "created_at",
    "key_id",
    "team",
    "source_name",
    "provider",
    "model",
    "status",
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost_usd",
    "cache_saved_usd",
)
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "teams",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("budgets", JSON, nullable=False, server_default=sa.text("'[]'")),
        sa.Column("rpm", sa.Integer, nullable=True),
        sa.Column("tpm", sa.Integer, nullable=True),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("updated_at", WHEN, nullable=False),
    )
    op.create_table(
        "limit_counters",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("amount", sa.Double, nullable=False, server_default=sa.text("0")),
        sa.Column("expires_at", WHEN, nullable=True),
    )
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("expires_at", WHEN, nullable=True))
        batch.add_column(sa.Column("team", sa.String(64), nullable=True))
        batch.add_column(sa.Column("budgets", JSON, nullable=False, server_default=sa.text("'[]'")))
        batch.add_column(sa.Column("rpm", sa.Integer, nullable=True))
        batch.add_column(sa.Column("tpm", sa.Integer, nullable=True))
        batch.add_column(sa.Column("allowed_models", JSON, nullable=True))
        batch.add_column(sa.Column("allowed_patterns", JSON, nullable=True))
        batch.create_foreign_key("fk_api_keys_team", "teams", ["team"], ["name"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("cache_write_tokens", sa.Integer, nullable=True))
        batch.add_column(sa.Column("cache_write_1h_tokens", sa.Integer, nullable=True))
        batch.add_column(sa.Column("cache_saved_usd", sa.Double, nullable=True))
        batch.add_column(sa.Column("key_id", sa.String(32), nullable=True))
        batch.add_column(sa.Column("team", sa.String(64), nullable=True))
    op.create_index("ix_jobs_key_created", "jobs", ["key_id", "created_at"])
    op.create_index("ix_jobs_team_created", "jobs", ["team", "created_at"])
    # Usage reports read a time range from this index alone; it replaces the plain one on
    # created_at, which it also serves (see app/store/tables.py).
    op.create_index("ix_jobs_usage", "jobs", list(USAGE_INDEX_COLUMNS))
    op.drop_index("ix_jobs_created_at", table_name="jobs")


def downgrade() -> None:
    op.create_index("ix_jobs_created_at", "jobs", ["created_at"])
    op.drop_index("ix_jobs_usage", table_name="jobs")
    op.drop_index("ix_jobs_team_created", table_name="jobs")
    op.drop_index("ix_jobs_key_created", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        for column in ("team", "key_id", "cache_saved_usd", "cache_write_1h_tokens"):
            batch.drop_column(column)
        batch.drop_column("cache_write_tokens")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_constraint("fk_api_keys_team", type_="foreignkey")
        for column in ("allowed_patterns", "allowed_models", "tpm", "rpm", "budgets", "team"):
            batch.drop_column(column)
        batch.drop_column("expires_at")
    op.drop_table("limit_counters")
    op.drop_table("teams")
