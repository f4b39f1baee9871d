"""Thin piles (schema 2): pile rows are membership + routing columns, episodes are joined in by read_pile and the
DuckDB views; routing reads only the step fields its validators declare; old fat piles migrate; repairs never
duplicate verdicts."""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import write_deltalake

from schemas.tables import CT, EPISODES, SFT, TABLES
from storage import Lake, projection
from storage.delta import MANIFEST
from storage.piles import full_columns, read_pile
from storage.query import run_query
from validators.base import EpisodeBatch
from validators.lake_check import check_lake
from validators.registry import ValidationContext, parse_policy
from validators.routing import Plan, decide, route_round
from validators.synthetic import screenshot_pool, synthetic_rollouts

POLICY = parse_policy(
    {
        "sources": {
            "default": [
                "schema",
                "action_grammar",
                "on_screen",
                "monotonic_time",
                "thoughts",
                "screenshot",
                "step_limit",
                "dedup_exact",
            ]
        }
    }
)


def _routed(lake: Lake, n: int = 60, round: int = 1, seed: int = 0) -> pa.Table:
    pool = screenshot_pool(lake, k=8)
    t = synthetic_rollouts(n, round, screenshots=pool, steps=4, seed=seed, bad_share=0.2, dup_share=0.1)
    lake.append("episodes", t)
    route_round(lake, round, policy=POLICY)
    return t


def test_piles_are_thin_and_read_pile_joins_the_episodes(lake) -> None:
    eps = _routed(lake)
    assert lake.read("sft").schema.names == SFT.names and lake.read("ct").schema.names == CT.names
    sft = read_pile(lake, "sft")
    assert sft.schema.names == full_columns("sft") == EPISODES.names + ["round_routed"]
    by_id = {r["episode_id"]: r for r in eps.to_pylist()}
    for row in sft.to_pylist():  # every episode column is the episode's own value
        assert {k: v for k, v in row.items() if k != "round_routed"} == by_id[row["episode_id"]] and row[
            "round_routed"
        ] == 1
    ct = read_pile(lake, "ct", ["episode_id", "reasons", "steps", "meta"], step_fields=["action"])
    assert ct.num_rows == lake.count("ct") > 0 and all(ct.column("reasons").to_pylist())
    assert ct.schema.field("steps").type.value_type.names == ["action"]  # nested projection
    # the exact-dedup key travels on the pile row, under the validator version that computed it
    keys = lake.read("sft", ["content_key", "content_key_version"])
    assert keys.column("content_key").null_count == 0 and len(set(keys.column("content_key_version").to_pylist())) == 1
    # filters: on a pile column (pushed down), on an episode column (applied after the join)
    one = sft.column("episode_id")[0].as_py()
    assert read_pile(lake, "sft", ["episode_id"], filter=pc.field("episode_id") == one).column(0).to_pylist() == [one]
    fam = sft.column("task_family")[0].as_py()
    got = read_pile(lake, "sft", ["episode_id", "n_steps"], filter=pc.field("task_family") == fam)
    assert got.num_rows == sum(1 for r in sft.to_pylist() if r["task_family"] == fam) and got.column_names == [
        "episode_id",
        "n_steps",
    ]
    assert read_pile(lake, "sft", ["episode_id"], filter=pc.field("session_id") == "nope").num_rows == 0
    with pytest.raises(Exception, match="unknown column"):
        read_pile(lake, "sft", ["colour"])


def test_duckdb_pile_views_show_whole_episodes_and_thin_rows(lake) -> None:
    _routed(lake)
    v_before = lake.version("sft")
    con = lake.duckdb()
    n = lake.count("sft")
    assert (
        con.sql("SELECT count(*) FROM sft").fetchone()[0] == n == con.sql("SELECT count(*) FROM sft_thin").fetchone()[0]
    )
    steps, rr = con.sql("SELECT len(steps), round_routed FROM sft LIMIT 1").fetchone()
    assert steps == 4 and rr == 1
    assert con.sql("SELECT count(*) FROM ct WHERE len(reasons) > 0").fetchone()[0] == lake.count("ct")
    names = {r[0] for r in con.sql("SELECT DISTINCT table_name FROM lake_columns").fetchall()}
    assert {"sft", "ct", "sft_thin", "ct_thin"} <= names and not any(x.startswith("_") for x in names)
    # a pinned pile version shows that version's episodes, joined to the (only growing) episodes table
    _routed(lake, n=20, round=2, seed=9)
    old = run_query(lake, "SELECT count(*) AS n, count(steps) AS s FROM sft", version={"sft": v_before, "episodes": 0})
    assert old.to_pylist() == [{"n": n, "s": n}]
    assert run_query(lake, "SELECT count(*) AS n FROM sft_thin", version={"sft": v_before}).to_pylist() == [{"n": n}]


