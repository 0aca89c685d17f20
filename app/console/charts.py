"""The geometry of the console's charts: scales, ticks and paths for a line chart drawn as
inline SVG by a template (no script, no chart library, nothing from another origin).

Pure functions of numbers, so they are tested without a page; the template only places what
they return.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

WIDTH = 640
HEIGHT = 240
_LEFT, _RIGHT, _TOP, _BOTTOM = 72, 16, 12, 28  # room for the axis labels
# Distinguishable for common colour blindness (Okabe-Ito); lines also differ by dash pattern,
# and the table beneath every chart gives the numbers, so colour is never the only cue.
COLOURS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000")
DASHES = ("", "6 3", "2 3", "8 3 2 3", "1 2", "10 4", "4 4")


@dataclass(frozen=True, slots=True)
class Tick:
    at: float  # pixels along the axis
    label: str


@dataclass(frozen=True, slots=True)
class Line:
    name: str
    path: str  # an SVG path's `d`; a gap (a missing value) starts a new segment
    colour: str
    dash: str
    dots: tuple[tuple[float, float], ...]  # each value's point, for a series of one value


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    left: int
    right: int  # x of the plot's right edge
    top: int
    bottom: int  # y of the plot's bottom edge
    y_ticks: tuple[Tick, ...]
    x_ticks: tuple[Tick, ...]
    lines: tuple[Line, ...]


def nice_step(span: float, count: int) -> float:
    """A round step (1, 2 or 5 times a power of ten) giving about `count` ticks over `span`."""
    if span <= 0 or count < 1:
        return 1.0
    raw = span / count
    power = 10.0 ** math.floor(math.log10(raw))
    for multiple in (1, 2, 5, 10):
        if raw <= multiple * power:
            return float(multiple * power)
    return float(10 * power)  # unreachable: raw <= 10 * power by the choice of power


def y_ticks(top_value: float, count: int = 4) -> tuple[float, ...]:
    """Values from 0 up to at least `top_value` in round steps; the last is the axis' top."""
    step = nice_step(top_value, count)
    steps = max(1, math.ceil(top_value / step - 1e-9))
    return tuple(round(step * index, 10) for index in range(steps + 1))


def label(value: float) -> str:
    """A tick's text: short (1.5k, 2M), no trailing zeros."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.4g}{suffix}"
    return f"{value:.4g}"


def _x_positions(count: int, left: int, right: int) -> list[float]:
    if count == 1:
        return [(left + right) / 2]
    return [left + (right - left) * index / (count - 1) for index in range(count)]


def _x_ticks(labels: Sequence[str], xs: Sequence[float], most: int) -> tuple[Tick, ...]:
    """At most `most` evenly spaced labels, the first and last included when there is room."""
    if not labels:
        return ()
    every = max(1, math.ceil(len(labels) / most))
    chosen = range(0, len(labels), every)
    return tuple(Tick(round(xs[index], 2), labels[index]) for index in chosen)


def _path(points: Sequence[tuple[float, float] | None]) -> str:
    parts: list[str] = []
    pen_down = False
    for point in points:
        if point is None:
            pen_down = False
            continue
        parts.append(f"{'L' if pen_down else 'M'}{point[0]:.2f} {point[1]:.2f}")
        pen_down = True
    return " ".join(parts)


def line_chart(
    x_labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None]]],
    *,
    width: int = WIDTH,
    height: int = HEIGHT,
    most_x_labels: int = 6,
) -> Chart:
    """Lines over shared x positions (one per label); None is a gap. The y axis starts at 0."""
    left, right, top, bottom = _LEFT, width - _RIGHT, _TOP, height - _BOTTOM
    values = [value for _, points in series for value in points if value is not None]
    highest = max(values, default=0.0)
    ticks = y_ticks(highest if highest > 0 else 1.0)
    ceiling = ticks[-1]
    xs = _x_positions(len(x_labels), left, right)

    def y_of(value: float) -> float:
        return bottom - (bottom - top) * value / ceiling

    lines = []
    for index, (name, points) in enumerate(series):
        placed = [
            None if value is None else (xs[at], y_of(value))
            for at, value in enumerate(points[: len(xs)])
        ]
        lines.append(
            Line(
                name=name,
                path=_path(placed),
                colour=COLOURS[index % len(COLOURS)],
                dash=DASHES[index % len(DASHES)],
                dots=tuple((round(x, 2), round(y, 2)) for x, y in filter(None, placed)),
            )
        )
    return Chart(
        width=width,
        height=height,
        left=left,
        right=right,
        top=top,
        bottom=bottom,
        y_ticks=tuple(Tick(round(y_of(value), 2), label(value)) for value in ticks),
        x_ticks=_x_ticks(x_labels, xs, most_x_labels),
        lines=tuple(lines),
    )
