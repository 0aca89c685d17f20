"""UsageRepository: requests, tokens and cost of the `jobs` table, grouped and summed by the
database (one GROUP BY over an index range of `created_at`), never by loading rows.

Differences between the backends stay here: the UTC day of a timestamp (`utc_day`), and the
types their sums come back as (PostgreSQL sums integers as numeric).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import ColumnElement, and_, case, func, literal_column, null, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import InstrumentedAttribute
from sqlalchemy.sql.functions import FunctionElement

from app.schemas.usage import JOB_STATUSES, UsageGroup, UsageQuery, UsageTotals
from app.store.db import store_seam
from app.store.overhead import bucket_expression, merged, percentile
from app.store.tables import Job


class utc_day(FunctionElement[Any]):  # lower case: a SQL function, named as SQL names them
    """The UTC date of a timestamp column: text `YYYY-MM-DD` on SQLite, a date on PostgreSQL
    (grouping 150,000 rows by it took 112 ms there, by to_char's text 197); `_value` evens them."""

    inherit_cache = True


@compiles(utc_day, "sqlite")
def _utc_day_sqlite(element: utc_day, compiler: Any, **kw: Any) -> str:
    # SQLite holds the UTC instant as text without offset (UTCDateTime): its date is its prefix.
    return f"date({compiler.process(element.clauses, **kw)})"


@compiles(utc_day, "postgresql")
def _utc_day_postgresql(element: utc_day, compiler: Any, **kw: Any) -> str:
    # timestamptz → the UTC wall clock, whatever the session's TimeZone → its date.
    column = compiler.process(element.clauses, **kw)
    return f"CAST(({column} AT TIME ZONE 'UTC') AS DATE)"


class utc_hour(FunctionElement[Any]):
    """The UTC hour of a timestamp column: text `YYYY-MM-DDTHH:00:00Z` on SQLite, a timestamp
    on PostgreSQL (`_value` writes it the same way)."""

    inherit_cache = True


@compiles(utc_hour, "sqlite")
def _utc_hour_sqlite(element: utc_hour, compiler: Any, **kw: Any) -> str:
    return f"strftime('%Y-%m-%dT%H:00:00Z', {compiler.process(element.clauses, **kw)})"


@compiles(utc_hour, "postgresql")
def _utc_hour_postgresql(element: utc_hour, compiler: Any, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    return f"date_trunc('hour', {column} AT TIME ZONE 'UTC')"


def _value(value: Any) -> str | None:
    """A group's value as the report writes it (a PostgreSQL date as `YYYY-MM-DD`, an hour as
    `YYYY-MM-DDTHH:00:00Z`)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%dT%H:00:00Z")
    return str(value.isoformat())


# Each dimension's SQL expression; `model` is `provider/model`, as requests name models. No
# bound parameters in them: PostgreSQL would see GROUP BY's `$1` and SELECT's `$2` as two
# different expressions.
DIMENSIONS: dict[str, ColumnElement[Any] | InstrumentedAttribute[Any]] = {
    "key": Job.key_id,
    "team": Job.team,
    "pattern": Job.source_name,
    "model": Job.provider + literal_column("'/'") + Job.model,
    "provider": Job.provider,
    "day": utc_day(Job.created_at),
    "hour": utc_hour(Job.created_at),
}

# Tokens and cost count only where a provider billed them: a response-cache hit keeps the
# original answer's token counts (and cost 0), which no provider charged again.
_BILLED = Job.status != "cached"


def _billed_sum(column: Any) -> ColumnElement[Any]:
    return func.coalesce(func.sum(case((_BILLED, column), else_=None)), 0)


_PLAIN_INPUT = (
    func.coalesce(Job.input_tokens, 0)
    - func.coalesce(Job.cached_input_tokens, 0)
    - func.coalesce(Job.cache_write_tokens, 0)
)
# Summed columns, in UsageTotals' field names (requests and statuses are added below).
_SUMS: dict[str, ColumnElement[Any]] = {
    "input_tokens": _billed_sum(_PLAIN_INPUT),
    "cached_input_tokens": _billed_sum(Job.cached_input_tokens),
    "cache_write_tokens": _billed_sum(Job.cache_write_tokens),
    "output_tokens": _billed_sum(Job.output_tokens),
    "reasoning_tokens": _billed_sum(Job.reasoning_tokens),
    "cost_usd": _billed_sum(Job.cost_usd),
    "cache_saved_usd": _billed_sum(Job.cache_saved_usd),
}
_FLOATS = frozenset({"cost_usd", "cache_saved_usd"})


def _filters(query: UsageQuery) -> list[ColumnElement[bool]]:
    """The window and every filter, each on a column as stored (so indexes serve them)."""
    found = [Job.created_at >= query.since, Job.created_at < query.until]
    if query.key is not None:
        found.append(Job.key_id == query.key)
    if query.team is not None:
        found.append(Job.team == query.team)
    if query.pattern is not None:
        found.append(Job.source_name == query.pattern)
    if query.provider is not None:
        found.append(Job.provider == query.provider)
    if query.model is not None:
        provider, _, model = query.model.partition("/")
        found.append(and_(Job.provider == provider, Job.model == model))
    return found


def _totals(values: dict[str, Any]) -> dict[str, Any]:
    """One result row's sums as UsageTotals fields (integers and floats, whatever the driver)."""
    sums = {name: (float if name in _FLOATS else int)(values[name]) for name in _SUMS}
    statuses = {status: int(values[f"n_{status}"]) for status in JOB_STATUSES}
    return {"requests": int(values["requests"]), "statuses": statuses, **sums}


def _group_key(row: Any, dimensions: Sequence[str]) -> tuple[str | None, ...]:
    return tuple(_value(row[f"g_{name}"]) for name in dimensions)


def _row_sums(row: Any) -> dict[str, Any]:
    sums = {name: (float if name in _FLOATS else int)(row[name]) for name in _SUMS}
    sums["requests"] = int(row["requests"])
    for status in JOB_STATUSES:
        sums[f"n_{status}"] = int(row[f"n_{status}"])
    return sums


def _added(into: dict[str, Any], more: dict[str, Any]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, 0) + value


def _with_overhead(histogram: Mapping[int, int]) -> dict[str, float | None]:
    return {
        "overhead_p50_ms": percentile(histogram, 0.5),
        "overhead_p99_ms": percentile(histogram, 0.99),
    }


class UsageRepository:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def groups(self, query: UsageQuery) -> list[UsageGroup]:
        """One entry per group of `query.group_by`; see `report`."""
        return (await self.report(query))[0]

    @store_seam
    async def report(self, query: UsageQuery) -> tuple[list[UsageGroup], UsageTotals]:
        """One entry per group of `query.group_by` (one in all when it is empty), ordered by
        the groups' values, nulls last; and their totals.

        The database groups by the dimensions and the overhead's histogram bucket too (a
        group's rows are at most its buckets in use), so percentiles come out of the same one
        pass over the index; the rows of a group are added up here."""
        keys = [DIMENSIONS[name].label(f"g_{name}") for name in query.group_by]
        # The overhead's histogram only when asked: it multiplies the rows grouped.
        bucket = (bucket_expression() if query.overhead else null()).label("overhead_bucket")
        statuses = [
            func.count(case((Job.status == status, 1), else_=None)).label(f"n_{status}")
            for status in JOB_STATUSES
        ]
        sums = [column.label(name) for name, column in _SUMS.items()]
        statement = (
            select(
                *keys,
                bucket,
                func.count().label("requests"),
                func.max(Job.created_at).label("last_at"),
                *statuses,
                *sums,
            )
            .where(*_filters(query))
            .group_by(*keys, *([bucket] if query.overhead else []))
            .order_by(*(key.asc().nulls_last() for key in keys))
        )
        if query.key is None and query.team is None:
            # SQLite would pick ix_jobs_key_created or ix_jobs_team_created to group in index
            # order, then read every row of the window from the table (3 s, not 1, on a million
            # jobs); the covering index reads none. PostgreSQL's planner weighs this itself.
            statement = statement.with_hint(Job, "INDEXED BY ix_jobs_usage", "sqlite")
        async with self._sessions() as session:
            rows = (await session.execute(statement)).mappings().all()
        # dicts keep the database's order of the groups (the ORDER BY above).
        found: dict[tuple[str | None, ...], dict[str, Any]] = {}
        histograms: dict[tuple[str | None, ...], dict[int, int]] = {}
        last_at: dict[tuple[str | None, ...], dt.datetime | None] = {}
        for row in rows:
            if not row["requests"]:  # no group_by over no jobs: one row of zeros
                continue
            group = _group_key(row, query.group_by)
            seen = last_at.get(group)
            last_at[group] = row["last_at"] if seen is None else max(seen, row["last_at"])
            _added(found.setdefault(group, {}), _row_sums(row))
            histogram = histograms.setdefault(group, {})
            if row["overhead_bucket"] is not None:
                histogram[int(row["overhead_bucket"])] = int(row["requests"])
        groups = [
            UsageGroup(
                group=dict(zip(query.group_by, group, strict=True)),
                last_at=last_at[group],
                **_totals(values),
                **(_with_overhead(histograms[group]) if query.overhead else {}),
            )
            for group, values in found.items()
        ]
        totals = add_up(groups)
        if query.overhead:
            totals = totals.model_copy(update=_with_overhead(merged(histograms.values())))
        return groups, totals


def add_up(groups: list[UsageGroup]) -> UsageTotals:
    """The totals of disjoint groups: what a query without `group_by` would answer (its
    overhead percentiles aside: they do not add up, `report` merges the histograms)."""
    fields = ("requests", *_SUMS)
    sums: dict[str, Any] = {name: sum(getattr(g, name) for g in groups) for name in fields}
    statuses = {status: sum(g.statuses[status] for g in groups) for status in JOB_STATUSES}
    for name in _FLOATS:
        sums[name] = float(sums[name])
    return UsageTotals(statuses=statuses, **sums)
