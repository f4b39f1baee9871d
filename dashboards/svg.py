"""Minimal server-side SVG charts: lines with 95% interval bands or whiskers, and stacked or grouped bars.

Why hand-rolled: the page must open with no network, so browser chart libraries that load JavaScript from a CDN
(Vega via altair) are out; matplotlib's SVG backend would be a new dependency for a few chart shapes that take a
few hundred lines of plain SVG and render in milliseconds. Every drawn element carries class="mark" and a <title>
tooltip, which the browser test counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape
from typing import Any, Literal

from dashboards.format import Format, axis_labels, axis_scale, fmt, is_missing

#: Tableau 10: distinct, readable on white, and kind to the common colour-vision deficiencies.
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f")
OTHER_COLOR = "#bab0ac"


@dataclass(frozen=True)
class Point:
    x: Any
    y: float | None
    lo: float | None = None
    hi: float | None = None


@dataclass(frozen=True)
class Series:
    name: str
    color: str
    points: tuple[Point, ...]


@dataclass(frozen=True)
class ChartOptions:
    kind: Literal["line", "bar", "hbar"] = "line"
    x_label: str = ""
    y_label: str = ""
    x_format: Format = "auto"
    y_format: Format = "auto"
    y_min: float | None = None
    y_max: float | None = None
    stacked: bool = False
    interval_style: Literal["band", "whisker"] = "band"
    markers: bool = True
    width: int = 640
    height: int = 280
    title: str = ""
    categories: tuple[Any, ...] = field(default_factory=tuple)  # bar charts: the x categories in order


def color_for(i: int, name: str, fixed: dict[str, str] | None = None) -> str:
    if fixed and name in fixed:
        return fixed[name]
    if name.lower() == "other":
        return OTHER_COLOR
    return PALETTE[i % len(PALETTE)]


def nice_ticks(lo: float, hi: float, n: int = 5, *, integer: bool = False) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2, 2.5 or 5 times a power of ten)."""
    if not math.isfinite(lo) or not math.isfinite(hi):
        return [0.0, 1.0]
    if hi - lo <= 1e-9 * max(1.0, abs(lo), abs(hi)):  # one value (or a difference below float noise)
        if abs(lo) < 1e-9:
            lo, hi = 0.0, 1.0
        else:
            lo, hi = (lo - 1, hi + 1) if integer else (lo - abs(lo) * 0.1, hi + abs(hi) * 0.1)
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = mag
    for m in (1, 2, 2.5, 5, 10):
        step = m * mag
        if (hi - lo) / step <= n:
            break
    if integer:
        step = max(1.0, round(step))
    start = math.floor(lo / step + 1e-9) * step
    ticks, t = [], start
    while t < hi - 1e-9 * step:
        ticks.append(t)
        t = start + len(ticks) * step
    ticks.append(t)
    return [round(v, 12) for v in ticks]


def _num(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _title(*parts: str) -> str:
    return f"<title>{escape(' · '.join(p for p in parts if p))}</title>"


def _text(x: float, y: float, s: str, *, anchor: str = "middle", cls: str = "tick", extra: str = "") -> str:
    return f'<text x="{_num(x)}" y="{_num(y)}" text-anchor="{anchor}" class="{cls}"{extra}>{escape(s)}</text>'


def _open(o: ChartOptions) -> str:
    label = escape(o.title or "chart")
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {o.width} {o.height}" role="img" '
        f'aria-label="{label}" class="chart" preserveAspectRatio="xMidYMid meet">'
    )


