"""Template labels: `production` (and any other name) points at a version; `active` goes.

Revision ID: 0009
Revises: 0007
Create Date: 2026-11-27

`template_labels` holds one row per (name, role, label): a version, or a canary split between two
versions by weight. `label_moves` is its history (who, when, from, to, why). Every version that was
active becomes the target of a `production` label, with a history row by author `migration`, so
requests without a label answer exactly as before; then `prompt_templates.active` (and its partial
unique index) is dropped. Versions gain `tests` (their pattern test cases) and jobs
`template_label` (the label that chose the version). Downgrade puts `active` back from
`production` (a split's first version) and drops the rest.
"""

import datetime as dt

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    labels = op.create_table(
        "template_labels",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("role", sa.String(100), nullable=False),
        sa.Column("label", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("split", JSON, nullable=True),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("moved_at", WHEN, nullable=False),
    )
    op.create_index("uq_template_labels", "template_labels", ["name", "role", "label"], unique=True)
    moves = op.create_table(
        "label_moves",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("role", sa.String(100), nullable=False),
        sa.Column("label", sa.String(64), nullable=False),
        sa.Column("from_version", sa.Integer, nullable=True),
        sa.Column("from_split", JSON, nullable=True),
        sa.Column("to_version", sa.Integer, nullable=True),
        sa.Column("to_split", JSON, nullable=True),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("author", sa.String(64), nullable=False),
        sa.Column("moved_at", WHEN, nullable=False),
    )
    op.create_index("ix_label_moves_template", "label_moves", ["name", "role", "moved_at"])

    templates = sa.table(
        "prompt_templates",
        sa.column("name", sa.String),
        sa.column("role", sa.String),
        sa.column("version", sa.Integer),
        sa.column("active", sa.Boolean),
    )
    active = op.get_bind().execute(
        sa.select(templates.c.name, templates.c.role, templates.c.version).where(
            templates.c.active == sa.true()
        )
    )
    now = dt.datetime.now(dt.UTC)
    rows = [{"name": n, "role": r, "version": v} for n, r, v in active]
    if rows:
        op.bulk_insert(
            labels,
            [{**row, "label": "production", "revision": 1, "moved_at": now} for row in rows],
        )
        op.bulk_insert(
            moves,
            [
                {
                    "name": row["name"],
                    "role": row["role"],
                    "label": "production",
                    "to_version": row["version"],
                    "message": "the active version became the production label",
                    "author": "migration",
                    "moved_at": now,
                }
                for row in rows
            ],
        )
    op.drop_index("uq_prompt_templates_one_active", table_name="prompt_templates")
    with op.batch_alter_table("prompt_templates") as batch:
        batch.drop_column("active")
        batch.add_column(sa.Column("tests", JSON, nullable=True))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("template_label", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("template_label")
    with op.batch_alter_table("prompt_templates") as batch:
        batch.drop_column("tests")
        batch.add_column(sa.Column("active", sa.Boolean, nullable=False, server_default=sa.false()))
    op.execute(
        "UPDATE prompt_templates SET active = TRUE WHERE EXISTS (SELECT 1 FROM template_labels l "
        "WHERE l.name = prompt_templates.name AND l.role = prompt_templates.role "
        "AND l.label = 'production' AND l.version = prompt_templates.version)"
    )
    with op.batch_alter_table("prompt_templates") as batch:
        batch.alter_column("active", server_default=None)
    op.create_index(
        "uq_prompt_templates_one_active",
        "prompt_templates",
        ["name", "role"],
        unique=True,
        sqlite_where=sa.text("active"),
        postgresql_where=sa.text("active"),
    )
    op.drop_index("ix_label_moves_template", table_name="label_moves")
    op.drop_table("label_moves")
    op.drop_index("uq_template_labels", table_name="template_labels")
    op.drop_table("template_labels")
