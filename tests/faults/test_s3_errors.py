"""An S3 endpoint that answers 500 or does not answer for a while: bounded retries ride out a short fault; a long
one is a clean one-line error, and running the same command again completes without duplicating anything."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ingest.rollouts import ingest_rollout_file
from storage.errors import LakeError
from tests.faults.conftest import assert_check_passes, assert_one_line_error, flywheel, rollout_file
from validators.routing import route_round

N = 300


def test_short_bursts_of_500s_are_retried(faulty_lake, proxy, tmp_path: Path) -> None:
    """Two 500s in a row before each operation: every request is retried within its bound and succeeds."""
    f = rollout_file(tmp_path / "r.jsonl", N)
    for op in (
        lambda: ingest_rollout_file(faulty_lake, f, round=1, block_bytes=64 << 10),
        lambda: route_round(faulty_lake, 1),
        lambda: ingest_rollout_file(faulty_lake, f, round=1, block_bytes=64 << 10),  # re-run: adds nothing
    ):
        proxy.inject("error", count=2)
        op()
    proxy.inject("error", count=2, status=503)
    assert faulty_lake.count("episodes") == N
    assert proxy.injected("error") == 8
    assert faulty_lake.count("sessions") == 1
    assert_check_passes(faulty_lake)


def test_flaky_endpoint_fails_cleanly_and_reruns_complete(faulty_lake, proxy, tmp_path: Path) -> None:
    """10% of requests fail with 500: an operation either succeeds or raises a one-line LakeError, and repeating
    it until it succeeds leaves exactly the expected rows (no duplicates, every episode in one pile)."""
    f = rollout_file(tmp_path / "r.jsonl", N)
    proxy.inject("error", rate=0.1)
    failures: list[str] = []
    for op in (
        lambda: ingest_rollout_file(faulty_lake, f, round=1, block_bytes=48 << 10),
        lambda: route_round(faulty_lake, 1),
    ):
        for _ in range(30):
            try:
                op()
                break
            except LakeError as e:
                assert "\n" not in str(e) and "\x1b[" not in str(e), str(e)
                failures.append(str(e))
        else:
            pytest.fail(f"never completed under a 10% error rate: {failures[-3:]}")
    proxy.clear()
    assert proxy.injected("error") > 5
    assert faulty_lake.count("episodes") == N
    assert faulty_lake.count("sft") + faulty_lake.count("ct") == N
    assert_check_passes(faulty_lake)


@pytest.mark.slow
def test_outage_is_a_one_line_error_and_a_rerun_completes(faulty_lake, faulty_env, proxy, tmp_path: Path) -> None:
    """The CLI during a 500 outage and during a hanging endpoint: exit 1 with one line, within the bounds; after
    the endpoint recovers the same command completes, and routing + `flywheel check` pass."""
    f = rollout_file(tmp_path / "r.jsonl", N)
    lake = str(faulty_lake.uri)
    proxy.inject("error")
    t0 = time.monotonic()
    line = assert_one_line_error(flywheel("ingest", "rollouts", str(f), "--lake", lake, "--round", "1", env=faulty_env))
    assert time.monotonic() - t0 < 60 and ("InternalError" in line or "5xx" in line), line
    proxy.clear()
    proxy.inject("hang", hang_s=10)
    t0 = time.monotonic()
    assert_one_line_error(flywheel("tables", "--lake", lake, env=faulty_env))
    assert time.monotonic() - t0 < 60  # bounded: attempts x read timeout, not minutes
    proxy.clear()
    r = flywheel("ingest", "rollouts", str(f), "--lake", lake, "--round", "1", env=faulty_env)
    assert r.returncode == 0, r.stderr[-2000:]
    r = flywheel("route", "--round", "1", "--lake", lake, env=faulty_env)
    assert r.returncode == 0, r.stderr[-2000:]
    r = flywheel("check", "--lake", lake, env=faulty_env)
    assert r.returncode == 0 and "all invariants hold" in r.stdout, r.stdout + r.stderr
    assert faulty_lake.count("episodes") == N


@pytest.mark.slow
def test_flow_task_retries_outlast_an_outage(faulty_lake, proxy, tmp_path: Path, prefect_harness) -> None:
    """The Prefect ingest flow during a 500 outage of a few seconds: the task's own retries (5 s apart) outlast it."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from flows.ingest_records import ingest_rollouts

    f = rollout_file(tmp_path / "r.jsonl", 200)
    proxy.inject("error", seconds=6, match=b"/tables/episodes/part-")  # data files: inside the retried task
    state = ingest_rollouts([str(f)], lake=str(faulty_lake.uri), round=1, return_state=True)
    res = state.result()
    assert res["episodes_added"] == 200 and proxy.injected("error") >= 3
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
        )
    assert max(r.run_count for r in runs) >= 2, [(r.name, r.run_count) for r in runs]  # Prefect retried the task
    assert faulty_lake.count("episodes") == 200
    assert_check_passes(faulty_lake)
