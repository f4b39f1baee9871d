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
    for name in names:
        con.register(registered_name(name), lake.dataset(name, pins.get(name)))
    if piles:
        episodes = "episodes"
        if "episodes" in pins:
            con.register(_LATEST_EPISODES, lake.dataset("episodes"))
            episodes = _LATEST_EPISODES
        con.execute(";\n".join(f"CREATE VIEW {p} AS {pile_view_sql(p, episodes)}" for p in piles))
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
            pins.update({t: v for t in referenced_tables(query)})
        else:
            pins.update({t: v for t in TABLES if lake.version(t) >= v})
    return pins
