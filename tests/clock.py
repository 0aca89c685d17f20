"""Moments a test may pin, always relative to the real clock.

A test that pins a calendar date (`NOON = 2026-11-26 12:00`) meets things that keep real time:
Redis expires a counter at an absolute instant, PostgreSQL's `now()` and SQLite's
`CURRENT_TIMESTAMP` judge windows, retention cuts off "90 days ago", keys and sessions expire.
The day after the pinned date passes such an expiry, the test silently tests nothing or fails (issue
28: the Redis quota counters were deleted the moment they were written). So every pinned moment
here is a time of day *tomorrow* or a number of days *ago*, reckoned from the real now: far enough
ahead that a real clock has not reached it while the test runs, and on any date the suite is run.
`faketime` moves the whole process (`tests/test_clock.py` runs the time-sensitive files that way).
"""

from __future__ import annotations

import datetime as dt


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def tomorrow_at(hour: int, minute: int = 0, second: int = 0) -> dt.datetime:
    """That time of day (UTC) tomorrow: a moment every real clock still sees as ahead."""
    day = utc_now().date() + dt.timedelta(days=1)
    return dt.datetime(day.year, day.month, day.day, hour, minute, second, tzinfo=dt.UTC)


def days_ago(days: int, *, hour: int = 12, minute: int = 0) -> dt.datetime:
    """That time of day (UTC) `days` days before today: a moment in the recent past."""
    day = utc_now().date() - dt.timedelta(days=days)
    return dt.datetime(day.year, day.month, day.day, hour, minute, tzinfo=dt.UTC)


def iso_day(moment: dt.datetime | dt.date) -> str:
    """The moment's date as a query parameter spells it (`2026-11-26`)."""
    return moment.strftime("%Y-%m-%d")
