"""Lake commands: init, tables, sql, shell, config."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from core.console import console, data_table, esc, fail
from core.settings import get_settings
from flywheel.commands.common import LakeOpt, open_lake
from schemas.tables import TABLES


class OutFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


def init(lake: LakeOpt = None) -> None:
    """Create every table with its explicit schema (safe to run again).

    Example: flywheel init --lake s3://my-bucket/flywheel
    """
    lk = open_lake(lake, create=True)
    console.print(f"lake ready at [bold]{esc(lk.uri)}[/] ({len(TABLES)} tables)")


def tables(lake: LakeOpt = None) -> None:
    """List the tables with row counts, Delta versions and sizes.

    Example: flywheel tables --lake ./lake
    """
    lk = open_lake(lake)
    t = Table("table", "rows", "version", "files", "size", title=esc(lk.uri))
    for name in TABLES:
        dt = lk.delta(name)
        adds = dt.get_add_actions(flatten=True)
        size = sum(adds.column("size_bytes").to_pylist()) if adds.num_rows else 0
        t.add_row(name, f"{lk.count(name):,}", str(dt.version()), str(adds.num_rows), _human(size))
    console.print(t)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def sql(
    query: Annotated[str, typer.Argument(help="A DuckDB SELECT over the table views.")],
    lake: LakeOpt = None,
    format: Annotated[OutFormat, typer.Option("--format", "-f", help="Output format.")] = OutFormat.table,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write to this file instead of the terminal.")] = None,
    as_of_version: Annotated[
        list[str] | None,
        typer.Option(
            "--as-of-version",
            help="Time travel: N reads every table the query names as of Delta version N; TABLE=N pins one "
            "table (repeatable). `flywheel tables` shows the versions.",
        ),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="Rows shown in table format.")] = 50,
) -> None:
    """Run a read-only DuckDB query over views of every table.

    Example: flywheel sql "SELECT round, count(*) FILTER (passed) FROM verdicts GROUP BY round" --format csv --out passes.csv

    Example (audit a pile as it was): flywheel sql "SELECT count(*) FROM sft" --as-of-version 3
    """
    from storage.query import run_query
    from storage.views import parse_pins

    lk = open_lake(lake)
    pins = parse_pins(as_of_version or [], query, lk)
    result = run_query(lk, query, version=pins or None)
    if format is OutFormat.table and out is None:
        console.print(data_table(result.column_names, (r.values() for r in result.slice(0, limit).to_pylist())))
        if result.num_rows > limit:
            console.print(f"({result.num_rows:,} rows, {limit} shown; use --format csv --out FILE for all)")
        return
    _write(result, format, out)


def _write(result, format: OutFormat, out: Path | None) -> None:  # noqa: ANN001
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    if format is OutFormat.parquet:
        if out is None:
            fail("--format parquet needs --out FILE")
        pq.write_table(result, out)
    elif format is OutFormat.csv:
        import sys

        flat = _nested_as_json(result)  # CSV has no lists or structs: nested cells become JSON text
        opts = pcsv.WriteOptions(quoting_style="needed")
        if out is None:
            pcsv.write_csv(flat, sys.stdout.buffer, write_options=opts)
            sys.stdout.buffer.flush()
        else:
            pcsv.write_csv(flat, out, write_options=opts)
    else:
        rows = result.to_pylist()
        text = "\n".join(json.dumps(r, default=str) for r in rows) + ("\n" if rows else "")
        if out is None:
            print(text, end="")
        else:
            out.write_text(text)
    if out is not None:
        console.print(f"wrote {result.num_rows:,} rows to {esc(out)}")


def _nested_as_json(result):  # noqa: ANN001, ANN202
    import pyarrow as pa

    for i, f in enumerate(result.schema):
        if pa.types.is_nested(f.type):
            text = pa.array([None if v is None else json.dumps(v, default=str) for v in result.column(i).to_pylist()])
            result = result.set_column(i, f.name, text)
    return result


def shell(
    lake: LakeOpt = None,
    as_of_version: Annotated[
        list[str] | None,
        typer.Option(
            "--as-of-version",
            help="Time travel: N pins every table whose history reaches version N; TABLE=N pins one (repeatable).",
        ),
    ] = None,
) -> None:
    """An interactive DuckDB prompt with a view of every table; statements end with `;` (end with Ctrl-D).

    Example: flywheel shell --lake ./lake      (or: echo "SELECT count(*) FROM episodes;" | flywheel shell)
    """
    from storage.query import repl
    from storage.views import parse_pins

    lk = open_lake(lake)
    pins = parse_pins(as_of_version or [], None, lk)
    repl(lk, version=pins or None)


def config() -> None:
    """Print the effective settings (flywheel.toml and FLYWHEEL_* variables), secrets masked.

    Example: FLYWHEEL_LAKE=s3://bucket/lake flywheel config
    """
    t = Table("setting", "value")
    for k, v in get_settings().masked().items():
        t.add_row(k, "" if v is None else str(v))
    console.print(t)


def register(app: typer.Typer) -> None:
    for fn in (init, tables, sql, shell, config):
        app.command()(fn)
