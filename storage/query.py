"""Read-only SQL over the lake for analysts: `flywheel sql` and `flywheel shell`."""

from __future__ import annotations

import pyarrow as pa

from storage.errors import LakeError
from storage.lake import Lake


def run_query(lake: Lake, query: str, version: int | None = None) -> pa.Table:
    """Run one query over the table views and return Arrow. Errors become LakeError with DuckDB's message."""
    import duckdb

    con = lake.duckdb(version=version)
    con.execute("SET enable_external_access = false")  # the views are registered; no other file or URL access
    try:
        return con.sql(query).to_arrow_table() if _returns_rows(con, query) else pa.table({})
    except duckdb.Error as e:
        raise LakeError(f"query failed: {str(e).splitlines()[0]}") from None


def _returns_rows(con, query: str) -> bool:  # noqa: ANN001
    return con.sql(query) is not None


def repl(lake: Lake, version: int | None = None) -> None:
    """A minimal DuckDB prompt with rich output; `.tables` lists views, Ctrl-D ends."""
    import duckdb
    from rich.table import Table

    from flywheel.console import console
    from schemas.tables import TABLES

    con = lake.duckdb(version=version)
    con.execute("SET enable_external_access = false")
    console.print(f"DuckDB over {lake.uri}; views: {', '.join(TABLES)}. End with Ctrl-D.")
    buf = ""
    while True:
        try:
            line = input("flywheel> " if not buf else "      ...> ")
        except EOFError:
            console.print()
            return
        if line.strip() == ".tables" and not buf:
            console.print(", ".join(TABLES))
            continue
        buf += line + "\n"
        if not buf.strip().endswith(";"):
            continue
        try:
            rel = con.sql(buf)
            if rel is not None:
                res = rel.to_arrow_table()
                t = Table(*res.column_names)
                for row in res.slice(0, 100).to_pylist():
                    t.add_row(*("" if v is None else str(v) for v in row.values()))
                console.print(t)
        except duckdb.Error as e:
            console.print(f"[red]{str(e).splitlines()[0]}[/]")
        buf = ""
