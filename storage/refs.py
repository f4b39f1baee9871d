"""Lake-relative object references in old rows: the migration that rewrites absolute URIs to keys.

Rows written before schema version 2 of `episodes`, `training_runs` and `rounds` refer to screenshots and
checkpoints by the absolute URI of the lake at write time (a local path or s3://...), so a lake copied elsewhere
pointed back at the old place. Readers already map such a URI by its `objects/...` suffix
(storage.objects.object_key_of); these steps rewrite the stored values to keys, so every copy of a migrated lake is
self-contained. Each is idempotent: a file or row that holds only keys is left alone (`Lake.rewrite_files`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from storage.objects import object_key_of

if TYPE_CHECKING:
    from storage.lake import Lake

#: A JSON string literal (the value of a config or status field).
_JSON_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def key_or_same(ref: str | None) -> str | None:
    """`ref` as a lake-relative key when it names a lake object, else unchanged (a landing path, a model folder)."""
    return object_key_of(ref) or ref


def map_strings(values: pa.Array | pa.ChunkedArray, fn: Callable[[str], str]) -> pa.Array | pa.ChunkedArray | None:
    """A string column with `fn` applied to each distinct value; None when nothing changes."""
    distinct = pc.unique(values).drop_null()
    before = distinct.to_pylist()
    mapped = [fn(v) for v in before]
    if mapped == before:
        return None
    return pc.take(pa.array(mapped, values.type), pc.index_in(values, distinct))


def keys_of(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray | None:
    """A string column with every object reference as its key; None when nothing changes."""
    return map_strings(values, key_or_same)  # type: ignore[arg-type]


def json_with_keys(text: str | None) -> str | None:
    """A JSON document with every string value that is an object reference replaced by its key."""
    if not text:
        return text

    def one(m: re.Match[str]) -> str:
        key = object_key_of(m.group(1))
        return f'"{key}"' if key else m.group(0)

    return _JSON_STRING.sub(one, text)


def map_step_field(steps: pa.ChunkedArray, field: str, fn: Callable[[str], str]) -> pa.ChunkedArray | None:
    """steps (list<struct>) with `fn` applied to `field` of every step; None when no step changes."""
    chunks, changed = [], False
    for ch in steps.chunks:
        flat = ch.flatten()  # the steps of this chunk's rows, as one struct array
        children = flat.flatten()
        i = flat.type.get_field_index(field)
        new = map_strings(children[i], fn)
        if new is None:
            chunks.append(ch)
            continue
        changed = True
        children[i] = new
        values = pa.StructArray.from_arrays(children, fields=list(flat.type))
        offsets = pc.subtract(ch.offsets, ch.offsets[0])
        chunks.append(pa.ListArray.from_arrays(offsets, values, type=ch.type, mask=ch.is_null()))
    return pa.chunked_array(chunks, steps.type) if changed else None


def rewrite_columns(
    lake: Lake, name: str, columns: dict[str, Callable[[pa.ChunkedArray], pa.ChunkedArray | None]]
) -> int:
    """Each data file of `name` with `columns[c](column)` in place of column c where it changes; the files changed."""

    def fn(t: pa.Table) -> pa.Table | None:
        out, changed = t, False
        for col, f in columns.items():
            if col not in t.column_names:
                continue
            new = f(t.column(col))
            if new is not None:
                out = out.set_column(out.schema.get_field_index(col), out.schema.field(col), new)
                changed = True
        return out if changed else None

    return lake.rewrite_files(name, fn)


def _json_column(col: pa.ChunkedArray) -> pa.ChunkedArray | None:
    vals = col.to_pylist()
    new = [json_with_keys(v) for v in vals]
    return None if new == vals else pa.chunked_array([pa.array(new, col.type)])


def episodes_to_keys(lake: Lake) -> None:
    """Every step's screenshot_uri as a lake-relative key."""
    rewrite_columns(lake, "episodes", {"steps": lambda c: map_step_field(c, "screenshot_uri", key_or_same)})  # type: ignore[arg-type]


def training_runs_to_keys(lake: Lake) -> None:
    """Checkpoint references (base, output, and inside config and metrics, e.g. a merge's specialists) as keys."""
    rewrite_columns(lake, "training_runs", {"base_checkpoint": keys_of, "output_checkpoint": keys_of,
                                     "config": _json_column, "metrics": _json_column})  # fmt: skip


def rounds_to_keys(lake: Lake) -> None:
    """The checkpoints in each round's stage statuses (checkpoint, base, checkpoint_used) as keys."""
    rewrite_columns(lake, "rounds", {"stage_status": _json_column, "breakdown": _json_column})
