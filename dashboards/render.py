"""`render_dashboard(lake, out_path)`: query every panel over one DuckDB connection and write one HTML page.

The page is self-contained (inline CSS and SVG, no scripts, no external URLs) so it opens from a file, an
artifact store or an e-mail with no network. Called by `flywheel dashboard` and at the end of every round.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dashboards.data import run_panel
from dashboards.format import fmt, is_missing
from dashboards.page import PanelView, panel_view, render_html
from dashboards.spec import PANELS_DIR, PanelSpec, load_panels
from schemas.tables import TABLES
from storage.lake import Lake

SUMMARY_SQL = Path(__file__).resolve().parent / "summary.sql"


@dataclass(frozen=True)
class Page:
    html: str
    panels: list[PanelView]
    seconds: float


def build_page(lake: Lake, panels: tuple[PanelSpec, ...] | None = None) -> Page:
    """Query all panels and return the page (HTML and each panel's state)."""
    t0 = time.perf_counter()
    specs = panels if panels is not None else load_panels(PANELS_DIR)
    versions = [(name, lake.version(name)) for name in TABLES]
    con = lake.duckdb()
    try:
        con.execute("SET enable_external_access = false")  # panels read the registered views, nothing else
        views = [panel_view(run_panel(con, sp)) for sp in specs]
        kpis = _kpis(con)
    finally:
        con.close()
    html = render_html(
        lake_uri=str(lake.uri),
        generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        n_panels=len(views),
        kpis=kpis,
        panels=views,
        versions=versions,
    )
    return Page(html, views, time.perf_counter() - t0)


def render_dashboard(lake: Lake, out_path: str | Path) -> Path:
    """Write the dashboard page for `lake` to `out_path` and return the path."""
    return write_atomic(build_page(lake).html, out_path)


def write_atomic(html: str, out_path: str | Path) -> Path:
    """Write through a temporary file and a rename, so a browser or `--serve` never reads half a page."""
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".dashboard-", suffix=".html", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(html)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def _kpis(con: Any) -> list[dict[str, str]]:
    row = con.sql(SUMMARY_SQL.read_text()).to_arrow_table().to_pylist()[0]

    def rate(prefix: str, n_col: str) -> dict[str, str] | None:
        v = row[prefix]
        if is_missing(v):
            return None
        iv = ""
        if not is_missing(row[f"{prefix}_lo"]) and not is_missing(row[f"{prefix}_hi"]):
            iv = f"95% CI {fmt(row[f'{prefix}_lo'], 'percent')}–{fmt(row[f'{prefix}_hi'], 'percent')}"
        n = "" if is_missing(row[n_col]) else f"n={fmt(row[n_col], 'int')}"
        return {"value": fmt(v, "percent"), "sub": " · ".join(p for p in (iv, n) if p)}

    out: list[dict[str, str]] = []
    if not is_missing(row["latest_round"]):
        out.append({"label": "latest round", "value": str(row["latest_round"]), "sub": ""})
    new = rate("pass_rate", "n_new")
    if new:
        out.append({"label": f"new-sample pass rate (round {row['measured_round']})", **new})
    ev = rate("eval_pass_rate", "eval_n")
    if ev:
        out.append({"label": f"held-out eval pass rate (round {row['measured_round']})", **ev})
    for key, label in (
        ("sft_size", "SFT pile"),
        ("ct_size", "CT pile"),
        ("episodes", "episodes"),
        ("quarantined", "quarantined inputs"),
    ):
        out.append({"label": label, "value": fmt(row[key], "int"), "sub": ""})
    return out
