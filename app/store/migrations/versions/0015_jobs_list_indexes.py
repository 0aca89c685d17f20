"""Indexes for the job list (GET /v1/jobs, the console's Jobs page).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27

The list filters by status, pattern, model and key and reads newest first, keyset-paged on
(created_at, id). An index per filter that continues (created_at, id) lets any combination be
read in order from one of them and stop after a page, instead of sorting every match (a
million jobs: a sort of the whole table for a status filter). The key filter has
ix_jobs_key_created already. `ix_jobs_status` (status alone) is replaced by its extension: every
status lookup it served (the stale sweep) is a prefix of the new one. On PostgreSQL an index on
the partitioned `jobs` (0013) is made on every partition.
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_INDEXES = {
    "ix_jobs_status_created": ["status", "created_at", "id"],
    "ix_jobs_source_created": ["source_name", "created_at", "id"],
    "ix_jobs_model_created": ["model", "provider", "created_at", "id"],
}


def upgrade() -> None:
    for name, columns in _INDEXES.items():
        op.create_index(name, "jobs", columns)
    op.drop_index("ix_jobs_status", table_name="jobs")


def downgrade() -> None:
    op.create_index("ix_jobs_status", "jobs", ["status"])
    for name in reversed(_INDEXES):
        op.drop_index(name, table_name="jobs")
