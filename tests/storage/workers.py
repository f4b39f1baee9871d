"""Functions that run in child processes (multiprocessing 'spawn': never fork after deltalake was used)."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

SPAWN = mp.get_context("spawn")


def concurrent_appender(uri: str, worker: int, batches: int, go: mp.Event) -> None:  # type: ignore[name-defined]
    """Wait for the start signal, then append `batches` overlapping batches of episodes."""
    from storage import Lake
    from tests.storage.data import episodes

    lake = Lake.open(uri)
    go.wait(30)
    for b in range(batches):
        lake.append("episodes", episodes(20, start=b * 40 + worker * 10))
    # Every append is committed by now. Skip interpreter teardown: under heavy load pyarrow's S3 I/O threads can
    # abort the process while it exits ("terminate called without an active exception", apache/arrow#34314),
    # which would fail this test for a reason that has nothing to do with concurrent appends.
    import os

    os._exit(0)


def big_append(uri: str, n: int, started: str) -> None:
    """Append one large batch, touching `started` right before the append begins."""
    from bench.bench_lake import synthetic_episodes
    from storage import Lake

    lake = Lake.open(uri)
    batch = synthetic_episodes(n, seed=7)
    Path(started).touch()
    lake.append("episodes", batch)
