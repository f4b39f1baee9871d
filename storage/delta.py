"""Delta-level pieces under the Lake facade (storage/lake.py) that the lake's helpers (key indexes, migrations,
views) need too: the manifest's name and format, one-line errors from delta-rs, Arrow type compatibility, key
strings and the per-version snapshot datasets. They sit below lake.py so that nothing in storage imports in a circle.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from cachetools import LRUCache
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from schemas.tables import TableSpec
from storage.errors import LakeError, SchemaError

MANIFEST = "_flywheel_lake.json"
#: Version of the lake layout itself (the manifest format and the set of tables).
LAKE_FORMAT = 1
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: Where a Rust backtrace starts in a one-line delta-rs message: "0: <unknown> 1: ..." or "0: std::... at ...".
_BACKTRACE = re.compile(r"\s0: (?=\S.*\s1: )")


@contextmanager
def delta_errors(what: str) -> Iterator[None]:
    """Turn delta-rs's multi-line I/O errors into one-line LakeErrors that say what to check."""
    try:
        yield
    except (LakeError, TableNotFoundError, CommitFailedError, SchemaError):
        raise
    except (OSError, DeltaError) as e:
        first = " ".join(_ANSI.sub("", str(e)).split())  # object_store colours its error chain
        first = _BACKTRACE.split(first, 1)[0].rstrip()  # delta-rs appends Rust backtrace frames: not for people
        hint = ""
        if any(
            s in first
            for s in ("error sending request", "Connection refused", "dns error", "timed out", "operation timed out")
        ):
            hint = "; the storage endpoint is unreachable: check FLYWHEEL_S3_ENDPOINT_URL and the network"
        elif re.search(r"status code\W*5\d\d", first):
            hint = "; the storage endpoint answered with a server error (5xx): run the command again when it recovers"
        elif "non-2xx" in first or "403" in first or "Forbidden" in first:
            hint = "; the storage endpoint refused the request: check the bucket, endpoint and credentials"
        raise LakeError(f"{what} failed: {first[:300]}{hint}") from None


def conform(batch: pa.Table, ts: TableSpec) -> pa.Table:
    """Make `batch` match the table's schema exactly, or refuse it naming the column.

    Missing nullable columns become nulls; missing required columns, extra columns and incompatible types are
    refused. Safe casts between widths of the same kind (int64 -> int32, large_string -> string) are allowed.
    """
    target = ts.schema
    extra = [n for n in batch.column_names if n not in target.names]
    if extra:
        raise SchemaError(f"table {ts.name}: unknown column(s) {', '.join(extra)}")
    cols = []
    for f in target:
        if f.name not in batch.column_names:
            if not f.nullable:
                raise SchemaError(f"table {ts.name}: required column {f.name!r} is missing")
            cols.append(pa.nulls(batch.num_rows, f.type))
            continue
        col = batch.column(f.name)
        if not col.type.equals(f.type):
            if not compatible(col.type, f.type):
                raise SchemaError(f"table {ts.name}: column {f.name!r} has type {col.type}, expected {f.type}")
            try:
                col = col.cast(f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise SchemaError(f"table {ts.name}: column {f.name!r} cannot be cast to {f.type}: {e}") from None
        if not f.nullable and col.null_count:
            raise SchemaError(f"table {ts.name}: required column {f.name!r} has {col.null_count} null value(s)")
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=target)


def _kind(t: pa.DataType) -> str:
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return "list"
    if pa.types.is_struct(t):
        return "struct"
    return str(t)


def compatible(src: pa.DataType, dst: pa.DataType) -> bool:
    a, b = _kind(src), _kind(dst)
    if a == "null":
        return True
    if a == b and a not in ("list", "struct"):
        return True
    if a == "int" and b == "float":
        return True
    if a == b == "list":
        return compatible(src.value_type, dst.value_type)
    if a == b == "struct":
        names = {f.name: f.type for f in dst}
        return all(f.name in names and compatible(f.type, names[f.name]) for f in src)
    return False


def key_strings(table: pa.Table, key: tuple[str, ...]) -> pa.Array:
    """One string per row identifying its key (a single key column is used as is)."""
    if len(key) == 1:
        return pc.cast(table.column(key[0]), pa.string()).combine_chunks()
    parts = [pc.cast(table.column(k), pa.string()) for k in key]
    return pc.binary_join_element_wise(*parts, "\x1f").combine_chunks()


#: Arrow datasets of table snapshots by (table URI, table id, version); see snapshot_dataset.
_DATASETS: LRUCache[tuple[str, str, int], ds.Dataset] = LRUCache(64)
_DATASETS_LOCK = threading.Lock()


def snapshot_dataset(dt: DeltaTable) -> ds.Dataset:
    """The Arrow dataset of `dt`'s snapshot, built once per (table, version) in a process: a version's files never
    change, and building it costs a pass over every file's statistics (~20 ms per table at 10M episodes, asked for
    ~17 times per round)."""
    key = (dt.table_uri, dt.metadata().id, dt.version())  # the table id: a table recreated at the same path differs
    with _DATASETS_LOCK:
        got = _DATASETS.get(key)
    if got is None:
        got = dt.to_pyarrow_dataset()
        with _DATASETS_LOCK:
            _DATASETS[key] = got
    return got


def forget_snapshots() -> None:
    """Drop the cached snapshot datasets: a cached one keeps its files' Parquet footers, so counting its rows would
    not notice a file deleted since (`flywheel check` must see storage as it is)."""
    with _DATASETS_LOCK:
        _DATASETS.clear()
