"""Jobs keep one source hash: `template_sha256` always equalled `pattern_content_hash`.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23

Drift detection and replay both compare the job's source hash with the source as it is now; the
two columns were written from the same value, so the provenance name stays and the other goes.
Downgrade restores the column from `pattern_content_hash` (batch mode, so SQLite can alter it).
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("template_sha256")


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("template_sha256", sa.String(71), nullable=True))
    op.execute("UPDATE jobs SET template_sha256 = pattern_content_hash")
    with op.batch_alter_table("jobs") as batch:
        batch.alter_column("template_sha256", existing_type=sa.String(71), nullable=False)
