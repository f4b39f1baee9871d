"""DuckDB over the lake: one view per Delta table, registered from Arrow datasets (works locally and on S3)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import duckdb

from schemas.tables import TABLES
from storage.errors import LakeError

if TYPE_CHECKING:
    from storage.lake import Lake

#: A version pin: one Delta version for every table, or {table: version}.
Versions = int | Mapping[str, int] | None


def connect(lake: Lake, version: Versions = None, tables: Iterable[str] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per table, each at its pinned version (latest otherwise)."""
    names = list(TABLES if tables is None else tables)
    pins = _pins(version, names)
    con = duckdb.connect()
    for name in names:
        con.register(name, lake.dataset(name, pins.get(name)))
    from storage.analyst_views import define_analyst_views

    if names:  # (define_analyst_views reads an empty list as "all tables")
        define_analyst_views(con, names)  # convenience views + column docs (storage/analyst_views.py)
    return con


def _pins(version: Versions, tables: Iterable[str]) -> dict[str, int]:
    if version is None:
        return {}
    if isinstance(version, int):
        return {t: version for t in tables}
    unknown = [t for t in version if t not in TABLES]
    if unknown:
        raise LakeError(f"unknown table(s) {', '.join(unknown)} in the version pin; tables: {', '.join(TABLES)}")
    return dict(version)


def referenced_tables(query: str) -> set[str]:
    """Lake tables a query reads. DuckDB's parser where it can; a word match where it cannot (it binds USING)."""
    try:
        names = {n.split(".")[-1] for n in duckdb.get_table_names(query)}
    except duckdb.Error:
        names = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", query)}
    from storage.analyst_views import tables_behind

    return (names | tables_behind(names)) & set(TABLES)


def parse_pins(values: Iterable[str], query: str | None, lake: Lake) -> dict[str, int]:
    """`--as-of-version` values -> {table: version}.

    `TABLE=N` pins one table. A bare `N` pins every table the query reads (sql) or, without a query (shell),
    every table whose history reaches N.
    """
    pins: dict[str, int] = {}
    for raw in values:
        name, sep, num = raw.rpartition("=")
        try:
            v = int(num)
        except ValueError:
            raise LakeError(f"--as-of-version takes N or TABLE=N, got {raw!r}") from None
        if v < 0:
            raise LakeError(f"--as-of-version must be >= 0, got {v}")
        if sep:
            if name not in TABLES:
                raise LakeError(f"unknown table {name!r} in --as-of-version; tables: {', '.join(TABLES)}")
            pins[name] = v
        elif query is not None:
            pins.update({t: v for t in referenced_tables(query)})
        else:
            pins.update({t: v for t in TABLES if lake.version(t) >= v})
    return pins
