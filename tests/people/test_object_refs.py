"""Lake-relative object references: a copied lake (local or S3) exports every screenshot, an old lake holding
absolute URIs migrates to keys (once) and exports, and a missing screenshot fails an export in one line unless
--allow-missing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from storage import refs
from storage.delta import MANIFEST
from storage.lake import Lake
from storage.objects import object_key_of
from tests.people.helpers import T0, populate
from training.exports import ExportError, export

#: The tables whose object references changed form in schema version 2.
REF_TABLES = ("episodes", "training_runs", "rounds")


def _shots(lake: Lake, table: str = "episodes") -> list[str]:
    from storage.piles import read_pile

    rows = (
        read_pile(lake, "sft", ["episode_id", "steps"], step_fields=["screenshot_uri"])
        if table == "sft"
        else lake.read(table)
    )
    return [s["screenshot_uri"] for e in rows.column("steps").to_pylist() for s in e if s["screenshot_uri"]]


def _with_checkpoints(lake: Lake) -> tuple[str, str]:
    """Two checkpoint objects and rows that name them (a training run, a round's stage status, a merge config)."""
    a = lake.objects.put_object(b"checkpoint a", ".tar")
    b = lake.objects.put_object(b"checkpoint b", ".tar")
    lake.append("training_runs", [{"run_id": "ck-1", "round": 1, "stage": "sft", "base_checkpoint": a,
                                   "output_checkpoint": b, "config": json.dumps({"merge": {"specialists": {"x": a}}}),
                                   "started_at": T0}])  # fmt: skip
    lake.upsert("rounds", [{"round": 1, "stage_status": json.dumps({"sft": {"status": "done", "checkpoint": b, "base": a}}),
                            "updated_at": T0}])  # fmt: skip
    return a, b


def _make_old(lake: Lake) -> None:
    """Turn a lake into what flywheel wrote before version 2: every reference the absolute URI of this lake, and the
    manifest at schema version 1 for the three tables (real Delta rewrites, the path the migration takes back)."""
    root = lake.uri.join()

    def absolute(ref: str) -> str:
        return lake.uri.join(ref) if ref.startswith("objects/") else ref

    def absolute_json(text: str | None) -> str | None:
        return None if text is None else text.replace('"objects/', f'"{root}/objects/')

    def json_col(c):
        import pyarrow as pa

        vals = c.to_pylist()
        new = [absolute_json(v) for v in vals]
        return None if new == vals else pa.chunked_array([pa.array(new, c.type)])

    refs.rewrite_columns(lake, "episodes", {"steps": lambda c: refs.map_step_field(c, "screenshot_uri", absolute)})
    refs.rewrite_columns(lake, "training_runs", {"base_checkpoint": lambda c: refs.map_strings(c, absolute),
                                                 "output_checkpoint": lambda c: refs.map_strings(c, absolute),
                                                 "config": json_col})  # fmt: skip
    refs.rewrite_columns(lake, "rounds", {"stage_status": json_col})
    m = lake.read_manifest()
    m["tables"].update(dict.fromkeys(REF_TABLES, 1))
    lake.objects.put_text(MANIFEST, json.dumps(m))


def test_new_rows_hold_keys_and_a_copied_lake_exports_every_screenshot(lake, tmp_path: Path) -> None:
    exp = populate(lake, rounds=(1, 2), per_source=3)
    shots = _shots(lake)
    assert shots and all(s.startswith("objects/") and object_key_of(s) == s for s in shots)
    copy = tmp_path / "elsewhere" / "lake-copy"
    shutil.copytree(lake.uri.root, copy)
    shutil.rmtree(lake.uri.root)  # the original is gone: the copy must stand alone
    res = export(Lake.open(copy), "sft-trl", tmp_path / "trl")
    assert res.rows == exp["n_sft"] and res.missing_images == 0
    assert res.images == len(_shots(Lake.open(copy), "sft")) == 2 * exp["n_sft"]


@pytest.mark.s3
def test_an_s3_lake_copied_to_another_bucket_exports_every_screenshot(s3_lake, moto_server, tmp_path: Path) -> None:
    exp = populate(s3_lake, rounds=(1,), per_source=3)
    s3, src = moto_server.client(), s3_lake.uri.bucket
    dst = moto_server.new_bucket()
    keys = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket=src) for o in p.get("Contents", [])]
    for k in keys:
        s3.copy_object(Bucket=dst, Key=k.replace("lake/", "copied/", 1), CopySource={"Bucket": src, "Key": k})
    for k in keys:  # the original is gone
        s3.delete_object(Bucket=src, Key=k)
    copy = Lake.open(f"s3://{dst}/copied")
    res = export(copy, "sft-trl", tmp_path / "trl")
    assert res.rows == exp["n_sft"] and res.missing_images == 0 and res.images == 2 * exp["n_sft"]


