"""Read-only SQL over the lake for analysts: `flywheel sql` and `flywheel shell`."""

from __future__ import annotations

import sys

import pyarrow as pa

from storage.errors import LakeError
from storage.lake import Lake
from storage.views import Versions

#: Statement kinds an analyst's SQL may hold (DESCRIBE, SHOW, SUMMARIZE, FROM ..., VALUES parse as SELECT).
READ_ONLY_KINDS = ("SELECT", "EXPLAIN")


def check_read_only(query: str, *, single: bool = True) -> None:
    """Refuse anything but reads, before DuckDB runs it: COPY, ATTACH, INSTALL/LOAD, CREATE, SET, PRAGMA, ...

    Defence in depth with `lock_down`: even a statement that got through could reach no file, URL or setting.
    """
    import re

    import duckdb

    try:
        stmts = duckdb.extract_statements(query)
    except duckdb.Error as e:
        raise LakeError(f"query failed: {str(e).splitlines()[0]}") from None
    if not stmts:
        raise LakeError("the query is empty")
    if single and len(stmts) > 1:
        raise LakeError(f"one statement at a time, got {len(stmts)}")
    pragmas = [w for w in _leading_words(query) if w == "PRAGMA"]
    if pragmas:  # DuckDB rewrites PRAGMA x into SELECT * FROM pragma_x(): refuse it by what was written
        raise LakeError("the lake is read-only here: PRAGMA statements are refused; use DESCRIBE <view> or SHOW TABLES")
    for st in stmts:
        kind = st.type.name
        if kind == "EXPLAIN":  # EXPLAIN [ANALYZE] runs its statement: that one must be a read too
            if re.match(r"^\s*EXPLAIN\s*\(", st.query, flags=re.I):
                raise LakeError(
                    "EXPLAIN with options, e.g. (FORMAT JSON), is refused here; use EXPLAIN SELECT ... or "
                    "EXPLAIN ANALYZE SELECT ..."
                )
            inner = re.sub(r"^\s*EXPLAIN\s+(ANALY[SZ]E\s+)?", "", st.query, flags=re.I)
            try:
                kinds = [s.type.name for s in duckdb.extract_statements(inner)] if inner.strip() else []
            except duckdb.Error as e:
                raise LakeError(f"query failed: {str(e).splitlines()[0]}") from None
            kind = "SELECT" if kinds and all(k == "SELECT" for k in kinds) else f"EXPLAIN {'+'.join(kinds) or '?'}"
        if kind not in READ_ONLY_KINDS:
            raise LakeError(
                f"the lake is read-only here: {kind} statements are refused; use SELECT (or WITH, FROM, DESCRIBE, "
                "SUMMARIZE, EXPLAIN)"
            )


def _leading_words(query: str) -> list[str]:
    """The first word of each statement as written (comments skipped), upper-cased: DuckDB's tokenizer, statement
    boundaries at its `;` operator tokens."""
    import re

    import duckdb

    words, start = [], True
    for pos, kind in duckdb.tokenize(query):
        if kind == duckdb.token_type.operator and query.startswith(";", pos):
            start = True
            continue
        if start:
            m = re.match(r"\w+", query[pos:])
            words.append(m.group(0).upper() if m else "")
            start = False
    return words


def lock_down(con) -> None:  # noqa: ANN001 - duckdb.DuckDBPyConnection
    """After the views are registered: no file or URL access, no extension loading, no setting changes."""
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def run_query(lake: Lake, query: str, version: Versions = None) -> pa.Table:
    """Run one query over the table views and return Arrow. Errors become LakeError with DuckDB's message.

    `version`: an int pins every table the query reads to that Delta version; a dict pins tables one by one.
    """
    import duckdb

    from storage.views import referenced_tables

    check_read_only(query)
    used = referenced_tables(query)  # register only these: each view costs a Delta log read (S3 round trips)
    if isinstance(version, int):
        version = dict.fromkeys(used, version)
    con = lake.duckdb(version=version, tables=sorted(used))
    lock_down(con)  # the views are registered; no other file or URL access
    try:
        rel = con.sql(query)
        return rel.to_arrow_table() if rel is not None else pa.table({})
    except duckdb.Error as e:
        raise LakeError(f"query failed: {str(e).splitlines()[0]}") from None


def repl(lake: Lake, version: Versions = None) -> None:
    """A minimal DuckDB prompt with rich output; `.tables` lists views, Ctrl-D (or end of input) ends.

    Statements end with `;` and may span lines, so `echo "SELECT 1;" | flywheel shell` works too.
    """
    import duckdb

    from core.console import console, data_table, esc
    from schemas.tables import TABLES

    con = lake.duckdb(version=version)
    lock_down(con)
    pinned = (
        f" (pinned: {', '.join(f'{t}@{v}' for t, v in version.items())})"
        if isinstance(version, dict) and version
        else ""
    )
    console.print(f"DuckDB over {esc(lake.uri)}{esc(pinned)}; views: {', '.join(TABLES)}. End with Ctrl-D.")
    interactive = sys.stdin.isatty()
    buf = ""
    while True:
        try:
            line = input(("flywheel> " if not buf else "      ...> ") if interactive else "")
        except EOFError:
            if buf.strip():
                line = ";"  # run a last statement that lacks its semicolon
            else:
                console.print()
                return
        if line.strip() in (".tables", ".quit", ".exit") and not buf:
            if line.strip() != ".tables":
                return
            console.print(", ".join(TABLES))
            continue
        buf += line + "\n"
        if not buf.strip().endswith(";"):
            continue
        try:
            check_read_only(buf, single=False)
            rel = con.sql(buf)
            if rel is not None:
                res = rel.to_arrow_table()
                console.print(data_table(res.column_names, (r.values() for r in res.slice(0, 100).to_pylist())))
                if res.num_rows > 100:
                    console.print(f"({res.num_rows:,} rows, 100 shown)")
        except (duckdb.Error, LakeError) as e:
            console.print(f"[red]error:[/] {esc(str(e).removeprefix('query failed: ').splitlines()[0])}")
        buf = ""
