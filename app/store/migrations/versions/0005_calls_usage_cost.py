"""Jobs record every upstream call, the full usage and its cost, and whether it streamed.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22

`attempts` held the structured-output tries; it becomes `output_attempts`, and `attempts` now
lists every upstream call (retries and fallbacks), as the completion envelope does. A `cached`
status (an answer from the response cache) needs no schema change: `status` is free text.
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.alter_column("attempts", new_column_name="output_attempts", existing_type=JSON)
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("attempts", JSON, nullable=True))
        batch.add_column(sa.Column("cached_input_tokens", sa.Integer, nullable=True))
        batch.add_column(sa.Column("reasoning_tokens", sa.Integer, nullable=True))
        batch.add_column(sa.Column("cost_usd", sa.Double, nullable=True))
        batch.add_column(
            sa.Column("streamed", sa.Boolean, nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for column in ("streamed", "cost_usd", "reasoning_tokens", "cached_input_tokens"):
            batch.drop_column(column)
        batch.drop_column("attempts")
    with op.batch_alter_table("jobs") as batch:
        batch.alter_column("output_attempts", new_column_name="attempts", existing_type=JSON)
