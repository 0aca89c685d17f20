"""Usage reports (`GET /v1/usage` grouped by a time bucket) turned into the series the usage
page draws: one value per bucket for each group, gaps filled, the smaller groups summed as
"other" so a chart keeps a few readable lines."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.console.charts import Chart, line_chart

MOST_LINES = 6
OTHER = "other"
_STEP = {"hour": dt.timedelta(hours=1), "day": dt.timedelta(days=1)}

Value = Callable[[Mapping[str, Any]], float | None]


def errors_of(totals: Mapping[str, Any]) -> float:
    """Jobs that ended in an error: failed, or interrupted by a crash."""
    statuses = totals.get("statuses", {})
    return float(statuses.get("failed", 0) + statuses.get("interrupted", 0))


def tokens_of(totals: Mapping[str, Any]) -> float:
    """Every token billed: plain, cached and cache-write input, and output."""
    kinds = ("input_tokens", "cached_input_tokens", "cache_write_tokens", "output_tokens")
    return float(sum(totals.get(kind, 0) for kind in kinds))


def bucket_labels(bucket: str, start: dt.datetime, end: dt.datetime) -> list[str]:
    """Every bucket of the window, as the API names them (`2026-11-27`, `2026-11-27T08:00:00Z`)."""
    step = _STEP[bucket]
    at = start.astimezone(dt.UTC)
    if bucket == "day":
        at = at.replace(hour=0, minute=0, second=0, microsecond=0)
    else:
        at = at.replace(minute=0, second=0, microsecond=0)
    labels = []
    while at < end:
        labels.append(at.strftime("%Y-%m-%d" if bucket == "day" else "%Y-%m-%dT%H:00:00Z"))
        at += step
    return labels


def group_name(group: Mapping[str, Any], dimension: str | None) -> str:
    if dimension is None:
        return "all"
    value = group.get(dimension)
    return "(none)" if value is None else str(value)


def top_groups(groups: Sequence[Mapping[str, Any]], dimension: str | None) -> list[str]:
    """The groups with most requests over the window, at most MOST_LINES - 1 when an "other"
    line is needed for the rest; ties by name."""
    requests: dict[str, int] = {}
    for entry in groups:
        name = group_name(entry["group"], dimension)
        requests[name] = requests.get(name, 0) + int(entry["requests"])
    ranked = sorted(requests, key=lambda name: (-requests[name], name))
    return ranked if len(ranked) <= MOST_LINES else ranked[: MOST_LINES - 1]


@dataclass(frozen=True, slots=True)
class Figure:
    """One chart and the same numbers as a table (rows: buckets, columns: lines)."""

    slug: str
    title: str
    description: str
    chart: Chart
    columns: tuple[str, ...]
    rows: tuple[tuple[str, tuple[float | None, ...]], ...]


def summed_series(
    labels: Sequence[str],
    groups: Sequence[Mapping[str, Any]],
    bucket: str,
    dimension: str | None,
    value: Value,
) -> list[tuple[str, list[float | None]]]:
    """A line per top group (and "other"), each bucket's value summed, 0 where no jobs."""
    shown = top_groups(groups, dimension)
    names = shown + ([OTHER] if len(shown) < len(top_groups_all(groups, dimension)) else [])
    index = {label: at for at, label in enumerate(labels)}
    series: dict[str, list[float | None]] = {name: [0.0] * len(labels) for name in names}
    for entry in groups:
        at = index.get(str(entry["group"].get(bucket)))
        if at is None:
            continue
        name = group_name(entry["group"], dimension)
        line = series[name if name in shown else OTHER]
        line[at] = (line[at] or 0.0) + (value(entry) or 0.0)
    return list(series.items())


def top_groups_all(groups: Sequence[Mapping[str, Any]], dimension: str | None) -> set[str]:
    return {group_name(entry["group"], dimension) for entry in groups}


def point_series(
    labels: Sequence[str],
    groups: Sequence[Mapping[str, Any]],
    bucket: str,
    fields: Sequence[tuple[str, str]],
) -> list[tuple[str, list[float | None]]]:
    """Lines of values that do not add up (percentiles), from a report grouped by the bucket
    alone; None where a bucket had no finished jobs."""
    index = {label: at for at, label in enumerate(labels)}
    series: dict[str, list[float | None]] = {name: [None] * len(labels) for name, _ in fields}
    for entry in groups:
        at = index.get(str(entry["group"].get(bucket)))
        if at is not None:
            for name, field in fields:
                series[name][at] = entry.get(field)
    return list(series.items())


def figure(
    slug: str,
    title: str,
    description: str,
    labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None]]],
) -> Figure:
    """The chart and its table; the table leaves out buckets where every line is 0 or empty."""
    rows = tuple(
        (label, values)
        for at, label in enumerate(labels)
        if any(values := tuple(line[at] for _, line in series))
    )
    return Figure(
        slug=slug,
        title=title,
        description=description,
        chart=line_chart(labels, series),
        columns=tuple(name for name, _ in series),
        rows=rows,
    )
