"""Number formats shared by chart axes, tooltips and tables, so a value reads the same everywhere on the page."""

from __future__ import annotations

import math
from typing import Any, Literal

Format = Literal["auto", "percent", "int", "si", "float", "seconds", "text"]


def is_missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def fmt(v: Any, kind: Format = "auto", *, axis: bool = False) -> str:
    """Format one value. `axis=True` gives the short form used on tick labels (e.g. 1.2M rather than 1,200,000)."""
    if is_missing(v):
        return "–"
    if kind == "text" or isinstance(v, str) or isinstance(v, bool):
        return str(v)
    if kind == "auto":
        kind = "int" if isinstance(v, int) or float(v).is_integer() else "float"
    x = float(v)
    if kind == "percent":
        digits = 0 if axis else 1
        return f"{x * 100:.{digits}f}%"
    if kind == "seconds":
        return _seconds(x)
    if kind == "si" or (kind == "int" and axis):
        return _si(x)
    if kind == "int":
        return f"{round(x):,}"
    return _sig(x, 3 if axis else 4)


def _sig(x: float, digits: int) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 10**digits:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def _si(x: float) -> str:
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{_sig(x / div, 3)}{suffix}"
    return _sig(x, 3) if not float(x).is_integer() else f"{int(x)}"


def _seconds(x: float) -> str:
    if abs(x) < 120:
        return f"{_sig(x, 3)} s"
    if abs(x) < 7200:
        return f"{_sig(x / 60, 3)} min"
    return f"{_sig(x / 3600, 3)} h"


def fmt_interval(lo: Any, hi: Any, kind: Format = "auto") -> str:
    """A compact interval for table cells: '65.3–82.0' for rates (the % is on the value beside it)."""
    if is_missing(lo) or is_missing(hi):
        return ""
    if kind == "percent":
        return f"{float(lo) * 100:.1f}–{float(hi) * 100:.1f}"
    return f"{fmt(lo, kind)}–{fmt(hi, kind)}"


def axis_scale(kind: Format, hi: float) -> float:
    """The unit that tick values should be round numbers of (minutes for long durations, else 1)."""
    if kind == "seconds":
        return 3600.0 if abs(hi) >= 7200 else 60.0 if abs(hi) >= 120 else 1.0
    return 1.0


def axis_labels(ticks: list[float], kind: Format) -> list[str]:
    """Tick labels in one consistent unit (all minutes, not '60 s' next to '2 min')."""
    if kind == "seconds" and ticks:
        unit = axis_scale(kind, max(abs(t) for t in ticks))
        suffix = {1.0: "s", 60.0: "min", 3600.0: "h"}[unit]
        return [f"{_sig(t / unit, 3)} {suffix}" if t else "0" for t in ticks]
    return [fmt(t, kind, axis=True) for t in ticks]
