"""An endpoint that vanishes mid-write: uploads cut after some bytes, commits applied but never answered, the
endpoint gone in the middle of an ingestion or a routing. Each is a clean LakeError (or a success), and running
the same thing again completes with no row lost and none duplicated."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.rollouts import ingest_rollout_file
from storage.errors import LakeError
from tests.faults.conftest import assert_check_passes, rollout_file
from validators.routing import route_round
from validators.synthetic import screenshot_pool, synthetic_rollouts

N = 300
BLOCK = 48 << 10  # several blocks (several commits) per file


def test_upload_cut_mid_body_fails_cleanly_then_completes(faulty_lake, proxy) -> None:
    pool = screenshot_pool(faulty_lake, 2)
    batch = synthetic_rollouts(400, 1, screenshots=pool)
    proxy.inject("cut", after_bytes=2000, match=b".parquet")  # every data-file upload dies after 2 kB
    with pytest.raises(LakeError) as e:
        faulty_lake.append("episodes", batch)
    assert "\n" not in str(e.value)
    assert proxy.injected("cut") >= 3  # the upload was retried before giving up
    assert faulty_lake.count("episodes") == 0  # nothing half-written became visible
    proxy.clear()
    assert faulty_lake.append("episodes", batch) == 400
    assert faulty_lake.append("episodes", batch) == 0
    assert_check_passes(faulty_lake)


def test_commits_applied_but_never_answered_do_not_duplicate(faulty_lake, proxy, tmp_path: Path) -> None:
    """The server applies each Delta commit but the answer is lost: the client's retry finds the version taken.
    Whatever the client concludes, re-running adds nothing and the counts are exact."""
    f = rollout_file(tmp_path / "r.jsonl", N)
    proxy.inject("drop", match=b"/_delta_log/0", count=4)
    for _ in range(5):
        try:
            ingest_rollout_file(faulty_lake, f, round=1, block_bytes=BLOCK)
            break
        except LakeError:
            pass
    proxy.clear()
    assert proxy.injected("drop") == 4
    ingest_rollout_file(faulty_lake, f, round=1, block_bytes=BLOCK)
    assert faulty_lake.count("episodes") == N
    assert faulty_lake.count("sessions") == 1
    assert_check_passes(faulty_lake)


def test_endpoint_gone_mid_ingestion_then_rerun_completes(faulty_lake, proxy, tmp_path: Path) -> None:
    f = rollout_file(tmp_path / "r.jsonl", N)
    blocks = []

    def progress(done: int, total: int, added: int) -> None:
        blocks.append(added)
        if len(blocks) == 1:
            proxy.inject("reset")  # after the first block landed, every connection is reset

    with pytest.raises(LakeError) as e:
        ingest_rollout_file(faulty_lake, f, round=1, block_bytes=BLOCK, progress=progress)
    assert "\n" not in str(e.value)
    proxy.clear()
    partial = faulty_lake.count("episodes")
    assert 0 < blocks[0] == partial < N  # the first block is in, whole; no session row yet
    assert faulty_lake.count("sessions") == 0
    res = ingest_rollout_file(faulty_lake, f, round=1, block_bytes=BLOCK)
    assert res.result.episodes_added == N - partial
    assert faulty_lake.count("episodes") == N and faulty_lake.count("sessions") == 1
    assert_check_passes(faulty_lake)


def test_endpoint_gone_mid_routing_then_rerun_completes(faulty_lake, proxy, tmp_path: Path) -> None:
    f = rollout_file(tmp_path / "r.jsonl", N)
    ingest_rollout_file(faulty_lake, f, round=1, block_bytes=BLOCK)

    def progress(stage: str, info: dict) -> None:
        if stage == "sft_appended":  # verdicts and SFT are in, CT is not
            proxy.inject("reset")

    with pytest.raises(LakeError):
        route_round(faulty_lake, 1, progress=progress)
    proxy.clear()
    assert faulty_lake.count("sft") + faulty_lake.count("ct") < N  # half routed
    s = route_round(faulty_lake, 1)
    assert s.n_new == N == s.n_pass + s.n_fail
    assert faulty_lake.count("sft") + faulty_lake.count("ct") == N
    assert_check_passes(faulty_lake)
