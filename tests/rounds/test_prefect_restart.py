"""A Prefect server restart during a round (kill -9, then the same database on the same port).

Stages run as Prefect 3 tasks whose states travel as events, so a round's stages go on while the API is gone; the
calls that need the API are the summary artifact and the flow's own states. A short outage is ridden out by the
client's retries (PREFECT_CLIENT_MAX_RETRIES, exponential backoff) and the summary task's retries; a longer one fails
the summary stage, and the round ends with one error line naming the round to resume. Either way the lake ends as an
uninterrupted round's.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from tests.rounds.conftest import FLYWHEEL, REPO, PrefectServer
from tests.rounds.helpers import lake_state, round_cmd, run_cmd, setup_round, wait_for_stage

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("rounds")]


def _start_round(env: dict[str, str], argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _flow_runs(url: str) -> list[dict]:
    r = httpx.post(
        f"{url}/flow_runs/filter",
        json={"flows": {"name": {"any_": ["flywheel-round"]}}, "sort": "START_TIME_ASC"},
        timeout=30,
    )
    r.raise_for_status()
    return r.json()


def test_prefect_server_restart_during_a_round(tmp_path: Path, flywheel_env: dict[str, str]) -> None:
    ref_lake, ref_landing, cfg = setup_round(tmp_path, "ref")
    r = run_cmd(flywheel_env, round_cmd(ref_lake, ref_landing, cfg, "run"))  # uninterrupted, on the session's server
    assert r.returncode == 0, r.stderr[-3000:]
    want = lake_state(ref_lake)

    server = PrefectServer(tmp_path / "prefect-home")  # a server of this test's own: it gets killed
    server.start()
    env = {**flywheel_env, "PREFECT_API_URL": server.url}
    try:
        # 1. the server is killed while the round evaluates and started again at once: the summary artifact's
        #    requests are retried until it answers, and the round succeeds
        lake, landing, _ = setup_round(tmp_path, "short")
        proc = _start_round(env, round_cmd(lake, landing, cfg, "run"))
        wait_for_stage(proc, lake, "evaluate")
        server.kill()
        server.start()  # same PREFECT_HOME (its SQLite database), same port
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        assert "round 0 finished" in out
        assert lake_state(lake) == want
        runs = _flow_runs(server.url)  # the run created before the restart, finished in the restarted server's database
        assert [fr["state_type"] for fr in runs] == ["COMPLETED"], runs

        # 2. the server is killed while the round evaluates and stays away until the round gives up (a client that
        #    does not retry, so it gives up in seconds, not minutes): one error line naming the round to resume; the
        #    server comes back (the exiting round then delivers the events it kept) and resume finishes the round
        lake, landing, _ = setup_round(tmp_path, "long")
        proc = _start_round({**env, "PREFECT_CLIENT_MAX_RETRIES": "0"}, round_cmd(lake, landing, cfg, "run"))
        wait_for_stage(proc, lake, "evaluate")
        server.kill()
        first = proc.stderr.readline()  # the CLI's error line: the round has given up
        server.start()
        out, rest = proc.communicate(timeout=600)
        err = first + rest
        assert proc.returncode == 1, out + err
        assert len(err.strip().splitlines()) == 1, err[-3000:]  # no traceback, no log lines from Prefect's services
        assert f"the Prefect API at {server.url} did not answer" in err and "flywheel round resume 0" in err, err
        assert "(pending: summary)" in err, err  # every stage before it is kept
        r = run_cmd(env, round_cmd(lake, landing, cfg, "resume", "0"))
        assert r.returncode == 0, r.stderr[-3000:]
        assert "round 0 finished: summary" in r.stdout  # only what was left ran again
        assert lake_state(lake) == want
        for lk in (lake, tmp_path / "short-lake"):
            chk = subprocess.run(
                [FLYWHEEL, "check", "--lake", str(lk)], env=env, cwd=REPO, capture_output=True, text=True
            )
            assert chk.returncode == 0, chk.stdout + chk.stderr
        arts = httpx.post(
            f"{server.url}/artifacts/filter", json={"artifacts": {"key": {"any_": ["flywheel-round-0"]}}}, timeout=30
        ).json()
        assert len(arts) == 2 and all("Flywheel round 0" in a["data"] for a in arts), arts  # both rounds' summaries
    finally:
        server.stop()
