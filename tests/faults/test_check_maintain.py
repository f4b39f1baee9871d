"""`flywheel check` finds each broken invariant (and passes on a sound lake); `flywheel maintain` compacts and
vacuums without losing a row, and keeps the versions that exports, audits and training runs refer to."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from storage.maintain import maintain
from storage.pins import list_pins, pin_version, pinned_versions
from tests.faults.conftest import assert_check_passes, flywheel
from validators.lake_check import check_lake
from validators.routing import route_round
from validators.synthetic import screenshot_pool, synthetic_rollouts


def routed_lake(lake, rounds: int = 2, n: int = 200, appends: int = 2):
    pool = screenshot_pool(lake, 3)
    for r in range(1, rounds + 1):
        for a in range(appends):
            lake.append("episodes", synthetic_rollouts(n, r, screenshots=pool, start=a * n, bad_share=0.1))
        route_round(lake, r)
    return lake


def _raw_append(lake, table: str, rows: pa.Table) -> None:
    """A write that bypasses Lake.append (no key check): what a buggy tool or a hand edit could do."""
    write_deltalake(lake.table_uri(table), rows, mode="append", storage_options=lake.storage_options)


def test_check_passes_on_a_sound_lake_and_names_each_broken_invariant(lake, tmp_path: Path) -> None:
    routed_lake(lake)
    rep = check_lake(lake)
    assert rep.ok, [v.line() for v in rep.violations]
    assert rep.stats["rounds.routed"] == 2 and rep.stats["media.screenshots_referenced"] == 3

    sft = lake.read("sft")
    _raw_append(lake, "sft", sft.slice(0, 2))  # duplicate keys
    ct_row = sft.slice(2, 1).append_column("reasons", pa.array([["x"]], pa.list_(pa.string())))
    _raw_append(lake, "ct", ct_row)  # one episode in both piles
    lake.append("episodes", synthetic_rollouts(3, 1, screenshots=screenshot_pool(lake, 3), start=9000))  # unrouted
    shot = lake.read("episodes", ["steps"]).column("steps")[0].as_py()[0]["screenshot_uri"]
    os.remove(lake.uri.key(shot))  # a referenced screenshot is gone (rows hold lake-relative keys)
    now = datetime.now(UTC)
    lake.append("training_runs", [{"run_id": "r1", "round": 1, "stage": "sft", "started_at": now,
                                   "output_checkpoint": lake.uri.join("objects/ab/" + "ab" * 32 + ".tar")}])  # fmt: skip
    verdict_file = lake.delta("verdicts").file_uris()[0]
    os.remove(verdict_file)  # a data file of the current version is gone

    rep = check_lake(lake)
    found = {(v.invariant, v.table) for v in rep.violations}
    assert {("duplicate_key", "sft"), ("pile_overlap", "sft+ct"), ("unrouted", "episodes"), ("round_counts", "rounds"),
            ("media_missing", "episodes"), ("checkpoint_missing", "training_runs"), ("data_file_missing", "tables")} <= found, found  # fmt: skip
    dup = next(v for v in rep.violations if v.invariant == "duplicate_key")
    assert dup.count == 2 and set(dup.examples) == set(sft.column("episode_id").to_pylist()[:2])
    assert next(v for v in rep.violations if v.invariant == "unrouted").count == 3

    r = flywheel("check", "--lake", str(lake.uri), "--no-media")
    assert r.returncode == 1
    assert "violated: duplicate_key [sft]: 2" in r.stderr and "violated: pile_overlap" in r.stderr, r.stderr
    assert "media_missing" not in r.stderr


@pytest.mark.slow
def test_maintain_compacts_vacuums_and_keeps_pinned_versions(any_lake, tmp_path: Path) -> None:
    from flywheel.people.audit import sample
    from flywheel.people.audit_sheet import write_sheet
    from training.exports import export

    lake = routed_lake(any_lake, rounds=2, n=100, appends=3)
    v_export = lake.version("sft")
    export(lake, "ct-text", tmp_path / "exp")  # pins ct at its version
    export(lake, "sft-verl", tmp_path / "verl")  # pins sft at v_export
    write_sheet(lake, sample(lake, 1, 5, seed=3), tmp_path / "audit")  # pins sft at the same version
    pile_at_export = lake.read("sft", version=v_export).num_rows
    assert {p.reason for p in list_pins(lake)} >= {"export ct-text", "export sft-verl", "audit sample round 1 seed 3"}
    # more rounds after the export: sft's files of the pinned version are replaced by compaction below
    lake.append("episodes", synthetic_rollouts(100, 3, screenshots=screenshot_pool(lake, 3)))
    route_round(lake, 3)
    old_unpinned = lake.version("sft")  # holds round 3's file, which no pinned version holds
    assert old_unpinned not in pinned_versions(lake)["sft"]
    counts = {t: lake.count(t) for t in ("episodes", "sft", "ct", "verdicts")}
    files = len(lake.delta("episodes").file_uris())
    assert files >= 7

    dry = maintain(lake, retain_hours=0, dry_run=True)
    assert lake.version("episodes") == dry.tables[1].version_before and all(t.files_compacted == 0 for t in dry.tables)

    rep = maintain(lake, retain_hours=0)
    by = {t.table: t for t in rep.tables}
    assert by["episodes"].files_after == 1 and by["episodes"].files_compacted == files
    assert by["sft"].kept_versions == [v_export] and by["sft"].files_vacuumed > 0
    assert {t: lake.count(t) for t in counts} == counts  # no row lost or added
    assert lake.read("sft", version=v_export).num_rows == pile_at_export  # the pinned version still reads
    with pytest.raises(Exception):  # an unpinned old version's files are gone (compacted, then vacuumed)
        lake.read("sft", version=old_unpinned)
    assert lake.read("sft", version=1).num_rows < pile_at_export  # older than the pin: its files are the pin's
    assert lake.delta("sft").metadata().configuration.get("delta.logRetentionDuration") == "interval 3650 days"
    assert (
        lake.append("episodes", synthetic_rollouts(100, 3, screenshots=screenshot_pool(lake, 3))) == 0
    )  # still idempotent
    assert_check_passes(lake)
    again = maintain(lake, retain_hours=0)
    assert all(t.files_compacted == 0 for t in again.tables)  # idempotent


def test_maintain_cli_and_training_run_pins(lake) -> None:
    routed_lake(lake, rounds=1, n=50)
    v = lake.version("ct")
    lake.append(
        "training_runs",
        [{"run_id": "ct1", "round": 1, "stage": "ct", "pile_version": v, "started_at": datetime.now(UTC)}],
    )
    assert pinned_versions(lake)["ct"] == {v}
    with pytest.raises(ValueError):
        pin_version(lake, "sft", -1, "bad")
    r = flywheel("maintain", "--lake", str(lake.uri), "--retain-hours", "0", "--table", "ct", "--table", "episodes")
    assert r.returncode == 0, r.stderr
    assert "episodes" in r.stdout and "ct" in r.stdout and "verdicts" not in r.stdout
    assert lake.read("ct", version=v).num_rows == lake.count("ct")
    r = flywheel("maintain", "--lake", str(lake.uri), "--table", "nope")
    assert r.returncode == 1 and r.stderr.startswith("error: unknown table") and len(r.stderr.strip().splitlines()) == 1
    assert "Example:" in flywheel("maintain", "--help").stdout and "Example:" in flywheel("check", "--help").stdout


@pytest.mark.slow
def test_maintain_flow(lake, prefect_harness) -> None:
    from flows.maintain import maintain_flow

    routed_lake(lake, rounds=1, n=50, appends=3)
    out = maintain_flow(str(lake.uri), retain_hours=0)
    eps = next(t for t in out["maintain"]["tables"] if t["table"] == "episodes")
    assert eps["files_before"] == 3 and eps["files_after"] == 1
    assert out["check"]["ok"], out["check"]["violations"]
