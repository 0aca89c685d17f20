"""The console benchmark's reading of what its visitor saw: a page not built yet is reported as
missing (not a failure), an error page is a failure, and the percentiles are measured samples."""

from __future__ import annotations

import datetime as dt

from bench.console_pages import ConsoleRun, _rank, _timing, console_tables
from bench.console_rows import COLUMNS, Sources, job_rows


def _raw(statuses: dict[str, int], server: list[float], wall: list[float]) -> dict[str, object]:
    return {
        "path": "/console/x",
        "statuses": statuses,
        "server_ms": server,
        "wall_ms": wall,
        "bytes": 2048,
    }


def test_a_page_that_answers_404_every_time_is_missing_and_not_a_failure() -> None:
    page = _timing("x", _raw({"404": 3}, [0.5] * 3, [1.0] * 3), visits=3)
    assert page.status == "missing"
    assert not page.failed
    assert page.server_p50 is None


def test_an_error_or_a_mixed_answer_is_a_failure() -> None:
    assert _timing("x", _raw({"500": 3}, [1.0] * 3, [2.0] * 3), visits=3).failed
    mixed = _timing("x", _raw({"200": 2, "500": 1}, [1.0] * 3, [2.0] * 3), visits=3)
    assert mixed.status == "mixed 2 x 200, 1 x 500"
    assert mixed.failed


def test_percentiles_are_samples_that_were_measured() -> None:
    samples = [float(n) for n in range(1, 101)]
    assert _rank(samples, 0.5) == 50.0
    assert _rank(samples, 0.99) == 99.0
    assert _rank([7.0, 3.0], 0.99) == 7.0
    page = _timing("jobs", _raw({"200": 100}, samples, [s + 1 for s in samples]), visits=100)
    assert (page.status, page.server_p50, page.wall_p99, page.kilobytes) == (
        "200",
        50.0,
        100.0,
        2.0,
    )


def test_the_table_has_a_row_per_page_with_its_status() -> None:
    pages = [
        _timing("home", _raw({"200": 2}, [4.0, 6.0], [5.0, 7.0]), visits=2),
        _timing("keys", _raw({"404": 2}, [], [1.0, 1.0]), visits=2),
    ]
    lines = console_tables([ConsoleRun("sqlite", 2000, 2, 1.0, pages)])
    assert "| home | `/console/x` | 200 | 4.0 | 6.0 | 5.0 | 7.0 | 2.0 |" in lines
    assert "| keys | `/console/x` | missing | — | — | — | — | — |" in lines


def test_the_jobs_are_deterministic_and_span_the_year() -> None:
    now = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    sources = Sources(["a", "b/c"], [("t", "writer")], [("k1", "team"), ("k2", None)], ["s1", "s2"])
    first = list(job_rows(500, now, sources))
    assert first == list(job_rows(500, now, sources))
    assert all(len(row) == len(COLUMNS) for row in first)
    created = [row[COLUMNS.index("created_at")] for row in first]
    assert max(created) <= now and min(created) > now - dt.timedelta(days=366)
    assert {row[COLUMNS.index("status")] for row in first} >= {"completed", "failed", "cached"}
