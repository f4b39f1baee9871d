"""The lake: Delta tables (deltalake) plus a content-addressed object store, on a local folder or on S3.

One narrow write API, like delta-rs itself: `append` (idempotent on the table's key) and `upsert` (merge on the
key). Every write is one Delta commit, so a crash leaves all or none of a batch. Reads go through Arrow datasets,
optionally at an older Delta version (time travel for auditors).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from schemas.tables import TABLES, TableSpec, spec
from storage.errors import LakeError, SchemaError
from storage.objects import ObjectStore, open_object_store
from storage.uri import LakeURI, parse_lake_uri

MANIFEST = "_flywheel_lake.json"
#: Version of the lake layout itself (the manifest format and the set of tables).
LAKE_FORMAT = 1


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
            if not _compatible(col.type, f.type):
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


def _compatible(src: pa.DataType, dst: pa.DataType) -> bool:
    a, b = _kind(src), _kind(dst)
    if a == "null":
        return True
    if a == b and a not in ("list", "struct"):
        return True
    if a == "int" and b == "float":
        return True
    if a == b == "list":
        return _compatible(src.value_type, dst.value_type)
    if a == b == "struct":
        names = {f.name: f.type for f in dst}
        return all(f.name in names and _compatible(f.type, names[f.name]) for f in src)
    return False


def _key_strings(table: pa.Table, key: tuple[str, ...]) -> pa.Array:
    """One string per row identifying its key (a single key column is used as is)."""
    if len(key) == 1:
        return pc.cast(table.column(key[0]), pa.string()).combine_chunks()
    parts = [pc.cast(table.column(k), pa.string()) for k in key]
    return pc.binary_join_element_wise(*parts, "\x1f").combine_chunks()


@dataclass
class Lake:
    """A lake root with its tables and object store. Create with `Lake.open(uri)`."""

    uri: LakeURI
    objects: ObjectStore

    # ---------------------------------------------------------------- opening
    @classmethod
    def open(cls, uri: str | Path | None = None, *, create: bool = False, settings: Any = None) -> Lake:
        """Open a lake. With create=True a missing lake is initialised; otherwise a folder that is not a lake
        is refused with an error saying to run `flywheel init`."""
        from flywheel.settings import get_settings

        settings = settings or get_settings()
        lu = parse_lake_uri(str(uri if uri is not None else settings.lake), settings)
        lake = cls(lu, open_object_store(lu))
        if create:
            lake.init()
        else:
            lake.check_manifest()
        return lake

    @property
    def storage_options(self) -> dict[str, str]:
        return self.uri.storage_options

    def table_uri(self, name: str) -> str:
        spec(name)
        return self.uri.join("tables", name)

    # --------------------------------------------------------------- manifest
    def read_manifest(self) -> dict[str, Any] | None:
        raw = self.objects.get_text(MANIFEST)
        return None if raw is None else json.loads(raw)

    def check_manifest(self) -> dict[str, Any]:
        from storage.migrations import check_versions

        m = self.read_manifest()
        if m is None:
            raise LakeError(f"{self.uri} is not a flywheel lake (no {MANIFEST}); create it with `flywheel init --lake {self.uri}`")
        return check_versions(self, m)

    def init(self) -> list[str]:
        """Create every table that does not exist yet and write the manifest. Safe to call again."""
        created = []
        for name, ts in TABLES.items():
            if not self.table_exists(name):
                write_deltalake(
                    self.table_uri(name),
                    ts.schema.empty_table(),
                    mode="append",
                    partition_by=list(ts.partition_by) or None,
                    storage_options=self.storage_options,
                )
                created.append(name)
        m = self.read_manifest() or {"format": LAKE_FORMAT, "tables": {}}
        if m.get("format", LAKE_FORMAT) > LAKE_FORMAT:
            from storage.migrations import check_versions

            check_versions(self, m)
        m["tables"] = {**m.get("tables", {}), **{n: m.get("tables", {}).get(n, TABLES[n].version) for n in TABLES}}
        m["format"] = LAKE_FORMAT
        self.objects.put_text(MANIFEST, json.dumps(m, indent=2, sort_keys=True))
        return created

    # ----------------------------------------------------------------- tables
    def table_exists(self, name: str) -> bool:
        try:
            DeltaTable(self.table_uri(name), storage_options=self.storage_options)
            return True
        except TableNotFoundError:
            return False

    def delta(self, name: str, version: int | None = None) -> DeltaTable:
        try:
            dt = DeltaTable(self.table_uri(name), storage_options=self.storage_options)
        except TableNotFoundError:
            raise LakeError(f"table {name!r} does not exist in {self.uri}; run `flywheel init --lake {self.uri}`") from None
        if version is not None:
            dt.load_as_version(version)
        return dt

    def version(self, name: str) -> int:
        return self.delta(name).version()

    def dataset(self, name: str, version: int | None = None) -> ds.Dataset:
        return self.delta(name, version).to_pyarrow_dataset()

    def read(
        self,
        name: str,
        columns: list[str] | None = None,
        *,
        version: int | None = None,
        filter: pc.Expression | None = None,
    ) -> pa.Table:
        return self.dataset(name, version).to_table(columns=columns, filter=filter)

    def count(self, name: str, version: int | None = None) -> int:
        return self.dataset(name, version).count_rows()

    def existing_keys(self, name: str, keys: pa.Array | None = None) -> pa.Array:
        """Key strings already in the table (restricted to `keys` when given, which reads less)."""
        ts = spec(name)
        d = self.dataset(name)
        flt = None
        if keys is not None and len(ts.key) == 1:
            flt = pc.field(ts.key[0]).isin(keys)
        existing = d.to_table(columns=list(ts.key), filter=flt)
        return _key_strings(existing, ts.key)

    # ----------------------------------------------------------------- writes
    def append(self, name: str, data: pa.Table | Iterable[pa.RecordBatch] | list[dict[str, Any]]) -> int:
        """Append rows whose key is not in the table yet; return how many were added.

        Rows are conformed to the table schema (or refused, nothing written), deduplicated within the batch and
        against the table on the key, and written in one Delta commit.
        """
        ts = spec(name)
        batch = self._as_table(ts, data)
        if batch.num_rows == 0:
            return 0
        batch = conform(batch, ts)
        keys = _key_strings(batch, ts.key)
        if pc.count_distinct(keys).as_py() != len(keys):  # keep the first occurrence of each key in the batch
            idx = pa.table({"k": keys, "i": pa.array(range(len(keys)))}).group_by("k").aggregate([("i", "min")])
            batch = batch.take(pc.sort(idx.column("i_min")))
            keys = _key_strings(batch, ts.key)
        existing = self.existing_keys(name, keys)
        if len(existing):
            batch = batch.filter(pc.invert(pc.is_in(keys, value_set=existing)))
        if batch.num_rows == 0:
            return 0
        self._write(ts, batch, mode="append")
        return batch.num_rows

    def upsert(self, name: str, data: pa.Table | list[dict[str, Any]]) -> int:
        """Insert or replace rows by key (one Delta merge commit). For small bookkeeping tables such as rounds."""
        ts = spec(name)
        batch = conform(self._as_table(ts, data), ts)
        if batch.num_rows == 0:
            return 0
        predicate = " AND ".join(f"t.{k} = s.{k}" for k in ts.key)
        (
            self.delta(name)
            .merge(batch, predicate=predicate, source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        return batch.num_rows

    def _write(self, ts: TableSpec, batch: pa.Table, mode: str) -> None:
        write_deltalake(
            self.table_uri(ts.name),
            batch,
            mode=mode,
            partition_by=list(ts.partition_by) or None,
            storage_options=self.storage_options,
        )

    @staticmethod
    def _as_table(ts: TableSpec, data: Any) -> pa.Table:
        if isinstance(data, pa.Table):
            return data
        if isinstance(data, pa.RecordBatch):
            return pa.Table.from_batches([data])
        if isinstance(data, list):
            if data and isinstance(data[0], dict):
                cols = {f.name: [r.get(f.name) for r in data] for f in ts.schema if any(f.name in r for r in data)}
                unknown = {k for r in data for k in r} - set(ts.schema.names)
                if unknown:
                    raise SchemaError(f"table {ts.name}: unknown column(s) {', '.join(sorted(unknown))}")
                try:
                    return pa.table({n: pa.array(v, type=ts.schema.field(n).type) for n, v in cols.items()})
                except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
                    bad = _find_bad_column(ts, cols)
                    raise SchemaError(f"table {ts.name}: column {bad!r}: {e}") from None
            return ts.schema.empty_table()
        batches = list(data)
        return pa.Table.from_batches(batches) if batches else ts.schema.empty_table()

    # ----------------------------------------------------------------- DuckDB
    def duckdb(self, version: int | None = None, tables: Iterable[str] | None = None):  # noqa: ANN201
        """A DuckDB connection with one view per table (at `version` where given, for every table)."""
        from storage.views import connect

        return connect(self, version=version, tables=tables)

    def iter_tables(self) -> Iterator[tuple[str, DeltaTable]]:
        for name in TABLES:
            yield name, self.delta(name)


def _find_bad_column(ts: TableSpec, cols: dict[str, list[Any]]) -> str:
    for n, v in cols.items():
        try:
            pa.array(v, type=ts.schema.field(n).type)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return n
    return "?"


def content_id(*parts: str) -> str:
    """A short stable id from parts (for quarantine rows, audits, pairs)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(str(p).encode())
        h.update(b"\x1f")
    return h.hexdigest()[:32]