def test_an_old_lake_with_absolute_uris_migrates_to_keys_once_and_exports(lake, tmp_path: Path) -> None:
    from validators.lake_check import check_lake

    exp = populate(lake, rounds=(1, 2), per_source=3)
    a, b = _with_checkpoints(lake)
    _make_old(lake)
    old = _shots(lake)
    assert all(s.startswith(lake.uri.root + "/objects/") for s in old)
    assert (
        lake.read("training_runs", filter=pc.field("run_id") == "ck-1")["output_checkpoint"][0].as_py().startswith("/")
    )
    copy = tmp_path / "moved"
    shutil.copytree(lake.uri.root, copy)
    shutil.rmtree(lake.uri.root)
    versions = {t: DeltaTable(str(copy / "tables" / t)).version() for t in REF_TABLES}  # before opening migrates
    moved = Lake.open(copy)  # migrates
    m = moved.read_manifest()
    assert {h["table"]: (h["from"], h["to"]) for h in m["history"]} == dict.fromkeys(REF_TABLES, (1, 2))
    assert {t: moved.version(t) for t in REF_TABLES} == {t: v + 1 for t, v in versions.items()}  # one commit each
    assert [object_key_of(s) for s in old] == _shots(moved)  # same order, keys now
    run = moved.read("training_runs", filter=pc.field("run_id") == "ck-1").to_pylist()[0]
    assert (run["base_checkpoint"], run["output_checkpoint"]) == (a, b)
    assert json.loads(run["config"])["merge"]["specialists"]["x"] == a
    status = json.loads(moved.read("rounds", filter=pc.field("round") == 1)["stage_status"][0].as_py())
    assert status["sft"] == {"status": "done", "checkpoint": b, "base": a}
    assert moved.count("episodes") == exp["n_routed"][1] + exp["n_routed"][2]
    # idempotent: opening again and running the steps again change nothing
    again = Lake.open(copy)
    assert {t: again.version(t) for t in REF_TABLES} == {t: v + 1 for t, v in versions.items()}
    assert (
        refs.rewrite_columns(
            again, "episodes", {"steps": lambda c: refs.map_step_field(c, "screenshot_uri", refs.key_or_same)}
        )
        == 0
    )
    res = export(again, "sft-trl", tmp_path / "trl")
    assert res.images == 2 * exp["n_sft"] and res.missing_images == 0
    assert not [v for v in check_lake(again).violations if v.invariant in ("media_missing", "checkpoint_missing")]
    # an old version (time travel) still holds the absolute URIs, and they resolve by their suffix too
    past = again.read("episodes", version=versions["episodes"])
    assert {s["screenshot_uri"] for e in past.column("steps").to_pylist() for s in e} == set(old)
    assert all(again.objects.get_object(u) for u in old[:3])


def _main(args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    from flywheel.cli import run

    monkeypatch.setenv("COLUMNS", "300")
    code = run(args)
    out = capsys.readouterr()
    return code, out.err + out.out


def test_a_missing_screenshot_fails_the_export_in_one_line_unless_allowed(
    lake, tmp_path: Path, capsys, monkeypatch
) -> None:
    exp = populate(lake, rounds=(1,), per_source=3)
    gone = _shots(lake, "sft")[0]
    Path(lake.uri.key(gone)).unlink()
    uses = _shots(lake, "sft").count(gone)
    for kind in ("sft-trl", "sft-verl"):
        with pytest.raises(ExportError, match=f"screenshot {gone} of episode [0-9a-f]+ .step 0. is missing") as e:
            export(lake, kind, tmp_path / kind)
        assert "\n" not in str(e.value) and "--allow-missing" in str(e.value)
    code, out = _main(
        ["export", "sft-trl", "--lake", str(lake.uri), "--out", str(tmp_path / "cli")], capsys, monkeypatch
    )
    assert code != 0 and f"screenshot {gone}" in out and "Traceback" not in out
    assert [ln for ln in out.splitlines() if "screenshot" in ln] == [
        ln for ln in out.splitlines() if ln.startswith("error")
    ]
    assert len([ln for ln in out.splitlines() if ln.startswith("error")]) == 1, out
    res = export(lake, "sft-trl", tmp_path / "ok", allow_missing=True)
    assert res.missing_images == uses and res.images == 2 * exp["n_sft"] - uses
    code, out = _main(["export", "sft-trl", "--lake", str(lake.uri), "--out", str(tmp_path / "cli2"), "--allow-missing"],
                      capsys, monkeypatch)  # fmt: skip
    assert code == 0 and f"{uses} screenshot(s) missing" in out


@pytest.mark.s3
def test_an_old_s3_lake_migrates_in_place_without_duplicating_rows(s3_lake, tmp_path: Path) -> None:
    exp = populate(s3_lake, rounds=(1,), per_source=3)
    n = s3_lake.count("episodes")
    _make_old(s3_lake)
    assert all(s.startswith(f"s3://{s3_lake.uri.root}/objects/") for s in _shots(s3_lake))
    moved = Lake.open(str(s3_lake.uri))  # migrates: files swapped on S3 by their log names
    assert moved.count("episodes") == n and all(s.startswith("objects/") for s in _shots(moved))
    res = export(moved, "sft-trl", tmp_path / "trl")
    assert res.images == 2 * exp["n_sft"] and res.missing_images == 0