def _unique_shots(n: int) -> list[tuple[str, str]]:
    out = []
    for i in range(n):
        sha = hashlib.sha256(str(i).encode()).hexdigest()
        out.append((f"file:///nowhere/{sha}.png", sha))
    return out


def test_projected_routing_reads_decide_exactly_as_whole_episodes(lake) -> None:
    """Two data files: one whose screenshot columns Parquet kept dictionary-encoded (a small pool of images), one
    where it fell back to plain values (20,000 distinct URIs). Routing's projected read (declared step fields,
    dictionaries) and a read of whole episodes give the same verdicts."""
    pool = screenshot_pool(lake, k=8)
    a = synthetic_rollouts(300, 1, screenshots=pool, steps=5, seed=1, bad_share=0.3, dup_share=0.1)
    b = synthetic_rollouts(1000, 1, screenshots=_unique_shots(20_000), steps=20, seed=2, bad_share=0.3, start=300)
    lake.append("episodes", a)
    lake.append("episodes", b)
    plan = Plan.build(POLICY, ValidationContext(lake))
    r = plan.reads()
    assert r.step_fields is not None and "observation" not in r.step_fields and "proposals" not in r.step_fields
    assert r.dictionary_fields == ["screenshot_uri", "screenshot_sha256"]
    parts = list(
        projection.scan(lake, "episodes", r.columns, step_fields=r.step_fields, dictionary_fields=r.dictionary_fields)
    )
    assert len(parts) == 2
    projected = pa.concat_tables(parts)
    uri = projected.column("steps").chunk(0).values.field("screenshot_uri")
    assert pa.types.is_dictionary(uri.type)
    assert sorted(len(p.column("steps").chunk(0).values.field("screenshot_uri").dictionary) for p in parts) == [
        8,
        20_000,
    ]
    whole = lake.read("episodes")
    got = decide(EpisodeBatch(projected, r.loaded), plan, 1)
    want = decide(EpisodeBatch(whole), plan, 1)

    def per_episode(t: pa.Table, d) -> dict:
        return dict(zip(t.column("episode_id").to_pylist(), zip(d.passed.tolist(), d.reasons.to_pylist())))

    assert per_episode(projected, got) == per_episode(whole, want)
    key = [("episode_id", "ascending"), ("validator", "ascending")]
    cols = ["episode_id", "validator", "passed", "reason", "score", "details"]
    assert got.verdicts.select(cols).sort_by(key).to_pylist() == want.verdicts.select(cols).sort_by(key).to_pylist()
    assert 0 < int(got.passed.sum()) < projected.num_rows  # both outcomes are exercised
    with pytest.raises(KeyError, match="reads"):  # a validator asking for what it did not declare is refused
        EpisodeBatch(projected, r.loaded).col("meta")


def _crash_after_verdicts(uri: str) -> None:
    from storage import Lake as L
    from validators.routing import route_round as rr

    def stop(stage, info):
        if stage == "verdicts_written":
            os._exit(3)

    rr(L.open(uri), 1, policy=POLICY, progress=stop)


def test_a_repair_after_a_crash_before_the_piles_writes_no_verdict_twice(lake) -> None:
    pool = screenshot_pool(lake, k=4)
    lake.append("episodes", synthetic_rollouts(50, 1, screenshots=pool, steps=3, bad_share=0.2))
    p = mp.get_context("spawn").Process(target=_crash_after_verdicts, args=(str(lake.uri),))
    p.start()
    p.join(120)
    assert p.exitcode == 3 and lake.count("verdicts") == 50 * 8 and lake.count("sft") + lake.count("ct") == 0
    s = route_round(lake, 1, policy=POLICY)
    assert s.routed_now == 50 and s.n_pass + s.n_fail == 50
    assert lake.count("verdicts") == 50 * 8  # reused, not written again
    rep = check_lake(lake, media=False)
    assert rep.ok, [v.line() for v in rep.violations]