def _y_range(values: list[float], o: ChartOptions) -> tuple[float, float, list[float]]:
    lo = o.y_min if o.y_min is not None else min(values + [0.0] if o.kind != "line" else values)
    hi = o.y_max if o.y_max is not None else max(values)
    if o.y_min is None and o.kind == "line" and lo > 0 and lo < (hi - lo) * 0.6:
        lo = 0.0  # keep zero in view unless the data sit far from it (loss curves)
    unit = axis_scale(o.y_format, max(abs(lo), abs(hi)))
    ticks = [t * unit for t in nice_ticks(lo / unit, hi / unit, 5, integer=o.y_format in ("int", "si"))]
    if o.y_min is not None:
        ticks = [t for t in ticks if t >= o.y_min - 1e-12] or [o.y_min]
    if o.y_max is not None:
        ticks = [t for t in ticks if t <= o.y_max + 1e-12] or [o.y_max]
    return min(ticks[0], lo), max(ticks[-1], hi), ticks


def _left_margin(ticks: list[float], o: ChartOptions) -> float:
    longest = max((len(s) for s in axis_labels(ticks, o.y_format)), default=3)
    return 20 + 6.5 * longest + (14 if o.y_label else 0)


def _frame(
    o: ChartOptions, left: float, top: float, right: float, bottom: float, y_ticks: list[float], y_pos: Any
) -> list[str]:
    """Horizontal grid lines with y tick labels and the axis labels."""
    out = []
    for t, label in zip(y_ticks, axis_labels(y_ticks, o.y_format)):
        y = y_pos(t)
        out.append(f'<line x1="{_num(left)}" x2="{_num(right)}" y1="{_num(y)}" y2="{_num(y)}" class="grid"/>')
        out.append(_text(left - 6, y + 4, label, anchor="end"))
    out.append(f'<line x1="{_num(left)}" x2="{_num(right)}" y1="{_num(bottom)}" y2="{_num(bottom)}" class="axis"/>')
    if o.y_label:
        cy = (top + bottom) / 2
        out.append(_text(14, cy, o.y_label, cls="label", extra=f' transform="rotate(-90 14 {_num(cy)})"'))
    if o.x_label:
        out.append(_text((left + right) / 2, o.height - 6, o.x_label, cls="label"))
    return out


# ------------------------------------------------------------------------------------------------ line charts
def line_svg(series: list[Series], o: ChartOptions) -> str:
    """Lines over a numeric x, with the interval [lo, hi] as a shaded band or as whiskers at each point."""
    pts = [p for s in series for p in s.points if not is_missing(p.y)]
    if not pts:
        return ""
    ys = [p.y for p in pts] + [v for p in pts for v in (p.lo, p.hi) if not is_missing(v)]
    xs = [float(p.x) for p in pts]
    integer_x = all(float(x).is_integer() for x in xs)
    x_ticks = nice_ticks(min(xs), max(xs), 8, integer=integer_x)
    x0, x1 = min(xs), max(xs)
    if x0 == x1:
        x0, x1 = x0 - 1, x1 + 1
    x_ticks = [t for t in x_ticks if x0 - 1e-9 <= t <= x1 + 1e-9]
    y0, y1, y_ticks = _y_range(ys, o)
    left, right, top, bottom = _left_margin(y_ticks, o), o.width - 14, 10, o.height - (40 if o.x_label else 24)

    def X(v: float) -> float:
        return left + (float(v) - x0) / (x1 - x0) * (right - left)

    def Y(v: float) -> float:
        return bottom - (float(v) - y0) / ((y1 - y0) or 1) * (bottom - top)

    out = [_open(o), *_frame(o, left, top, right, bottom, y_ticks, Y)]
    for t in x_ticks:
        out.append(_text(X(t), bottom + 16, fmt(t, o.x_format, axis=True)))
    n_points = max(len(s.points) for s in series)
    style = o.interval_style if n_points <= 30 else "band"  # whiskers on every point of a long run are noise
    dodge = min(4.0, (right - left) / max(n_points, 1) / (len(series) + 1))
    for j, s in enumerate(series):
        name = escape(s.name)
        good = [p for p in s.points if not is_missing(p.y)]
        with_iv = [p for p in good if not is_missing(p.lo) and not is_missing(p.hi)]
        if with_iv and style == "band":
            upper = " ".join(f"{_num(X(p.x))},{_num(Y(p.hi))}" for p in with_iv)
            lower = " ".join(f"{_num(X(p.x))},{_num(Y(p.lo))}" for p in reversed(with_iv))
            out.append(
                f'<polygon class="mark band" points="{upper} {lower}" fill="{s.color}" fill-opacity="0.16">'
                f"{_title(s.name, '95% interval')}</polygon>"
            )
        elif with_iv:
            for p in with_iv:
                x = X(p.x) + (j - (len(series) - 1) / 2) * dodge  # side by side, not on top of each other
                out.append(
                    f'<path class="mark whisker" d="M{_num(x)},{_num(Y(p.lo))}V{_num(Y(p.hi))}'
                    f'M{_num(x - 2.5)},{_num(Y(p.lo))}h5M{_num(x - 2.5)},{_num(Y(p.hi))}h5" stroke="{s.color}"/>'
                )
        for seg in _segments(s.points):
            d = "M" + "L".join(f"{_num(X(p.x))},{_num(Y(p.y))}" for p in seg)
            out.append(
                f'<path class="mark line" d="{d}" stroke="{s.color}" data-series="{name}">{_title(s.name)}</path>'
            )
        if o.markers and n_points <= 60:
            for p in good:
                iv = "" if is_missing(p.lo) else f"95% CI {fmt(p.lo, o.y_format)}–{fmt(p.hi, o.y_format)}"
                at = f"{o.x_label or 'x'} {fmt(p.x, o.x_format)}"
                tip = _title(s.name, at, fmt(p.y, o.y_format), iv)
                out.append(
                    f'<circle class="mark pt" cx="{_num(X(p.x))}" cy="{_num(Y(p.y))}" r="3" fill="{s.color}">{tip}</circle>'
                )
    out.append("</svg>")
    return "".join(out)


