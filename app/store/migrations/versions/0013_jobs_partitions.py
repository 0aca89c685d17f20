"""Jobs partitioned by month on PostgreSQL, so retention drops whole partitions (issue 20).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27

PostgreSQL only (SQLite prunes with batched deletes): `jobs` becomes a table partitioned by
RANGE (created_at) with one partition per month (`jobs_2026_11`) from its oldest row to three
months ahead, plus `jobs_default` so an insert never fails for lack of a partition. A unique
constraint on a partitioned table must include the partition key, so the primary key becomes
(id, created_at); ids stay unique because the writer mints them. Columns, defaults and
indexes are copied from the catalog, not listed, so columns added by earlier migrations
(0011's chain_seq) come along. The copy holds an exclusive lock on `jobs` while it runs: plan
it like any table rewrite.
"""

import datetime as dt
import re

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_AHEAD_MONTHS = 3
_PLAIN_INCLUDES = "INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMMENTS"


def _indexes(connection: sa.Connection, table: str) -> list[tuple[str, str, bool]]:
    """(name, definition, is_unique) of the table's indexes, its primary key left out."""
    rows = connection.execute(
        sa.text(
            "SELECT i.relname, pg_get_indexdef(x.indexrelid), x.indisunique "
            "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
            "WHERE x.indrelid = to_regclass(:table) AND NOT x.indisprimary ORDER BY i.relname"
        ),
        {"table": table},
    )
    return [(name, definition, unique) for name, definition, unique in rows]


def _on_table(definition: str, old: str, new: str) -> str:
    """An index definition from the catalog, retargeted at the table that replaces `old`."""
    return re.sub(rf" ON (ONLY )?(\S+\.)?{old} ", f" ON {new} ", definition, count=1)


def _month(value: dt.datetime) -> dt.date:
    return dt.date(value.year, value.month, 1)


def _next(month: dt.date) -> dt.date:
    return dt.date(month.year + month.month // 12, month.month % 12 + 1, 1)


def upgrade() -> None:
    connection = op.get_bind()
    if connection.dialect.name != "postgresql":
        return
    op.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
    indexes = _indexes(connection, "jobs")
    oldest = connection.execute(sa.text("SELECT min(created_at) FROM jobs")).scalar()
    now = dt.datetime.now(dt.UTC)
    op.execute(
        f"CREATE TABLE jobs_partitioned (LIKE jobs {_PLAIN_INCLUDES}) "
        "PARTITION BY RANGE (created_at)"
    )
    month, last = _month(min(oldest or now, now)), _month(now)
    for _ in range(_AHEAD_MONTHS):
        last = _next(last)
    while month <= last:
        op.execute(
            f"CREATE TABLE jobs_{month:%Y_%m} PARTITION OF jobs_partitioned "
            f"FOR VALUES FROM ('{month.isoformat()} 00:00:00+00') "
            f"TO ('{_next(month).isoformat()} 00:00:00+00')"
        )
        month = _next(month)
    op.execute("CREATE TABLE jobs_default PARTITION OF jobs_partitioned DEFAULT")
    op.execute("INSERT INTO jobs_partitioned SELECT * FROM jobs")
    op.execute("DROP TABLE jobs")
    op.execute("ALTER TABLE jobs_partitioned RENAME TO jobs")
    op.execute("ALTER TABLE jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (id, created_at)")
    for _, definition, unique in indexes:
        if unique and "created_at" not in definition:
            # A partitioned unique index must hold the partition key; stated, not dropped.
            definition = re.sub(r"\(([^()]*)\)", r"(\1, created_at)", definition, count=1)
        op.execute(_on_table(definition, "jobs", "jobs"))
    op.execute("ANALYZE jobs")


def downgrade() -> None:
    connection = op.get_bind()
    if connection.dialect.name != "postgresql":
        return
    op.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
    indexes = _indexes(connection, "jobs")
    op.execute(f"CREATE TABLE jobs_plain (LIKE jobs {_PLAIN_INCLUDES})")
    op.execute("INSERT INTO jobs_plain SELECT * FROM jobs")
    op.execute("DROP TABLE jobs")  # its partitions with it
    op.execute("ALTER TABLE jobs_plain RENAME TO jobs")
    op.execute("ALTER TABLE jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (id)")
    for _, definition, _ in indexes:
        op.execute(_on_table(definition, "jobs", "jobs"))
    op.execute("ANALYZE jobs")
