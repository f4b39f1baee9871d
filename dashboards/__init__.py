"""Dashboard panels (a DuckDB query plus a chart spec each, in panels/) and the self-contained HTML page."""

from dashboards.render import render_dashboard

__all__ = ["render_dashboard"]
