"""The usage page's chart geometry and series (app/console/charts.py, usage_series.py): pure
numbers in, scales, ticks, paths and filled series out."""

from __future__ import annotations

import datetime as dt

import pytest

from app.console.charts import label, line_chart, nice_step, y_ticks
from app.console.usage_series import MOST_LINES, OTHER, bucket_labels, figure, summed_series


@pytest.mark.parametrize(
    ("span", "count", "step"), [(10, 4, 5), (1, 4, 0.5), (37, 4, 10), (0.03, 3, 0.01), (0, 4, 1)]
)
def test_steps_are_round(span: float, count: int, step: float) -> None:
    assert nice_step(span, count) == pytest.approx(step)


def test_y_ticks_start_at_zero_and_reach_past_the_highest_value() -> None:
    assert y_ticks(37) == (0, 10, 20, 30, 40)
    assert y_ticks(40) == (0, 10, 20, 30, 40)
    assert y_ticks(0.7)[-1] >= 0.7
    assert [label(v) for v in (0, 1500, 2_000_000, 0.125)] == ["0", "1.5k", "2M", "0.125"]


def test_a_line_chart_places_values_between_the_axes_and_breaks_at_gaps() -> None:
    chart = line_chart(["a", "b", "c", "d"], [("x", [0.0, 40.0, None, 20.0])])
    (line,) = chart.lines
    # Two segments: a gap lifts the pen, so the path has two moves.
    assert line.path.count("M") == 2 and line.path.count("L") == 1
    xs = [x for x, _ in line.dots]
    ys = [y for _, y in line.dots]
    assert xs[0] == chart.left and xs[-1] == chart.right
    assert ys[0] == chart.bottom  # zero sits on the axis
    assert ys[1] == chart.top  # 40 is the top tick
    assert ys[2] == pytest.approx((chart.top + chart.bottom) / 2)
    assert [t.label for t in chart.y_ticks] == ["0", "10", "20", "30", "40"]
    assert [t.label for t in chart.x_ticks] == ["a", "b", "c", "d"]


def test_a_long_axis_labels_a_few_evenly_spaced_buckets_and_a_single_value_gets_a_dot() -> None:
    labels = [str(n) for n in range(48)]
    chart = line_chart(labels, [("x", [1.0] * 48)], most_x_labels=6)
    assert len(chart.x_ticks) <= 6 and chart.x_ticks[0].label == "0"
    alone = line_chart(["only"], [("x", [3.0])])
    assert (
        len(alone.lines[0].dots) == 1
        and alone.lines[0].dots[0][0] == (alone.left + alone.right) / 2
    )
    empty = line_chart(["a", "b"], [("x", [None, None])])
    assert empty.lines[0].path == "" and empty.y_ticks[-1].label == "1"


def test_bucket_labels_cover_the_window_as_the_api_names_buckets() -> None:
    start = dt.datetime(2026, 11, 26, 22, 30, tzinfo=dt.UTC)
    end = dt.datetime(2026, 11, 27, 1, 5, tzinfo=dt.UTC)
    assert bucket_labels("hour", start, end) == [
        "2026-11-26T22:00:00Z",
        "2026-11-26T23:00:00Z",
        "2026-11-27T00:00:00Z",
        "2026-11-27T01:00:00Z",
    ]
    assert bucket_labels("day", start, end) == ["2026-11-26", "2026-11-27"]


def test_series_fill_missing_buckets_and_fold_small_groups_into_other() -> None:
    labels = ["d1", "d2"]
    groups = [
        {"group": {"day": "d1", "key": f"k{n}"}, "requests": 10 - n} for n in range(MOST_LINES + 2)
    ]
    groups.append({"group": {"day": "d2", "key": "k0"}, "requests": 5})
    series = dict(summed_series(labels, groups, "day", "key", lambda g: float(g["requests"])))
    assert list(series) == [*(f"k{n}" for n in range(MOST_LINES - 1)), OTHER]
    assert series["k0"] == [10.0, 5.0]
    assert series["k1"] == [9.0, 0.0]  # no jobs on d2: zero, not a gap
    hidden = range(MOST_LINES - 1, MOST_LINES + 2)
    assert series[OTHER] == [float(sum(10 - n for n in hidden)), 0.0]


def test_a_figure_table_leaves_out_empty_buckets() -> None:
    shown = figure("r", "Requests", "Jobs", ["a", "b", "c"], [("x", [1.0, 0.0, None])])
    assert shown.rows == (("a", (1.0,)),) and shown.columns == ("x",)
