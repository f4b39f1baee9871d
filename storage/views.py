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


#: DuckDB name of the stored (thin) pile tables; the pile's own name is a view that joins them to their episodes.
THIN = {"sft": "sft_thin", "ct": "ct_thin"}
#: Registered only when `episodes` is pinned: the pile views join the latest episodes (immutable, append-only), so
#: a pile pinned to an old version still shows every one of its episodes.
_LATEST_EPISODES = "_episodes_latest"


def registered_name(table: str) -> str:
    """The DuckDB name under which a lake table's stored rows are registered (sft -> sft_thin, ct -> ct_thin)."""
    return THIN.get(table, table)


def pile_view_sql(pile: str, episodes: str = "episodes") -> str:
    """The pile as whole episodes: every episode column, then round_routed (and reasons for CT)."""
    extra = ", p.reasons" if pile == "ct" else ""
    return f"SELECT e.*, p.round_routed{extra} FROM {THIN[pile]} p JOIN {episodes} e ON e.episode_id = p.episode_id"


def connect(lake: Lake, version: Versions = None, tables: Iterable[str] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per table, each at its pinned version (latest otherwise).

    The piles are registered as `sft_thin` / `ct_thin` (their stored rows) and `sft` / `ct` (views joining those to
    `episodes`: whole episodes, as an analyst expects a pile to read); asking for a pile registers `episodes` too.
    """
    names = list(TABLES if tables is None else tables)
    pins = _pins(version, names)
    piles = [p for p in THIN if p in names]
    if piles and "episodes" not in names:
        names.append("episodes")
    con = duckdb.connect()
    readable = [_register(con, lake, name, registered_name(name), pins.get(name)) for name in names]
    if piles:
        episodes = "episodes"
        if "episodes" in pins:
            readable.append(_register(con, lake, "episodes", _LATEST_EPISODES, None))
            episodes = _LATEST_EPISODES
        con.execute(";\n".join(f"CREATE VIEW {p} AS {pile_view_sql(p, episodes)}" for p in piles))
    folders = sorted({f for f in readable if f})
    if folders:  # what read_parquet may still open once `storage.query.lock_down` turns external access off
        con.execute(f"SET allowed_directories = [{', '.join(_sql_str(f + '/') for f in folders)}]")
    from storage.analyst_views import define_analyst_views

    if names:  # (define_analyst_views reads an empty list as "all tables")
        define_analyst_views(con, names)  # convenience views + column docs (storage/analyst_views.py)
    return con


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _register(con: duckdb.DuckDBPyConnection, lake: Lake, table: str, name: str, version: int | None) -> str | None:
    """Register `table` (at `version`) under `name`; return the folder DuckDB reads it from, if it reads files itself.

    A local table is read by DuckDB's own Parquet reader over the snapshot's files, because it projects nested
    fields (`steps[].action_type` without the observations): the `steps` view at 1M episodes went from 234 s through
    an Arrow dataset to ~1 s. The Delta schema is unioned in by name so that columns no file has yet still exist.
    S3 lakes go through the Arrow dataset (DuckDB's S3 reader is an extension this project does not download).
    """
    from storage.delta import snapshot_dataset

    dt = lake.delta(table, version)
    dataset = snapshot_dataset(dt)
    files = dt.file_uris() if lake.uri.scheme == "file" else []
    if not files:
        con.register(name, dataset)
        return None
    empty = dataset.schema.empty_table()  # noqa: F841 - DuckDB's replacement scan reads it by name; a DuckDB table, not an Arrow scan: joins push bloom filters into scans
    con.execute(f"CREATE TABLE _{name}_schema AS SELECT * FROM empty")
    paths = ", ".join(_sql_str(f) for f in files)
    try:
        con.execute(
            f"CREATE VIEW {name} AS SELECT * FROM _{name}_schema "
            f"UNION ALL BY NAME SELECT * FROM read_parquet([{paths}], union_by_name = true)"
        )
    except duckdb.IOException:  # a data file is gone (by hand): the Arrow dataset fails only when a query reads it
        con.register(name, dataset)
        return None
    return lake.table_uri(table)


def _pins(version: Versions, tables: Iterable[str]) -> dict[str, int]:
    if version is None:
        return {}
    if isinstance(version, int):
        return dict.fromkeys(tables, version)
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

    names |= {t for t, thin in THIN.items() if thin in names}
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
            pins.update(dict.fromkeys(referenced_tables(query), v))
        else:
            pins.update({t: v for t in TABLES if lake.version(t) >= v})
    return pins
