"""Usage reports read the gateway's overhead from their covering index too.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27

`ix_jobs_usage` gains `latency_ms` and `upstream_latency_ms`, so the overhead percentiles of
`GET /v1/usage` come from the index alone, like its sums (without them, a report over a million
jobs read every row of the table). The index is rebuilt: on a large `jobs` table, plan it like
any index build (on PostgreSQL it is built on each monthly partition).
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_BEFORE = (
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
_AFTER = (*_BEFORE, "latency_ms", "upstream_latency_ms")


def upgrade() -> None:
    op.drop_index("ix_jobs_usage", table_name="jobs")
    op.create_index("ix_jobs_usage", "jobs", list(_AFTER))


def downgrade() -> None:
    op.drop_index("ix_jobs_usage", table_name="jobs")
    op.create_index("ix_jobs_usage", "jobs", list(_BEFORE))