def _segments(points: tuple[Point, ...]) -> list[list[Point]]:
    """Runs of consecutive points with a value (a missing value breaks the line rather than bridging it)."""
    segs: list[list[Point]] = [[]]
    for p in points:
        if is_missing(p.y):
            if segs[-1]:
                segs.append([])
        else:
            segs[-1].append(p)
    return [s for s in segs if s]


# ------------------------------------------------------------------------------------------------- bar charts
def bar_svg(series: list[Series], o: ChartOptions) -> str:
    """Bars per category: stacked (parts of a whole) or grouped (side by side, with optional whiskers)."""
    cats = list(o.categories)
    if not cats or not any(not is_missing(p.y) for s in series for p in s.points):
        return ""
    by = {(s.name, p.x): p for s in series for p in s.points}
    if o.stacked:
        totals = [sum(by[(s.name, c)].y or 0 for s in series if (s.name, c) in by) for c in cats]
        values = totals
    else:
        values = [v for p in by.values() for v in (p.y, p.hi) if not is_missing(v)]
    y0, y1, ticks = _y_range([float(v) for v in values] or [0.0], o)
    if o.kind == "hbar":
        return _hbar(series, cats, by, o, y0, y1, ticks)
    left, right, top = _left_margin(ticks, o), o.width - 10, 10
    bottom = o.height - (40 if o.x_label else 24)

    def Y(v: float) -> float:
        return bottom - (float(v) - y0) / ((y1 - y0) or 1) * (bottom - top)

    out = [_open(o), *_frame(o, left, top, right, bottom, ticks, Y)]
    band = (right - left) / len(cats)
    longest = max(len(fmt(c, o.x_format)) for c in cats)
    every = max(1, math.ceil(len(cats) * (6.5 * longest + 8) / (right - left)))
    numeric = all(isinstance(c, int) and not isinstance(c, bool) for c in cats)
    if numeric and every > 1:  # label round numbers (10, 20, ...) rather than every k-th bar
        every = next(s for s in (2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, every) if s >= every)
    for i, c in enumerate(cats):
        cx = left + band * (i + 0.5)
        if (c % every == 0) if numeric else (i % every == 0):
            out.append(_text(cx, bottom + 16, fmt(c, o.x_format)))
        out.extend(_bars_at(series, by, c, cx, band, o, Y, vertical=True))
    out.append("</svg>")
    return "".join(out)


