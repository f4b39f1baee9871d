"""The SVG chart primitives: ticks, gaps, intervals, empty input, escaping."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from dashboards.format import axis_labels, fmt
from dashboards.svg import ChartOptions, Point, Series, chart_svg, nice_ticks


@given(st.floats(-1e6, 1e6), st.floats(0, 1e6))
def test_nice_ticks_cover_the_range(lo: float, span: float) -> None:
    ticks = nice_ticks(lo, lo + span, 5)
    tol = 1e-6 * max(1.0, span, abs(lo))  # float noise, far below a pixel
    assert ticks[0] <= lo + tol and ticks[-1] >= lo + span - tol
    assert 2 <= len(ticks) <= 12
    assert ticks == sorted(ticks)


def test_integer_ticks_are_integers() -> None:
    assert all(float(t).is_integer() for t in nice_ticks(0, 3, 5, integer=True))
    assert axis_labels([0, 300, 600, 900], "seconds") == ["0", "5 min", "10 min", "15 min"]
    assert fmt(0.4567, "percent") == "45.7%" and fmt(1_234_567, "int") == "1,234,567"
    assert fmt(1_234_567, "int", axis=True) == "1.23M"


def test_line_breaks_at_missing_values_and_draws_bands() -> None:
    s = Series("a", "#000", (Point(1, 0.2, 0.1, 0.3), Point(2, None), Point(3, 0.5, 0.4, 0.6), Point(4, 0.6, 0.5, 0.7)))
    svg = chart_svg([s], ChartOptions(kind="line", y_format="percent", y_min=0, y_max=1))
    lines = re.findall(r'class="mark line" d="([^"]+)"', svg)
    assert len(lines) == 2 and lines[0].count("L") == 0 and lines[1].count("L") == 1
    assert 'class="mark band"' in svg
    assert svg.count('class="mark pt"') == 3


def test_whiskers_and_bars() -> None:
    s = Series("a", "#000", (Point(1, 0.2, 0.1, 0.3), Point(2, 0.5, 0.4, 0.6)))
    svg = chart_svg([s], ChartOptions(kind="line", interval_style="whisker"))
    assert svg.count('class="mark whisker"') == 2 and 'class="mark band"' not in svg
    a = Series("x", "#111", (Point("r1", 3), Point("r2", 4)))
    b = Series("y", "#222", (Point("r1", 1), Point("r2", 0)))
    stacked = chart_svg([a, b], ChartOptions(kind="bar", stacked=True, categories=("r1", "r2")))
    assert stacked.count('class="mark bar"') == 3  # a zero part of a stack draws nothing
    hbar = chart_svg([a], ChartOptions(kind="hbar", categories=("r1", "r2")))
    assert hbar.count('class="mark bar"') == 2


def test_nothing_to_draw_is_empty_and_labels_are_escaped() -> None:
    assert chart_svg([], ChartOptions()) == ""
    assert chart_svg([Series("a", "#000", (Point(1, None),))], ChartOptions()) == ""
    s = Series("<script>x</script>", "#000", (Point("<b>", 1.0),))
    svg = chart_svg([s], ChartOptions(kind="bar", categories=("<b>",)))
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "<b>" not in svg
