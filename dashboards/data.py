"""Run a panel's queries on a DuckDB connection and shape the (already aggregated) result into chart series."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.stats import wilson
from dashboards.format import is_missing
from dashboards.spec import PanelSpec
from dashboards.svg import Point, Series, color_for

#: A panel query returning more rows than this is refused: panels aggregate in SQL, they never pull episodes.
MAX_ROWS = 20_000


@dataclass(frozen=True)
class PanelData:
    spec: PanelSpec
    rows: list[dict[str, Any]]
    table_rows: list[dict[str, Any]]
    error: str | None = None
    seconds: float = 0.0


def run_panel(con: Any, spec: PanelSpec, max_rows: int = MAX_ROWS) -> PanelData:
    """Query one panel. A failing query becomes the panel's error state instead of breaking the page."""
    import duckdb

    t0 = time.perf_counter()
    try:
        rows = _fetch(con, spec.sql, spec, max_rows)
        table_rows = _fetch(con, spec.table_sql, spec, max_rows) if spec.table_sql else rows
    except (duckdb.Error, ValueError, KeyError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        return PanelData(spec, [], [], error=msg, seconds=time.perf_counter() - t0)
    return PanelData(spec, rows, table_rows, seconds=time.perf_counter() - t0)


def _fetch(con: Any, sql: str, spec: PanelSpec, max_rows: int) -> list[dict[str, Any]]:
    reader = con.sql(sql).to_arrow_reader(8192)  # streamed: a runaway query is cut off, not loaded
    batches, n = [], 0
    for batch in reader:
        batches.append(batch)
        n += batch.num_rows
        if n > max_rows:
            raise ValueError(f"query returned more than {max_rows:,} rows; a panel query must aggregate")
    tbl = pa.Table.from_batches(batches, schema=reader.schema)
    needed = [c for c in (spec.x, spec.y, spec.series, spec.facet, spec.lo, spec.hi) if c]
    if sql is spec.sql:
        if spec.wilson:
            tbl = wilson_fill(tbl, spec)
        missing = [c for c in needed if c not in tbl.column_names]
        if missing:
            raise ValueError(f"query result lacks column(s) {', '.join(missing)} named in {spec.id}.yaml")
    return tbl.to_pylist()


def wilson_fill(tbl: pa.Table, spec: PanelSpec) -> pa.Table:
    """Fill null rate/lo/hi from the counts k of n with the Wilson 95% interval (core.stats), vectorised; a row
    with n = 0 (or no counts) has no rate and so no interval."""
    w = spec.wilson
    assert w is not None
    k = np.asarray(tbl.column(w.k).to_numpy(zero_copy_only=False), dtype=float)
    n = np.asarray(tbl.column(w.n).to_numpy(zero_copy_only=False), dtype=float)
    ok = np.isfinite(k) & np.isfinite(n) & (n > 0)
    lo, hi = np.full(len(n), np.nan), np.full(len(n), np.nan)
    if ok.any():
        lo[ok], hi[ok] = wilson(k[ok], n[ok])
    rate = np.where(ok, k / np.where(ok, n, 1), np.nan)
    for col, new in ((w.rate, rate), (w.lo, lo), (w.hi, hi)):
        arr = pa.array(new, type=pa.float64(), from_pandas=True)  # NaN -> null
        if col in tbl.column_names:  # values the query already has (e.g. stored intervals) win
            merged = pc.coalesce(tbl.column(col).cast(pa.float64()).combine_chunks(), arr)
            tbl = tbl.set_column(tbl.column_names.index(col), col, merged)
        else:
            tbl = tbl.append_column(col, arr)
    return tbl


def facets(data: PanelData) -> list[tuple[str | None, list[dict[str, Any]]]]:
    """Rows split by the facet column (one small chart each), in order of first appearance."""
    f = data.spec.facet
    if not f:
        return [(None, data.rows)]
    out: dict[Any, list[dict[str, Any]]] = {}
    for r in data.rows:
        out.setdefault(r[f], []).append(r)
    return [(str(k), v) for k, v in out.items()]


def series_names(data: PanelData) -> list[str]:
    s = data.spec.series
    if not s:
        return [data.spec.title]
    seen: dict[str, None] = {}
    for r in data.rows:
        seen.setdefault(str(r[s]), None)
    if data.spec.series_sort == "natural":
        return sorted(seen, key=_natural)
    return list(seen)


def _natural(name: str) -> list[Any]:
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name) if t]


def build_series(data: PanelData, rows: list[dict[str, Any]], names: list[str]) -> tuple[list[Series], list[Any]]:
    """Chart series for `rows`, coloured by the series' position in `names` (stable across facets), and the
    x categories in query order."""
    sp = data.spec
    cats: dict[Any, None] = {}
    pts: dict[str, list[Point]] = {n: [] for n in names}
    for r in rows:
        x = r[sp.x]
        if is_missing(x):
            continue
        cats.setdefault(x, None)
        name = str(r[sp.series]) if sp.series else names[0]
        pts.setdefault(name, []).append(
            Point(x, _f(r[sp.y]), _f(r[sp.lo]) if sp.lo else None, _f(r[sp.hi]) if sp.hi else None)
        )
    out = []
    for i, n in enumerate(names):
        p = pts.get(n) or []
        if sp.chart == "line":
            p = sorted(p, key=lambda q: q.x)
        if p:
            out.append(Series(n, color_for(i, n, sp.colors), tuple(p)))
    keys = list(cats)
    if all(isinstance(k, (int, float)) and not isinstance(k, bool) for k in keys):
        keys.sort()  # rounds in order even when the first series skips some
    return out, keys


def _f(v: Any) -> float | None:
    if is_missing(v):
        return None
    return float(v)
