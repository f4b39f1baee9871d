"""kill -9 in the middle of an append leaves the table readable with all or none of the batch."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.storage.workers import SPAWN, big_append

N = 12_000  # episodes x 20 steps (about 100 MB): a few hundred ms of writing, a window to kill in


def _write_in_progress(lake) -> bool:
    """A data file of the batch is being written: on disk a Parquet file in the table folder, on S3 an
    unfinished multipart upload or a data object."""
    if lake.uri.scheme == "file":
        return any(Path(lake.uri.key("tables/episodes")).glob("*.parquet"))
    c, prefix = lake.objects.client, lake.uri.key("tables/episodes/")
    if c.list_multipart_uploads(Bucket=lake.uri.bucket, Prefix=prefix).get("Uploads"):
        return True
    objs = c.list_objects_v2(Bucket=lake.uri.bucket, Prefix=prefix).get("Contents", [])
    return any(o["Key"].endswith(".parquet") for o in objs)


@pytest.mark.slow
def test_kill_9_mid_append_leaves_all_or_none(any_lake, tmp_path: Path) -> None:
    v0 = any_lake.version("episodes")
    started = tmp_path / "started"
    p = SPAWN.Process(target=big_append, args=(str(any_lake.uri), N, str(started)))
    p.start()
    deadline = time.monotonic() + 90
    while not started.exists():
        assert p.is_alive() and time.monotonic() < deadline, "the writer died before appending"
        time.sleep(0.01)
    while not _write_in_progress(any_lake):
        assert p.is_alive(), "the append finished before a data file showed; enlarge N"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    assert p.exitcode == -signal.SIGKILL

    # readable, and all or none of the batch
    n = any_lake.count("episodes")
    assert n in (0, N), n
    assert any_lake.read("episodes", columns=["episode_id"]).num_rows == n
    if n == 0:
        assert any_lake.version("episodes") == v0  # the commit never happened; the data file is an orphan
    # re-running the append (as a retried flow would) completes the batch exactly once
    from bench.bench_lake import synthetic_episodes

    batch = synthetic_episodes(N, seed=7)
    assert any_lake.append("episodes", batch) == N - n
    assert any_lake.count("episodes") == N
    assert any_lake.append("episodes", batch) == 0