def _bars_at(
    series: list[Series], by: dict, c: Any, center: float, band: float, o: ChartOptions, pos: Any, *, vertical: bool
) -> list[str]:
    out, acc = [], 0.0
    n = len(series)
    width = max(1.0, band * (0.72 if o.stacked else 0.8 / n))
    for j, s in enumerate(series):
        p = by.get((s.name, c))
        if p is None or is_missing(p.y) or p.y == 0 and o.stacked:
            continue
        if o.stacked:
            a, b = pos(acc), pos(acc + p.y)
            acc += p.y
            off = center - width / 2
        else:
            a, b = pos(0 if o.y_min is None else max(o.y_min, 0)), pos(p.y)
            off = center - band * 0.4 + j * width
        lo_px, hi_px = min(a, b), max(a, b)
        size = max(hi_px - lo_px, 0.8)
        tip = _title(
            s.name,
            fmt(c, o.x_format),
            fmt(p.y, o.y_format),
            "" if is_missing(p.lo) else f"95% CI {fmt(p.lo, o.y_format)}–{fmt(p.hi, o.y_format)}",
        )
        if vertical:
            rect = f'x="{_num(off)}" y="{_num(lo_px)}" width="{_num(width)}" height="{_num(size)}"'
        else:
            rect = f'x="{_num(lo_px)}" y="{_num(off)}" width="{_num(size)}" height="{_num(width)}"'
        out.append(f'<rect class="mark bar" {rect} fill="{s.color}">{tip}</rect>')
        if not o.stacked and not is_missing(p.lo) and not is_missing(p.hi):
            m, l, h = off + width / 2, pos(p.lo), pos(p.hi)
            d = f"M{_num(m)},{_num(l)}V{_num(h)}" if vertical else f"M{_num(l)},{_num(m)}H{_num(h)}"
            out.append(f'<path class="mark whisker" d="{d}" stroke="#333"/>')
    return out


def _hbar(series: list[Series], cats: list, by: dict, o: ChartOptions, x0: float, x1: float, ticks: list[float]) -> str:
    """Horizontal bars: long category labels (error types) stay readable on the left."""
    labels = [fmt(c, o.x_format) for c in cats]
    left = min(200.0, 12 + 6.4 * max(len(s) for s in labels))
    right, top = o.width - 16, 8
    bottom = o.height - (36 if o.y_label else 22)
    band = (bottom - top) / len(cats)

    def X(v: float) -> float:
        return left + (float(v) - x0) / ((x1 - x0) or 1) * (right - left)

    out = [_open(o)]
    for t, tick_label in zip(ticks, axis_labels(ticks, o.y_format)):
        x = X(t)
        out.append(f'<line x1="{_num(x)}" x2="{_num(x)}" y1="{_num(top)}" y2="{_num(bottom)}" class="grid"/>')
        out.append(_text(x, bottom + 14, tick_label))
    if o.y_label:
        out.append(_text((left + right) / 2, o.height - 4, o.y_label, cls="label"))
    max_chars = int((left - 12) / 6.4)
    for i, c in enumerate(cats):
        cy = top + band * (i + 0.5)
        label = labels[i] if len(labels[i]) <= max_chars else labels[i][: max_chars - 1] + "…"
        out.append(_text(left - 6, cy + 4, label, anchor="end", extra="") + "")
        out.extend(_bars_at(series, by, c, cy, band, o, X, vertical=False))
    out.append(f'<line x1="{_num(left)}" x2="{_num(left)}" y1="{_num(top)}" y2="{_num(bottom)}" class="axis"/>')
    out.append("</svg>")
    return "".join(out)


def chart_svg(series: list[Series], o: ChartOptions) -> str:
    """The SVG for one chart, or "" when there is nothing to draw (the caller shows the empty state)."""
    if not series:
        return ""
    return line_svg(series, o) if o.kind == "line" else bar_svg(series, o)
