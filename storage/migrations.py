"""Schema versions of a lake's tables: check them on open, migrate older ones in place, refuse newer ones.

The manifest (`_flywheel_lake.json`) records each table's schema version. On open:
- a lake format or table version newer than this code -> LakeError telling the user to upgrade flywheel;
- a table missing from the manifest (added to flywheel after the lake was made) -> created (by Lake.init);
- an older table version -> each step v -> v+1 runs the migration registered for (table, v), if any, then the
  table's schema is evolved to add every nullable column the current schema has and the table lacks (the
  common, additive change needs no code). A table that still does not match is refused with what to do.
The manifest then records the new versions and a history line per migrated table (who reads it: auditors).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from schemas.tables import TABLES
from storage import refs
from storage.errors import LakeError

if TYPE_CHECKING:
    from storage.lake import Lake

Migration = Callable[["Lake"], None]

#: (table, from_version) -> function(lake) that brings the table from from_version to from_version + 1.
#: Register with @migration("table", from_version). Additive nullable columns need no entry.
MIGRATIONS: dict[tuple[str, int], Migration] = {}


def migration(table: str, from_version: int) -> Callable[[Migration], Migration]:
    """Register fn as the step that brings `table` from `from_version` to `from_version + 1`."""

    def register(fn: Migration) -> Migration:
        MIGRATIONS[(table, from_version)] = fn
        return fn

    return register


def check_versions(lake: Lake, manifest: dict[str, Any]) -> dict[str, Any]:
    """Raise LakeError for anything written by a newer flywheel; migrate older tables in place."""
    from storage.delta import LAKE_FORMAT

    fmt = manifest.get("format", 1)
    if fmt > LAKE_FORMAT:
        raise LakeError(
            f"{lake.uri} was written by a newer flywheel (lake format {fmt} > {LAKE_FORMAT}); upgrade flywheel "
            "(pip install -U flywheel)"
        )
    tables = manifest.get("tables", {})
    for name, v in tables.items():
        if name in TABLES and v > TABLES[name].version:
            raise LakeError(
                f"table {name!r} in {lake.uri} has schema version {v}, newer than this flywheel's "
                f"{TABLES[name].version}; upgrade flywheel (pip install -U flywheel)"
            )
    if any(n in TABLES and v < TABLES[n].version for n, v in tables.items()):
        manifest = migrate(lake, manifest)
    return manifest


def migrate(lake: Lake, manifest: dict[str, Any]) -> dict[str, Any]:
    """Bring every table to the current schema version and rewrite the manifest; returns the new manifest."""
    from storage.delta import MANIFEST

    tables = dict(manifest.get("tables", {}))
    history = list(manifest.get("history", []))
    now = datetime.now(UTC).isoformat(timespec="seconds")
    for name, ts in TABLES.items():
        if name not in tables:
            continue  # a table newer than the lake: Lake.init creates it
        old = tables[name]
        if old >= ts.version:
            continue
        for v in range(old, ts.version):
            step = MIGRATIONS.get((name, v))
            if step is not None:
                step(lake)
        added = add_missing_columns(lake, name)
        _check_matches(lake, name, old)
        tables[name] = ts.version
        history.append({"table": name, "from": old, "to": ts.version, "added_columns": added, "at": now})
    manifest = {**manifest, "tables": tables, "history": history}
    lake.objects.put_text(MANIFEST, json.dumps(manifest, indent=2, sort_keys=True))
    return manifest


def add_missing_columns(lake: Lake, name: str) -> list[str]:
    """Schema evolution: add the table spec's nullable columns that the Delta table lacks (one commit)."""
    from deltalake import Field

    from storage.delta import delta_errors

    dt = lake.delta(name)
    have = set(pa.schema(dt.schema().to_arrow()).names)
    missing = [f for f in TABLES[name].schema if f.name not in have]
    if not missing:
        return []
    required = [f.name for f in missing if not f.nullable]
    if required:
        raise LakeError(
            f"table {name!r} lacks required column(s) {', '.join(required)} and has no migration that adds them; "
            "migrate it with a newer flywheel or rebuild it from the landing area"
        )
    with delta_errors(f"adding columns to {name}"):
        dt.alter.add_columns([Field.from_arrow(f) for f in missing])
    return [f.name for f in missing]


def _check_matches(lake: Lake, name: str, old: int) -> None:
    """After migrating, every spec column must be in the table with a type that conforms to it."""
    from storage.delta import compatible

    have = {f.name: f.type for f in _arrow_schema(lake, name)}
    for f in TABLES[name].schema:
        if f.name not in have or not compatible(have[f.name], f.type):
            raise LakeError(
                f"table {name!r}: migration from schema version {old} left column {f.name!r} as "
                f"{have.get(f.name, 'missing')} (expected {f.type}); report this and restore the table from backup"
            )


def _arrow_schema(lake: Lake, name: str) -> pa.Schema:
    return pa.schema(lake.delta(name).schema().to_arrow())


def _thin_pile(name: str) -> Migration:
    """Schema 1 -> 2 of a pile: whole episode copies become thin membership rows (schemas.tables, storage/piles.py).

    One overwrite commit with the thin schema. Older versions keep their whole rows for time travel (pinned
    exports and training runs), and storage.piles.read_pile reads either kind through the same join.
    """

    def step(lake: Lake) -> None:
        from deltalake import write_deltalake

        from storage.delta import conform, delta_errors

        ts = TABLES[name]
        have = set(_arrow_schema(lake, name).names)
        if have == set(ts.schema.names):
            return  # already thin (a migration interrupted after its commit)
        rows = lake.read(name, [c for c in ts.schema.names if c in have])
        with delta_errors(f"migrating {name} to thin rows"):
            write_deltalake(
                lake.table_uri(name),
                conform(rows, ts),
                mode="overwrite",
                schema_mode="overwrite",
                storage_options=lake.storage_options,
            )

    return step


for _pile in ("sft", "ct"):
    MIGRATIONS[(_pile, 1)] = _thin_pile(_pile)

# Schema 1 -> 2 of episodes, training_runs and rounds: object references become lake-relative keys (storage/refs.py).
MIGRATIONS[("episodes", 1)] = refs.episodes_to_keys
MIGRATIONS[("training_runs", 1)] = refs.training_runs_to_keys
MIGRATIONS[("rounds", 1)] = refs.rounds_to_keys
