"""Turn queried panels into view models (SVG charts, legends, number tables, empty states) and the HTML page."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from markupsafe import Markup, escape

from dashboards.data import PanelData, build_series, facets, series_names
from dashboards.format import fmt, fmt_interval
from dashboards.svg import ChartOptions, chart_svg, color_for

TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclass(frozen=True)
class ChartView:
    title: str
    svg: Markup


@dataclass(frozen=True)
class TableView:
    headers: list[str]
    rows: list[list[tuple[str, bool, str]]]  # (formatted cell, left-aligned text?, 95% interval or "")


@dataclass(frozen=True)
class PanelView:
    id: str
    title: str
    description: str
    state: str  # ok | empty | error
    sql_path: str
    ms: str
    message: Markup = Markup("")
    legend: list[tuple[str, str]] = field(default_factory=list)
    charts: list[ChartView] = field(default_factory=list)
    table: TableView = TableView([], [])
    wide: bool = False


def with_code(text: str) -> Markup:
    """Escape text and show `backticked` commands as code."""
    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", str(escape(text))))  # noqa: S704 - escaped first


def panel_view(data: PanelData) -> PanelView:
    sp = data.spec
    base = dict(
        id=sp.id,
        title=sp.title,
        description=sp.description,
        sql_path=sp.sql_path,
        ms=f"{data.seconds * 1000:.0f}",
        wide=sp.wide,
    )
    if data.error:
        return PanelView(**base, state="error", message=escape(data.error))
    names = series_names(data)
    charts = []
    groups = facets(data)
    for facet, rows in groups:
        series, cats = build_series(data, rows, names)
        opts = _options(data, facet, cats, small=len(groups) > 1)
        svg = chart_svg(series, opts)
        if svg:
            charts.append(ChartView(facet or "", Markup(svg)))  # noqa: S704 - svg.py escapes every text it writes
    if not charts:
        return PanelView(**base, state="empty", message=with_code(sp.empty))
    legend = [(n, color_for(i, n, sp.colors)) for i, n in enumerate(names)] if sp.series else []
    return PanelView(**base, state="ok", legend=legend, charts=charts, table=table_view(data, names))


def _options(data: PanelData, facet: str | None, cats: list[Any], *, small: bool) -> ChartOptions:
    sp = data.spec
    width, height = (400, 240) if small else (640, 280)
    if sp.chart == "hbar":
        height = max(120, 26 * len(cats) + 44)
    return ChartOptions(
        kind=sp.chart,
        x_label=sp.x_label,
        y_label=sp.y_label,
        x_format=sp.x_format,
        y_format=sp.y_format,
        y_min=sp.y_min,
        y_max=sp.y_max,
        stacked=sp.stacked,
        interval_style=sp.interval_style,
        width=width,
        height=height,
        title=f"{sp.title}{f' – {facet}' if facet else ''}",
        categories=tuple(cats),
    )


def table_view(data: PanelData, names: list[str]) -> TableView:
    sp = data.spec
    pivot = sp.table.pivot if sp.table.pivot is not None else bool(sp.series) and sp.table_sql is None
    if pivot:
        return _pivot(data, names)
    rows = data.table_rows
    if sp.table.descending and rows and sp.x in rows[0] and all(isinstance(r[sp.x], (int, float)) for r in rows):
        rows = sorted(rows, key=lambda r: r[sp.x], reverse=True)
    cols = list(sp.table.columns) or (list(rows[0]) if rows else [])
    headers = [sp.table.columns.get(c, c) for c in cols]
    out = []
    for r in rows:
        out.append([_cell(r.get(c), sp.formats.get(c, _default_format(sp, c))) for c in cols])
    return TableView(headers, out)


def _default_format(sp: Any, col: str) -> str:
    if col == sp.x:
        return sp.x_format
    if col in (sp.y, sp.lo, sp.hi):
        return sp.y_format
    return "auto"


def _cell(v: Any, kind: str) -> tuple[str, bool, str]:
    return fmt(v, kind), isinstance(v, str), ""  # type: ignore[arg-type]


def _pivot(data: PanelData, names: list[str]) -> TableView:
    """Rows = (facet, x), one column per series: 'value [lo–hi]'. Newest first by default."""
    sp = data.spec
    cells: dict[tuple[Any, Any], dict[str, tuple[str, bool, str]]] = {}
    for r in data.table_rows:
        key = (r[sp.facet] if sp.facet else None, r[sp.x])
        name = str(r[sp.series]) if sp.series else names[0]
        ci = fmt_interval(r.get(sp.lo), r.get(sp.hi), sp.y_format) if sp.lo else ""
        cells.setdefault(key, {})[name] = (fmt(r[sp.y], sp.y_format), False, ci)
    keys = list(cells)
    if sp.table.descending and all(isinstance(k[1], (int, float)) for k in keys):
        keys.sort(key=lambda k: k[1], reverse=True)
    headers = ([sp.facet] if sp.facet else []) + [sp.x_label or sp.x] + names
    rows = []
    for k in keys:
        row = [(str(k[0]), True, "")] if sp.facet else []
        row.append((fmt(k[1], sp.x_format), isinstance(k[1], str), ""))
        row.extend(cells[k].get(n, ("–", False, "")) for n in names)
        rows.append(row)
    return TableView(headers, rows)


@lru_cache(maxsize=1)
def _template():  # noqa: ANN202
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]))
    return env.get_template("page.html")


def render_html(**context: Any) -> str:
    return _template().render(**context)
