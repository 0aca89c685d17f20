"""GET /v1/usage over time and the gateway's overhead: hourly groups and p50/p99 of latency
minus upstream time, computed by the database on SQLite and PostgreSQL from real completions
whose timings are then set to known values (issue 21, the console's usage charts)."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from app.config import UpstreamSettings
from app.store.overhead import BOUNDS_MS, merged, percentile
from app.store.tables import Job
from tests.clock import days_ago, iso_day
from tests.fakes.provider_server import FakeProviderServer
from tests.support import running_app, settings_for

SUMMARIZE = {"pattern_key": "summarize", "variables": {"max_words": 10}, "user_prompt": "Hi."}
HOUR = days_ago(2, hour=9)


def _width_at(value: float) -> float:
    """The width of the histogram bucket holding `value`: how far an estimate may be off."""
    lower = 0.0
    for bound in BOUNDS_MS:
        if value < bound:
            return bound - lower
        lower = bound
    raise AssertionError(value)


def test_a_percentile_is_interpolated_inside_its_bucket() -> None:
    assert percentile({}, 0.5) is None
    # 100 jobs in the first bucket [0, 0.1): the median is halfway through it.
    assert percentile({0: 100}, 0.5) == pytest.approx(0.05, abs=1e-3)
    # 99 fast, 1 slow: p50 is fast, p99 is the last fast one's bucket edge, p100 the slow one.
    histogram = {10: 99, 40: 1}
    assert BOUNDS_MS[9] <= (percentile(histogram, 0.5) or 0) < BOUNDS_MS[10]
    assert percentile(histogram, 0.99) == pytest.approx(BOUNDS_MS[10], abs=1e-3)
    assert BOUNDS_MS[39] <= (percentile(histogram, 1.0) or 0) <= BOUNDS_MS[40]
    assert percentile({len(BOUNDS_MS): 3}, 0.5) == BOUNDS_MS[-1]  # the open last bucket
    assert merged([{1: 2, 3: 1}, {1: 1}]) == {1: 3, 3: 1}


@pytest.fixture
async def http(fake: FakeProviderServer, database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    upstream = UpstreamSettings(timeout_seconds=30.0, max_retries=0)
    settings = settings_for(
        fake, database_url=database_url, database_auto_migrate=True, upstream=upstream
    )
    async with running_app(settings) as (app, client):
        ids = []
        for _ in range(10):
            resp = await client.post("/v1/completions", json=SUMMARIZE)
            assert resp.status_code == 200, resp.text
            ids.append(resp.json()["job_id"])
        await app.state.runtime.writer.catch_up()
        # Overheads 1..9 ms in hour 9, one of 500 ms in hour 11 (jobs' real timings vary).
        async with app.state.runtime.database.sessions.begin() as session:
            for n, job_id in enumerate(ids):
                at = HOUR + dt.timedelta(hours=2 if n == 9 else 0, minutes=n)
                overhead = 500.0 if n == 9 else float(n + 1)
                await session.execute(
                    update(Job)
                    .where(Job.id == job_id)
                    .values(created_at=at, latency_ms=overhead + 40.0, upstream_latency_ms=40.0)
                )
        yield client


async def _usage(http: httpx.AsyncClient, **params: str) -> dict[str, Any]:
    resp = await http.get(
        "/v1/usage",
        params={"from": iso_day(HOUR), "to": iso_day(HOUR + dt.timedelta(days=1)), **params},
    )
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


async def test_usage_by_hour_gives_each_hour_its_overhead_percentiles(
    http: httpx.AsyncClient,
) -> None:
    report = await _usage(http, group_by="hour", overhead="true")
    hours = {group["group"]["hour"]: group for group in report["groups"]}
    assert list(hours) == [f"{iso_day(HOUR)}T09:00:00Z", f"{iso_day(HOUR)}T11:00:00Z"]
    nine, eleven = hours.values()
    assert nine["requests"] == 9 and eleven["requests"] == 1
    assert abs(nine["overhead_p50_ms"] - 5.0) <= _width_at(5.0)
    assert abs(nine["overhead_p99_ms"] - 9.0) <= _width_at(9.0)
    assert abs(eleven["overhead_p50_ms"] - 500.0) <= _width_at(500.0)
    # The totals merge the hours' histograms: the median is still a fast job, p99 the slow one.
    totals = report["totals"]
    assert totals["requests"] == 10
    assert abs(totals["overhead_p50_ms"] - 5.5) <= _width_at(5.5)
    assert abs(totals["overhead_p99_ms"] - 500.0) <= _width_at(500.0)


async def test_an_hourly_report_is_bounded_and_percentiles_come_only_when_asked(
    http: httpx.AsyncClient,
) -> None:
    resp = await http.get(
        "/v1/usage", params={"group_by": "hour", "from": iso_day(days_ago(90)), "to": iso_day(HOUR)}
    )
    assert resp.status_code == 422
    assert "31 days" in resp.text
    # The same window by day is fine, and the groups still add up to the totals; without
    # `overhead` the percentiles are not computed.
    report = await _usage(http, group_by="day,model")
    assert sum(group["requests"] for group in report["groups"]) == report["totals"]["requests"]
    assert report["totals"]["overhead_p50_ms"] is None
    assert {group["overhead_p99_ms"] for group in report["groups"]} == {None}
