"""A full disk under a local lake (a 20 MB tmpfs): a clean one-line error, a lake that stays readable, and after
space is freed the same command completes; maintain removes what the failed writes left behind."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.errors import LakeError
from tests.faults.conftest import assert_check_passes, assert_one_line_error, flywheel, rollout_file

N = 6000


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "disk"
    d.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root: the full-disk test runs only as root (CI containers are)")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(d)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}); the full-disk test needs CAP_SYS_ADMIN")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


def _fill(disk: Path, leave: int) -> Path:
    """A filler file that leaves about `leave` bytes free."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    filler = disk / "filler"
    with filler.open("wb") as f:
        f.write(b"\0" * max(free - leave, 0))
    return filler


def _count(lake: str) -> int:
    r = flywheel("sql", "SELECT count(*) AS n FROM episodes", "--lake", lake, "--format", "json")
    assert r.returncode == 0, r.stderr  # the lake stays readable
    return json.loads(r.stdout)["n"]


@pytest.mark.slow
def test_full_disk_is_a_clean_error_and_a_rerun_completes(small_disk: Path, tmp_path: Path) -> None:
    from storage import Lake
    from storage.maintain import maintain

    lake = str(small_disk / "lake")
    assert flywheel("init", "--lake", lake).returncode == 0
    f = rollout_file(tmp_path / "r.jsonl", N, pad=400)  # incompressible thoughts: about 6 MB of Parquet
    filler = _fill(small_disk, 3 << 20)

    line = assert_one_line_error(
        flywheel("ingest", "rollouts", str(f), "--lake", lake, "--round", "1", "--block-mb", "1")
    )
    assert "No space left on device" in line or "ENOSPC" in line or "space" in line.lower(), line
    partial = _count(lake)
    assert partial < N
    assert_check_passes(Lake.open(lake))

    # an object (a screenshot) that does not fit: a LakeError, and no temporary file left behind
    with pytest.raises(LakeError, match="space"):
        Lake.open(lake).objects.put_object(os.urandom(4 << 20), ".png")
    assert not list((small_disk / "lake" / "objects").rglob(".tmp-*"))

    filler.unlink()  # free the space
    rep = maintain(Lake.open(lake), retain_hours=0)  # removes the data files the failed writes left
    assert sum(t.files_vacuumed for t in rep.tables) >= 1
    r = flywheel("ingest", "rollouts", str(f), "--lake", lake, "--round", "1", "--block-mb", "1")
    assert r.returncode == 0, r.stderr
    assert _count(lake) == N
    r = flywheel("route", "--round", "1", "--lake", lake)
    assert r.returncode == 0, r.stderr
    r = flywheel("check", "--lake", lake)
    assert r.returncode == 0 and "all invariants hold" in r.stdout, r.stdout + r.stderr
