"""Reading a table with its nested `steps` cut down to the step fields a reader needs (Parquet nested projection).

A 20-step episode row is mostly step data, and most readers need a few step fields (validators: actions,
coordinates, times, thoughts, screenshot hashes; never observations, proposals or token log-probabilities). Arrow
datasets cannot project inside a list of structs, so each data file that survives Delta's file statistics is read
with `pyarrow.parquet.ParquetFile` and only the wanted leaf columns (`steps.list.element.<field>`), then brought to
one schema (columns added by schema evolution become nulls; list naming and widths are normalised) and filtered.

Step fields named in `dictionary_fields` come back as dictionary arrays: decoded straight from the file's Parquet
dictionary pages where the writer kept them (screenshot URIs and hashes repeat across steps and episodes, so a
million episodes hold a few thousand distinct values), and wrapped as-is (indices 0..n-1, no hashing) where it did
not. Readers then compute once per distinct value instead of once per step.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from storage.errors import LakeError

if TYPE_CHECKING:
    from storage.lake import Lake

STEPS = "steps"


def steps_type(schema: pa.Schema, fields: Sequence[str] | None, dictionary_fields: Sequence[str] = ()) -> pa.DataType:
    """The type of `steps` with only `fields` (in the table's order); the table's own type when fields is None."""
    full = schema.field(STEPS).type
    if fields is None:
        return full
    struct = full.value_type
    unknown = [f for f in [*fields, *dictionary_fields] if struct.get_field_index(f) < 0]
    if unknown:
        raise LakeError(f"unknown step field(s) {', '.join(unknown)}; step fields: {', '.join(f.name for f in struct)}")
    keep = []
    for f in struct:
        if f.name in set(fields):
            if f.name in set(dictionary_fields):
                if not pa.types.is_string(f.type):
                    raise LakeError(
                        f"step field {f.name!r} is {f.type}; only string fields can be read as dictionaries"
                    )
                f = f.with_type(pa.dictionary(pa.int32(), f.type))
            keep.append(f)
    return pa.list_(pa.struct(keep))


def projected_schema(
    schema: pa.Schema, columns: Sequence[str], step_fields: Sequence[str] | None, dictionary_fields: Sequence[str] = ()
) -> pa.Schema:
    """The schema `scan` returns: `columns` in order, `steps` reduced to `step_fields`."""
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise LakeError(f"unknown column(s) {', '.join(missing)}")
    steps = pa.field(STEPS, steps_type(schema, step_fields, dictionary_fields), schema.field(STEPS).nullable)
    return pa.schema([steps if c == STEPS else schema.field(c) for c in columns])


def scan(
    lake: Lake,
    table: str,
    columns: Sequence[str],
    *,
    step_fields: Sequence[str] | None = None,
    dictionary_fields: Sequence[str] = (),
    filter: pc.Expression | None = None,
    version: int | None = None,
) -> Iterator[pa.Table]:
    """One table per data file that may hold rows matching `filter` (Delta statistics prune the others), with
    `columns` (which must include every column `filter` names) and `steps` reduced to `step_fields`, of which
    `dictionary_fields` come as dictionary arrays.

    step_fields=None reads whole steps through the Arrow dataset (no projection to do).
    """
    dset = lake.dataset(table, version)
    return _scan(dset, _target(dset, columns, step_fields, dictionary_fields), filter)


def read(lake: Lake, table: str, columns: Sequence[str], **kw: Any) -> pa.Table:
    """`scan` (same keywords) gathered into one table, with its schema even when no row matches."""
    parts = list(scan(lake, table, columns, **kw))
    if parts:
        return pa.concat_tables(parts)
    dset = lake.dataset(table, kw.get("version"))
    return _target(dset, columns, kw.get("step_fields"), kw.get("dictionary_fields", ())).empty_table()


def _target(
    dset: ds.Dataset, columns: Sequence[str], step_fields: Sequence[str] | None, dictionary_fields: Sequence[str]
) -> pa.Schema:
    return projected_schema(
        dset.schema, columns, step_fields, [f for f in dictionary_fields if f in (step_fields or ())]
    )


def _scan(dset: ds.Dataset, target: pa.Schema, filter: pc.Expression | None) -> Iterator[pa.Table]:
    if STEPS not in target.names or target.field(STEPS).type.equals(dset.schema.field(STEPS).type):
        yield from _dataset_batches(dset, target.names, filter)
        return
    for frag in dset.get_fragments(filter=filter):
        t = _read_file(frag, dset.filesystem, target)
        if filter is not None:
            t = _filter(t, filter)
        if t.num_rows:
            yield t


def _filter(t: pa.Table, filter: pc.Expression) -> pa.Table:
    """t's rows matching filter (on its flat columns). Filtering a nested table copies every step it keeps, so the
    filter runs on the flat columns with row numbers, and rows are taken only when some are dropped."""
    flat = t.drop_columns([STEPS]).append_column("__row", pa.array(np.arange(t.num_rows, dtype=np.int64)))
    keep = flat.filter(filter).column("__row")
    return t if len(keep) == t.num_rows else t.take(keep)


def _dataset_batches(dset: ds.Dataset, columns: list[str], filter: pc.Expression | None) -> Iterator[pa.Table]:
    for frag in dset.get_fragments(filter=filter):
        t = frag.to_table(schema=dset.schema, columns=columns, filter=filter)
        if t.num_rows:
            yield t


def _leaf_paths(pf: pq.ParquetFile) -> dict[str, str]:
    """step field -> its Parquet leaf path prefix in this file (writers name the list level differently)."""
    out: dict[str, str] = {}
    for i in range(len(pf.schema)):
        parts = pf.schema.column(i).path.split(".")
        if parts[0] == STEPS and len(parts) >= 4:  # steps.<list>.<element>.<field>[.<nested>...]
            out.setdefault(parts[3], ".".join(parts[:4]))
    return out


def _dictionary_encoded(pf: pq.ParquetFile, path: str) -> bool:
    """Whether every row group keeps the leaf dictionary-encoded (a writer falls back to plain values when the
    dictionary grows too big; a plain string leaf costs at least 4 bytes per value on top of the text)."""
    md = pf.metadata
    for rg in range(md.num_row_groups):
        group = md.row_group(rg)
        for j in range(group.num_columns):
            c = group.column(j)
            if c.path_in_schema == path:
                if not c.has_dictionary_page or c.total_uncompressed_size >= 8 * max(c.num_values, 1):
                    return False
                break
        else:
            return False
    return True


def _read_file(frag: ds.Fragment, filesystem: pa.fs.FileSystem, target: pa.Schema) -> pa.Table:
    want_steps = target.field(STEPS).type.value_type
    dict_names = [f.name for f in want_steps if pa.types.is_dictionary(f.type)]
    pf = pq.ParquetFile(frag.path, filesystem=filesystem)
    leaves = _leaf_paths(pf)
    as_dict = [leaves[f] for f in dict_names if f in leaves and _dictionary_encoded(pf, leaves[f])]
    if as_dict:
        pf = pq.ParquetFile(frag.path, filesystem=filesystem, read_dictionary=as_dict)
    top = set(pf.schema_arrow.names)
    cols = [f.name for f in target if f.name != STEPS and f.name in top]
    paths = [leaves[f.name] for f in want_steps if f.name in leaves]
    if not leaves:  # a list layout this reader does not recognise: read whole steps, keep the wanted fields
        paths = [STEPS] if STEPS in top else []
    elif not paths:  # none of the wanted fields in this file: one leaf still gives the step counts
        paths = [next(iter(leaves.values()))]
    t = pf.read(columns=cols + paths, use_threads=True)
    n = pf.metadata.num_rows
    arrays = []
    for f in target:
        if f.name == STEPS:
            arrays.append(_conform_steps(t.column(STEPS), f.type) if STEPS in t.column_names else pa.nulls(n, f.type))
        elif f.name in t.column_names:
            col = t.column(f.name)
            arrays.append(col if col.type.equals(f.type) else col.cast(f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(arrays, schema=target)


def _conform_steps(col: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """A file's projected steps as exactly `target` (missing fields as nulls, list field naming normalised)."""
    struct = target.value_type
    if col.type.equals(target):
        return col
    out = []
    for chunk in col.chunks:
        values = chunk.values
        children = []
        for f in struct:
            idx = values.type.get_field_index(f.name)
            child = values.field(idx) if idx >= 0 else pa.nulls(len(values), f.type)
            if pa.types.is_dictionary(f.type) and not pa.types.is_dictionary(child.type):
                child = _as_dictionary(child.cast(f.type.value_type))
            children.append(child if child.type.equals(f.type) else child.cast(f.type))
        mask = values.is_null() if values.null_count else None
        st = pa.StructArray.from_arrays(children, fields=list(struct), mask=mask)
        lmask = chunk.is_null() if chunk.null_count else None
        out.append(pa.ListArray.from_arrays(chunk.offsets, st, type=target, mask=lmask))
    return pa.chunked_array(out, type=target)


def _as_dictionary(values: pa.Array) -> pa.DictionaryArray:
    """Plain values as a dictionary array without hashing: indices 0..n-1 (nulls stay nulls in the indices)."""
    n = len(values)
    idx = pa.array(
        np.arange(n, dtype=np.int32),
        mask=values.is_null().to_numpy(zero_copy_only=False) if values.null_count else None,
    )
    return pa.DictionaryArray.from_arrays(idx, values.fill_null("") if values.null_count else values)
