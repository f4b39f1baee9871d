"""Idempotent appends on both backends: a batch twice is one copy, an overlapping batch adds only new keys."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa

from tests.storage.data import episodes, ids


def test_same_batch_twice_is_one_copy(any_lake) -> None:
    t = episodes(30)
    v0 = any_lake.version("episodes")
    assert any_lake.append("episodes", t) == 30
    assert any_lake.append("episodes", t) == 0
    assert any_lake.count("episodes") == 30
    assert any_lake.version("episodes") == v0 + 1  # the no-op append wrote no commit
    assert ids(any_lake.read("episodes")) == ids(t)


def test_overlapping_batch_adds_only_new_keys(any_lake) -> None:
    assert any_lake.append("episodes", episodes(20)) == 20
    overlap = episodes(20, start=10)  # 10 old keys, 10 new ones
    assert any_lake.append("episodes", overlap) == 10
    got = any_lake.read("episodes")
    assert got.num_rows == 30
    assert ids(got) == sorted(set(ids(episodes(20))) | set(ids(overlap)))


def test_duplicates_inside_one_batch_keep_the_first(any_lake) -> None:
    t = episodes(5)
    doubled = pa.concat_tables([t, t.slice(0, 2)])
    assert any_lake.append("episodes", doubled) == 5
    assert any_lake.count("episodes") == 5


def test_composite_key_and_dict_rows(any_lake) -> None:
    now = datetime.now(UTC)
    rows = [
        {
            "episode_id": "e1",
            "round": 1,
            "validator": "grammar",
            "version": "1",
            "passed": True,
            "reason": "ok",
            "validated_at": now,
        },
        {
            "episode_id": "e1",
            "round": 1,
            "validator": "outcome",
            "version": "1",
            "passed": False,
            "reason": "no_answer",
            "validated_at": now,
        },
    ]
    assert any_lake.append("verdicts", rows) == 2
    # same (episode, validator, version) again, plus a new validator version: only the latter lands
    again = rows[:1] + [{**rows[1], "version": "2", "passed": True, "reason": "ok"}]
    assert any_lake.append("verdicts", again) == 1
    got = any_lake.read("verdicts").sort_by([("validator", "ascending"), ("version", "ascending")])
    assert got.select(["validator", "version", "passed"]).to_pylist() == [
        {"validator": "grammar", "version": "1", "passed": True},
        {"validator": "outcome", "version": "1", "passed": False},
        {"validator": "outcome", "version": "2", "passed": True},
    ]


def test_upsert_replaces_by_key(any_lake) -> None:
    now = datetime.now(UTC)
    any_lake.upsert(
        "rounds", [{"round": 1, "n_new": 10, "updated_at": now}, {"round": 2, "n_new": 5, "updated_at": now}]
    )
    any_lake.upsert("rounds", [{"round": 2, "n_new": 7, "updated_at": now}])
    got = any_lake.read("rounds").sort_by("round").select(["round", "n_new"]).to_pylist()
    assert got == [{"round": 1, "n_new": 10}, {"round": 2, "n_new": 7}]


def test_empty_batch_writes_nothing(any_lake) -> None:
    v = any_lake.version("episodes")
    assert any_lake.append("episodes", episodes(0)) == 0
    assert any_lake.append("episodes", []) == 0
    assert any_lake.version("episodes") == v


def test_written_files_are_plain_delta_with_stats(lake) -> None:
    """Other readers (Polars, delta-rs) see the same rows, and the commit carries per-file statistics."""
    import polars as pl

    lake.append("episodes", episodes(12, round=4))
    df = pl.read_delta(lake.table_uri("episodes"))
    assert df.height == 12 and df["round"].unique().to_list() == [4]
    adds = lake.delta("episodes").get_add_actions(flatten=True)
    assert adds.column("num_records").to_pylist() == [12]
    assert adds.column("min.round").to_pylist() == [4] and adds.column("max.round").to_pylist() == [4]
    # objects are content-addressed: the same bytes are stored once, under their hash
    u1, u2 = lake.objects.put_object(b"\x89PNG same", ".png"), lake.objects.put_object(b"\x89PNG same", ".png")
    assert u1 == u2 and lake.objects.get_object(u1) == b"\x89PNG same"


def test_digest_columns_are_written_uncompressed_and_the_rest_snappy(lake) -> None:
    """Random hex ids gain ~10% from snappy at half a verdicts write's CPU: they are stored plain, every other leaf
    (nested ones included) compressed, and the rows read back the same."""
    import pyarrow.parquet as pq

    eps = episodes(6, round=1)
    lake.append("episodes", eps)
    (path,) = lake.delta("episodes").file_uris()
    meta = pq.ParquetFile(path).metadata.row_group(0)
    codecs = {meta.column(i).path_in_schema: meta.column(i).compression for i in range(meta.num_columns)}
    assert codecs.pop("episode_id") == "UNCOMPRESSED"
    assert set(codecs.values()) == {"SNAPPY"} and any(p.startswith("steps.") for p in codecs)
    assert lake.read("episodes").sort_by("episode_id").column("episode_id").to_pylist() == sorted(ids(eps))
