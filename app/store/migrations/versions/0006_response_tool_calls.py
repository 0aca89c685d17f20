"""Jobs keep the tool calls a model answered with (arguments redacted), and prov-2's
continuation hash.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25

A tool-calling answer is not text: its calls are the answer. The prompt's own tool calls and
tool results need no column, since they live in `prompt_redacted` like every other turn; the
hash of the turns after the user prompt (`continuation_hash`, null before prov-2) does, so replay
can prove it.
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("response_tool_calls", JSON, nullable=True))
        batch.add_column(sa.Column("continuation_hash", sa.String(71), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("continuation_hash")
        batch.drop_column("response_tool_calls")
