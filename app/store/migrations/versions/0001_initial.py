"""Initial schema: versioned prompt templates and the job audit record.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
HASH = sa.String(71)


def upgrade() -> None:
    """Over the 60-line rule on purpose: a migration records one day's schema as plain DDL, table
    by table, and is never edited once released; helpers would hide what it creates."""
    op.create_table(
        "prompt_templates",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("role", sa.String(100), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("template", sa.Text, nullable=False),
        sa.Column("variables", JSON, nullable=False),
        sa.Column("active", sa.Boolean, nullable=False),
        sa.Column("checksum", HASH, nullable=False),
        sa.Column("blueprint_schema", JSON, nullable=True),
        sa.Column("blueprint_instructions", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(
        "uq_prompt_templates_version", "prompt_templates", ["name", "role", "version"], unique=True
    )
    op.create_index(
        "uq_prompt_templates_one_active",
        "prompt_templates",
        ["name", "role"],
        unique=True,
        sqlite_where=sa.text("active"),
        postgresql_where=sa.text("active"),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("request_id", sa.String(128), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error_type", sa.String(64), nullable=True),
        sa.Column("error_message", sa.Text, nullable=True),
        sa.Column("source_kind", sa.String(16), nullable=False),
        sa.Column("source_name", sa.String(200), nullable=False),
        sa.Column("source_base_path", sa.String(500), nullable=False),
        sa.Column("template_id", sa.Integer, nullable=True),
        sa.Column("template_role", sa.String(100), nullable=True),
        sa.Column("template_version", sa.Integer, nullable=True),
        sa.Column("template_sha256", HASH, nullable=False),
        sa.Column("pattern_content_hash", HASH, nullable=False),
        sa.Column("variables_hash", HASH, nullable=False),
        sa.Column("user_prompt_hash", HASH, nullable=False),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("params", JSON, nullable=False),
        sa.Column("finish_reason", sa.String(32), nullable=True),
        sa.Column("input_tokens", sa.Integer, nullable=True),
        sa.Column("output_tokens", sa.Integer, nullable=True),
        sa.Column("latency_ms", sa.Double, nullable=True),
        sa.Column("upstream_latency_ms", sa.Double, nullable=True),
        sa.Column("prompt_redacted", JSON, nullable=False),
        sa.Column("response_redacted", sa.Text, nullable=True),
        sa.Column("redaction_map", JSON, nullable=False),
        sa.Column("snippet_ids", JSON, nullable=False),
        sa.Column("replay_inputs", sa.LargeBinary, nullable=True),
    )
    op.create_index("ix_jobs_request_id", "jobs", ["request_id"])
    op.create_index("ix_jobs_created_at", "jobs", ["created_at"])
    op.create_index("ix_jobs_status", "jobs", ["status"])


def downgrade() -> None:
    op.drop_table("jobs")
    op.drop_table("prompt_templates")
