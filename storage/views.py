"""DuckDB over the lake: one view per Delta table, registered from Arrow datasets (works locally and on S3)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import duckdb

from schemas.tables import TABLES

if TYPE_CHECKING:
    from storage.lake import Lake


def connect(lake: Lake, version: int | None = None, tables: Iterable[str] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per table (each at `version` where given)."""
    con = duckdb.connect()
    for name in tables or TABLES:
        ds = lake.dataset(name, version)
        con.register(name, ds)
    return con
