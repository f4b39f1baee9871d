"""Schemas are enforced (refused batches name the column and write nothing); schema versions migrate or refuse."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from schemas.tables import TABLES
from storage import Lake, LakeError, SchemaError
from storage.delta import MANIFEST
from storage.migrations import MIGRATIONS
from storage.objects import open_object_store
from storage.uri import parse_lake_uri
from tests.storage.data import episodes


def _refused(lake: Lake, table: str, batch, column: str) -> str:
    v = lake.version(table)
    with pytest.raises(SchemaError) as e:
        lake.append(table, batch)
    msg = str(e.value)
    assert column in msg and "\n" not in msg, msg
    assert lake.version(table) == v and lake.count(table) == 0  # nothing written: the Delta version did not move
    return msg


def test_wrong_type_is_refused_naming_the_column(any_lake) -> None:
    t = episodes(3)
    bad = t.set_column(t.schema.get_field_index("round"), "round", pa.array(["one", "two", "three"]))
    assert "string" in _refused(any_lake, "episodes", bad, "'round'")


def test_wrong_type_inside_the_nested_steps_is_refused(any_lake) -> None:
    t = episodes(2)
    step = pa.struct([("index", pa.string()), ("action", pa.string())])
    steps = pa.array([[{"index": "zero", "action": "wait()"}]] * 2, pa.list_(step))
    _refused(any_lake, "episodes", t.set_column(t.schema.get_field_index("steps"), "steps", steps), "'steps'")


def test_missing_required_column_is_refused(any_lake) -> None:
    _refused(any_lake, "episodes", episodes(3).drop_columns(["instruction"]), "'instruction'")


def test_null_in_required_column_and_unknown_column_are_refused(any_lake) -> None:
    t = episodes(2)
    nulls = t.set_column(t.schema.get_field_index("task_id"), pa.field("task_id", pa.string()), pa.array([None, "x"]))
    _refused(any_lake, "episodes", nulls, "'task_id'")
    _refused(any_lake, "episodes", t.append_column("colour", pa.array(["red", "blue"])), "colour")
    rows = [{"quarantine_id": "q", "source": "x", "landed_uri": "u", "error_type": "e", "error": "m", "round": "NaN"}]
    _refused(any_lake, "quarantine", rows, "'round'")


def test_missing_nullable_column_is_filled_with_nulls(any_lake) -> None:
    assert any_lake.append("episodes", episodes(2).drop_columns(["app", "meta"])) == 2
    assert any_lake.read("episodes", columns=["app"]).column("app").null_count == 2


# ------------------------------------------------------------------------------------------ schema versions
OLD_EPISODES = pa.schema([f for f in TABLES["episodes"].schema if f.name not in ("app", "meta")])


def _old_lake(base: Lake, episodes_version: int = 0) -> str:
    """A lake as an older flywheel left it: episodes at schema version 0 (without the nullable columns app and
    meta, and holding 3 rows), and no audits table (added later)."""
    uri = str(base.uri) + "-old"
    lu = parse_lake_uri(uri)
    old = Lake(lu, open_object_store(lu))
    for name, ts in TABLES.items():
        if name != "audits":
            schema = OLD_EPISODES if name == "episodes" else ts.schema
            write_deltalake(old.table_uri(name), schema.empty_table(), storage_options=old.storage_options)
    rows = episodes(3).select(OLD_EPISODES.names).cast(OLD_EPISODES)
    write_deltalake(old.table_uri("episodes"), rows, mode="append", storage_options=old.storage_options)
    tables = {n: ts.version for n, ts in TABLES.items() if n != "audits"} | {"episodes": episodes_version}
    old.objects.put_text(MANIFEST, json.dumps({"format": 1, "tables": tables}))
    return uri


def test_older_lake_is_migrated_on_open(any_lake) -> None:
    uri = _old_lake(any_lake)
    lake = Lake.open(uri)
    m = lake.read_manifest()
    assert m["tables"] == {n: ts.version for n, ts in TABLES.items()}
    assert [(h["table"], h["from"], h["to"], h["added_columns"]) for h in m["history"]] == [
        ("episodes", 0, TABLES["episodes"].version, ["app", "meta"])
    ]
    assert lake.table_exists("audits")
    # the old rows read with nulls in the new columns; new rows with them append next to the old ones
    got = lake.read("episodes")
    assert got.num_rows == 3 and got.column("meta").null_count == 3
    assert lake.append("episodes", episodes(5)) == 2  # 3 of the 5 keys were already there
    assert sorted(lake.read("episodes").column("app").to_pylist(), key=str) == [None] * 5
    v = lake.version("episodes")
    Lake.open(uri)  # opening again migrates nothing
    assert lake.version("episodes") == v and len(lake.read_manifest()["history"]) == 1


def test_registered_migration_runs_once_in_order(lake, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def fill_app(lk: Lake) -> None:  # a real data migration: the old rows get a value in the new column
        calls.append(lk.version("episodes"))
        from storage.migrations import add_missing_columns

        add_missing_columns(lk, "episodes")
        lk.delta("episodes").update({"app": "'legacy'"})

    monkeypatch.setitem(MIGRATIONS, ("episodes", 0), fill_app)
    migrated = Lake.open(_old_lake(lake))
    assert len(calls) == 1
    assert migrated.read("episodes").column("app").to_pylist() == ["legacy"] * 3
    assert migrated.read_manifest()["history"][0]["added_columns"] == []  # the migration had added them


def test_newer_table_version_is_refused_with_one_line(any_lake) -> None:
    m = any_lake.read_manifest()
    m["tables"]["verdicts"] = TABLES["verdicts"].version + 1
    any_lake.objects.put_text(MANIFEST, json.dumps(m))
    with pytest.raises(LakeError) as e:
        Lake.open(str(any_lake.uri))
    assert "upgrade flywheel" in str(e.value) and "'verdicts'" in str(e.value) and "\n" not in str(e.value)


def test_newer_lake_format_is_refused(lake) -> None:
    m = lake.read_manifest() | {"format": 99}
    lake.objects.put_text(MANIFEST, json.dumps(m))
    with pytest.raises(LakeError, match="newer flywheel.*upgrade"):
        Lake.open(str(lake.uri))
    with pytest.raises(LakeError, match="upgrade"):
        Lake.open(str(lake.uri), create=True)  # init must not overwrite a newer manifest either