def _fat(name: str) -> pa.Schema:
    extra = [pa.field("round_routed", pa.int32(), nullable=False)]
    if name == "ct":
        extra.append(pa.field("reasons", pa.list_(pa.string()), nullable=False))
    return pa.schema(list(EPISODES) + extra)


def test_a_lake_with_fat_piles_migrates_to_thin_and_keeps_its_history(lake) -> None:
    """A schema-1 lake (piles holding whole episodes) opens as schema 2: one overwrite commit per pile; the old
    versions still read (time travel, pins); dedup recomputes the keys the legacy rows lack."""
    _routed(lake, n=40)
    full = {p: read_pile(lake, p) for p in ("sft", "ct")}
    for p, rows in full.items():  # what an older flywheel wrote: whole episodes in the piles
        write_deltalake(
            lake.table_uri(p),
            rows.cast(_fat(p)),
            mode="overwrite",
            schema_mode="overwrite",
            storage_options=lake.storage_options,
        )
    m = lake.read_manifest()
    m["tables"].update({"sft": 1, "ct": 1})
    lake.objects.put_text(MANIFEST, json.dumps(m))
    fat_version = lake.version("sft")
    assert lake.read("sft").schema.names == _fat("sft").names

    lake = Lake.open(str(lake.uri))  # migrates
    m = lake.read_manifest()
    assert m["tables"]["sft"] == m["tables"]["ct"] == TABLES["sft"].version == 2
    assert {h["table"] for h in m["history"]} >= {"sft", "ct"}
    assert lake.read("sft").schema.names == SFT.names and lake.read("ct").schema.names == CT.names
    for p, rows in full.items():
        now = read_pile(lake, p).sort_by("episode_id")
        assert now.to_pylist() == rows.sort_by("episode_id").to_pylist()
        assert lake.read(p, ["content_key"]).column(0).null_count == rows.num_rows  # legacy rows: no key yet
    old = read_pile(lake, "sft", version=fat_version).sort_by("episode_id")  # a fat version reads the same way
    assert old.to_pylist() == full["sft"].sort_by("episode_id").to_pylist()
    assert lake.version("sft") == fat_version + 1
    Lake.open(str(lake.uri))
    assert lake.version("sft") == fat_version + 1  # migrates once

    # routing goes on: a copy of a legacy SFT episode is caught as a duplicate (its key rehashed from episodes)
    legacy = full["sft"].slice(0, 1)
    copy = legacy.select(EPISODES.names).to_pylist()[0] | {
        "episode_id": "copy-of-legacy",
        "round": 2,
        "session_id": "again",
    }
    lake.append("episodes", pa.Table.from_pylist([copy], schema=EPISODES))
    s = route_round(lake, 2, policy=POLICY)
    assert (s.n_new, s.n_fail, s.reasons) == (1, 1, {"duplicate": 1})
    assert lake.read("ct", ["content_key"], filter=pc.field("round") == 2).column(0).null_count == 0
    rep = check_lake(lake, media=False)
    assert rep.ok, [v.line() for v in rep.violations]


def test_exact_dedup_index_comes_from_the_piles_not_the_verdicts(lake) -> None:
    """Round 2's dedup index is the piles' content_key column: deleting every verdict does not change it."""
    first = _routed(lake, n=30)
    lake.delta("verdicts").delete()
    again = first.slice(0, 5).set_column(0, "episode_id", pa.array([f"again-{i}" for i in range(5)]))
    again = again.set_column(again.schema.get_field_index("round"), "round", pa.array(np.full(5, 2, np.int32)))
    lake.append("episodes", again)
    s = route_round(lake, 2, policy=POLICY)
    assert s.n_new == 5 and s.reasons.get("duplicate") == 5
