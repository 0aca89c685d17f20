"""The tamper-evident audit chain: entries, signed checkpoints, and each job's link.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27

`jobs.chain_seq` stays null until the chainer (app/audit/chainer.py) links the finished record;
the partial index holds only those rows, so the chainer's read stays small on any table size.
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# Written out, not imported from app/store/tables.py: a migration stays as it was written.
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
WHEN = sa.DateTime(timezone=True)
HASH = sa.String(71)
UNCHAINED = sa.text("chain_seq IS NULL")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("chain_seq", sa.BigInteger, nullable=True))
    op.create_index(
        "ix_jobs_unchained",
        "jobs",
        ["completed_at", "id"],
        sqlite_where=UNCHAINED,
        postgresql_where=UNCHAINED,
    )
    op.create_table(
        "audit_chain",
        sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("ref", sa.String(64), nullable=False),
        sa.Column("record_at", WHEN, nullable=False),
        sa.Column("content_sha256", HASH, nullable=False),
        sa.Column("prev_sha256", HASH, nullable=False),
        sa.Column("entry_sha256", HASH, nullable=False),
        sa.Column("chained_at", WHEN, nullable=False),
    )
    op.create_index("ix_audit_chain_entry_sha256", "audit_chain", ["entry_sha256"])
    op.create_table(
        "audit_checkpoints",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("head_sha256", HASH, nullable=False),
        sa.Column("signed_at", WHEN, nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("detail", JSON, nullable=False),
        sa.Column("kid", sa.String(32), nullable=True),
        sa.Column("alg", sa.String(16), nullable=True),
        sa.Column("signature", sa.String(128), nullable=True),
    )
    op.create_index("ix_audit_checkpoints_seq", "audit_checkpoints", ["seq"])


def downgrade() -> None:
    op.drop_index("ix_audit_checkpoints_seq", table_name="audit_checkpoints")
    op.drop_table("audit_checkpoints")
    op.drop_index("ix_audit_chain_entry_sha256", table_name="audit_chain")
    op.drop_table("audit_chain")
    op.drop_index("ix_jobs_unchained", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("chain_seq")
