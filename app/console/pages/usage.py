"""The usage page: requests, errors, overhead, tokens and cost over time, drawn from
`GET /v1/usage` as the signed-in key (a `complete` key's report is its own; the API sees to it)."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from fastapi import APIRouter, Query
from starlette.responses import HTMLResponse

from app.console.api import ApiError
from app.console.guard import VisitDep
from app.console.usage_series import (
    Figure,
    bucket_labels,
    errors_of,
    figure,
    group_name,
    point_series,
    summed_series,
    tokens_of,
)

router = APIRouter()

Grouping = Literal["", "key", "team", "pattern", "model"]
Bucket = Literal["hour", "day"]
GROUPINGS = (
    ("", "Nothing (totals)"),
    ("key", "Key"),
    ("team", "Team"),
    ("pattern", "Pattern"),
    ("model", "Model"),
)
GROUPING_NAMES: tuple[Grouping, ...] = ("", "key", "team", "pattern", "model")
# How far back a page starts when no date is given: a day of hours, a month of days.
DEFAULT_SPAN = {"hour": dt.timedelta(days=1), "day": dt.timedelta(days=30)}


def _start(bucket: Bucket, since: str, now: dt.datetime) -> dt.datetime:
    """00:00 UTC of the date asked for, or the default span back from now."""
    if not since:
        return now - DEFAULT_SPAN[bucket]
    try:
        day = dt.date.fromisoformat(since)
    except ValueError:
        raise ApiError(422, "invalid_request", f"{since!r} is not a date (2026-11-27).") from None
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)


def _figures(
    bucket: Bucket,
    dimension: str | None,
    labels: list[str],
    grouped: list[dict[str, Any]],
    by_time: list[dict[str, Any]],
) -> list[Figure]:
    """The five charts; each line is a group, the overhead's two are the percentiles."""

    def sums(value: Any) -> list[tuple[str, list[float | None]]]:
        return summed_series(labels, grouped, bucket, dimension, value)

    per = f"per {bucket}"
    overhead = point_series(
        labels, by_time, bucket, (("p50", "overhead_p50_ms"), ("p99", "overhead_p99_ms"))
    )
    return [
        figure("requests", f"Requests {per}", "Jobs started", labels, sums(_requests)),
        figure("errors", f"Errors {per}", "Jobs failed or interrupted", labels, sums(errors_of)),
        figure(
            "overhead",
            f"Gateway overhead {per} (ms)",
            "Latency minus upstream time, median and 99th percentile, all groups together",
            labels,
            overhead,
        ),
        figure(
            "tokens", f"Tokens {per}", "Input, cached and output tokens", labels, sums(tokens_of)
        ),
        figure("cost", f"Cost {per} (USD)", "At the configured prices", labels, sums(_cost)),
    ]


def _requests(totals: dict[str, Any]) -> float:
    return float(totals["requests"])


def _cost(totals: dict[str, Any]) -> float:
    return float(totals["cost_usd"])


@router.get("/usage")
async def usage_page(
    visit: VisitDep,
    group_by: str = Query(default="", max_length=20),
    bucket: str = Query(default="hour", max_length=10),
    since: str = Query(default="", max_length=40),
) -> HTMLResponse:
    # Unknown choices fall back to the defaults: the form only offers known ones.
    grouping: Grouping = next((g for g in GROUPING_NAMES if g == group_by), "")
    step: Bucket = "day" if bucket == "day" else "hour"
    now = dt.datetime.now(dt.UTC)
    dimension = grouping or None
    error: ApiError | None = None
    start = now - DEFAULT_SPAN[step]
    grouped: list[dict[str, Any]] = []
    by_time: list[dict[str, Any]] = []
    totals: dict[str, Any] | None = None
    try:
        start = _start(step, since.strip(), now)
        # Per bucket for the overhead's percentiles (they do not add up across groups) and the
        # totals; per bucket and group for the lines of everything else.
        report = await visit.api.get(
            "/v1/usage",
            group_by=step,
            overhead="true",
            **{"from": start.isoformat(), "to": now.isoformat()},
        )
        by_time, totals = report["groups"], report["totals"]
        if dimension is not None:
            report = await visit.api.get(
                "/v1/usage",
                group_by=f"{step},{dimension}",
                **{"from": start.isoformat(), "to": now.isoformat()},
            )
        grouped = report["groups"]
    except ApiError as exc:  # a window too long for hours, say: shown beside the form
        error = exc
    labels = bucket_labels(step, start, now) if error is None else []
    return visit.render(
        "usage.html",
        groupings=GROUPINGS,
        group_by=grouping,
        bucket=step,
        since=since,
        start=start,
        now=now,
        error=error,
        figures=_figures(step, dimension, labels, grouped, by_time) if error is None else [],
        totals=totals,
        breakdown=_breakdown(grouped, dimension) if dimension else [],
        dimension=dimension,
    )


def _breakdown(grouped: list[dict[str, Any]], dimension: str) -> list[tuple[str, dict[str, float]]]:
    """The window's sums per group, most requests first."""
    found: dict[str, dict[str, float]] = {}
    for entry in grouped:
        row = found.setdefault(
            group_name(entry["group"], dimension),
            {"requests": 0.0, "errors": 0.0, "tokens": 0.0, "cost": 0.0},
        )
        row["requests"] += entry["requests"]
        row["errors"] += errors_of(entry)
        row["tokens"] += tokens_of(entry)
        row["cost"] += entry["cost_usd"]
    return sorted(found.items(), key=lambda item: (-item[1]["requests"], item[0]))
