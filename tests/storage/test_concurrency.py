"""Four processes appending to one table at once lose nothing and duplicate nothing, on disk and on S3."""

from __future__ import annotations

import json
import urllib.request

import pyarrow.compute as pc

from tests.storage.data import episodes, ids
from tests.storage.workers import SPAWN, concurrent_appender

WORKERS, BATCHES = 4, 3


def test_four_processes_append_at_once(any_lake) -> None:
    go = SPAWN.Event()
    procs = [
        SPAWN.Process(target=concurrent_appender, args=(str(any_lake.uri), w, BATCHES, go)) for w in range(WORKERS)
    ]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * WORKERS

    # every key any worker appended is there exactly once (batches overlap across workers by design)
    expected: set[str] = set()
    for w in range(WORKERS):
        for b in range(BATCHES):
            expected |= set(ids(episodes(20, start=b * 40 + w * 10)))
    got = any_lake.read("episodes", columns=["episode_id"]).column("episode_id")
    assert len(got) == len(expected), f"{len(got)} rows for {len(expected)} keys: duplicates or losses"
    assert set(got.to_pylist()) == expected
    assert pc.count_distinct(got).as_py() == len(got)


def test_s3_commits_are_put_if_absent(s3_lake, moto_server) -> None:
    """On S3 the Delta log entry is written with If-None-Match: * (seen on the wire via moto's recorder), so two
    writers can never both create version N: the loser retries instead of overwriting the winner's commit."""

    def call(path: str, method: str = "POST") -> bytes:
        return urllib.request.urlopen(urllib.request.Request(moto_server.url + path, method=method)).read()

    call("/moto-api/recorder/reset-recording")
    call("/moto-api/recorder/start-recording")
    try:
        s3_lake.append("episodes", episodes(3))
    finally:
        call("/moto-api/recorder/stop-recording")
    log_puts = [
        r
        for r in map(json.loads, call("/moto-api/recorder/download-recording", "GET").decode().splitlines())
        if r["method"] == "PUT" and "_delta_log/" in r["url"] and r["url"].endswith(".json")
    ]
    assert log_puts, "no Delta commit seen"
    assert all(r["headers"].get("If-None-Match") == "*" for r in log_puts), [r["headers"] for r in log_puts]
