"""Recovery from storage damage (docs/operations.md, "Recovering a damaged lake"): an emptied or torn latest commit
(a power cut while committing), a lost data file and a data file overwritten with garbage. Each is found by
`flywheel check` (naming the table, printing the repair command, no Rust backtrace), `flywheel maintain` refuses to
vacuum while it is there, and `flywheel repair` followed by re-ingesting the source restores every episode."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ingest.rollouts import ingest_rollout_file
from storage import Lake
from storage.delta import forget_snapshots
from tests.faults.conftest import assert_one_line_error, flywheel
from tests.hostile.fuzz_targets import rollout_line


def _file(path: Path, start: int, n: int) -> Path:
    path.write_text("".join(json.dumps(rollout_line(i)) + "\n" for i in range(start, start + n)))
    return path


def _latest_commit(lake: Lake, table: str) -> Path:
    log = Path(lake.uri.key(f"tables/{table}/_delta_log"))
    return max(log.glob("*.json"))


def _damage(lake: Lake, how: str, second_files: set[str]) -> None:
    table_dir = Path(lake.uri.key("tables/episodes"))
    if how == "empty_commit":
        _latest_commit(lake, "episodes").write_bytes(b"")
    elif how == "torn_commit":
        p = _latest_commit(lake, "episodes")
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    elif how == "lost_file":
        for f in second_files:
            os.remove(table_dir / f)
    elif how == "garbage_file":
        for f in second_files:
            (table_dir / f).write_bytes(b"not parquet " * 64)


@pytest.mark.parametrize("how", ["empty_commit", "torn_commit", "lost_file", "garbage_file"])
def test_damage_is_found_refused_and_repaired(lake, tmp_path: Path, how: str) -> None:
    first, second = _file(tmp_path / "a.jsonl", 0, 30), _file(tmp_path / "b.jsonl", 30, 20)
    ingest_rollout_file(lake, first)
    before = set(lake.delta("episodes").file_uris())
    ingest_rollout_file(lake, second)
    assert lake.count("episodes") == 50
    second_files = {Path(u).name for u in set(lake.delta("episodes").file_uris()) - before}
    assert second_files
    # the sessions table was committed after the episodes: damage the episodes' latest commit itself
    _damage(lake, how, second_files)
    root = str(lake.uri.root)

    r = flywheel("check", "--lake", root, "--no-media")
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("violated:")]
    code = {"empty_commit": "commit_empty", "torn_commit": "commit_torn", "lost_file": "data_file_missing",
            "garbage_file": "table_unreadable"}[how]  # fmt: skip
    hit = [ln for ln in lines if ln.startswith(f"violated: {code} [")]
    assert hit and f"flywheel repair --lake {root}" in hit[0], r.stderr
    if how != "lost_file":
        assert f"{code} [episodes]" in hit[0], r.stderr
    assert "<unknown>" not in r.stderr and "Traceback" not in r.stderr and " 0: " not in r.stderr, r.stderr

    r = flywheel("maintain", "--lake", root, "--retain-hours", "0")
    assert "refusing to maintain" in assert_one_line_error(r)
    table_dir = Path(lake.uri.key("tables/episodes"))
    if how in ("empty_commit", "torn_commit"):  # the lost commit's files are still there to vacuum: they were kept
        assert all((table_dir / f).exists() for f in second_files)

    r = flywheel("repair", "--lake", root)
    assert r.returncode == 0 and "repaired:" in r.stdout and "re-ingest" in r.stdout, r.stdout + r.stderr
    r = flywheel("repair", "--lake", root)
    assert r.returncode == 0 and "nothing to repair" in r.stdout, r.stdout + r.stderr  # repairing twice: no-op

    forget_snapshots()  # this process cached the table's dataset at that version number, before the damage
    lost = 50 - Lake.open(root).count("episodes")
    assert lost in (20, 30)  # the second batch's commit or file (garbage/lost: whichever rows the file held)
    r = flywheel("ingest", "rollouts", str(first), str(second), "--lake", root)
    assert r.returncode == 0, r.stdout + r.stderr
    assert Lake.open(root).count("episodes") == 50  # restored, nothing duplicated
    r = flywheel("check", "--lake", root, "--no-media")
    assert r.returncode == 0 and "all invariants hold" in r.stdout, r.stdout + r.stderr
    r = flywheel("maintain", "--lake", root, "--retain-hours", "0")
    assert r.returncode == 0, r.stdout + r.stderr
    assert Lake.open(root).count("episodes") == 50


def test_a_lying_key_index_is_found_and_rebuilt(lake, tmp_path: Path) -> None:
    """A sidecar that lists another file's keys hides this file's keys from appends: check names it with the
    recovery command, and repair rebuilds it from the data."""
    from schemas.tables import spec
    from storage.keyindex import key_index, sidecar_rel

    first, second = _file(tmp_path / "a.jsonl", 0, 30), _file(tmp_path / "b.jsonl", 30, 20)
    ingest_rollout_file(lake, first)
    ingest_rollout_file(lake, second)
    ix = key_index(spec("episodes").key)
    files = sorted(Path(u).name for u in lake.delta("episodes").file_uris())
    a, b = (lake.objects.get_bytes(sidecar_rel("episodes", ix, f)) for f in files)
    assert a and b
    lake.objects.put_bytes(sidecar_rel("episodes", ix, files[1]), a)  # file 2's sidecar now lies
    root = str(lake.uri.root)
    r = flywheel("check", "--lake", root, "--no-media")
    assert r.returncode == 1 and "violated: key_index_mismatch [indexes]" in r.stderr, r.stderr
    assert f"flywheel repair --lake {root}" in r.stderr
    r = flywheel("repair", "--lake", root)
    assert r.returncode == 0 and "key index rebuilt" in r.stdout, r.stdout + r.stderr
    assert lake.objects.get_bytes(sidecar_rel("episodes", ix, files[1])) == b
    r = flywheel("check", "--lake", root, "--no-media")
    assert r.returncode == 0, r.stdout + r.stderr
