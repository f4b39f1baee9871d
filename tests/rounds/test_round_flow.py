"""Rounds on Prefect: resume after kill -9 in every stage, one round at a time, and a served deployment."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.rounds.conftest import FLYWHEEL, REPO
from tests.rounds.helpers import lake_state, round_cmd, run_cmd, setup_round, wait_for_stage

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("rounds")]

ROUND1_STAGES = ["sample", "annotate", "intake", "route", "ct", "sft", "rl", "evaluate", "summary"]


def _kill_in_stage(env: dict[str, str], argv: list[str], lake: Path, stage: str, timeout: float = 600) -> str:
    """Start a round command and kill -9 it as soon as the lock says it runs `stage`; return what the lock said."""
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    seen = wait_for_stage(proc, lake, stage, timeout)
    time.sleep(0.2)  # into the stage, not only at its start
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return seen


@pytest.mark.parametrize("backend", ["sandbox", "miniwob"])
def test_kill_9_in_every_stage_then_resume_equals_uninterrupted_run(
    tmp_path: Path, flywheel_env: dict[str, str], backend: str
) -> None:
    if backend == "miniwob":
        from tests.miniwob.conftest import _need_chromium

        _need_chromium()
    env = flywheel_env
    # the uninterrupted reference: rounds 0 and 1
    ref_lake, ref_landing, cfg = setup_round(tmp_path, "ref", backend)
    for _ in range(2):
        r = run_cmd(env, round_cmd(ref_lake, ref_landing, cfg, "run"))
        assert r.returncode == 0, r.stderr[-3000:]

    # the same two rounds, round 1 killed with -9 in each stage in turn and resumed
    lake, landing, _ = setup_round(tmp_path, "faulty", backend)
    r = run_cmd(env, round_cmd(lake, landing, cfg, "run"))
    assert r.returncode == 0, r.stderr[-3000:]
    killed = []
    for i, stage in enumerate(ROUND1_STAGES):
        argv = round_cmd(lake, landing, cfg, "run") if i == 0 else round_cmd(lake, landing, cfg, "resume", "1")
        killed.append(_kill_in_stage(env, argv, lake, stage))
    assert [k.split("stage ")[1].rstrip(")") for k in killed] == ROUND1_STAGES
    r = run_cmd(env, round_cmd(lake, landing, cfg, "resume", "1"))
    # a kill that lands after the last stage's work (the lock still held) leaves nothing to resume
    assert r.returncode == 0 or "already finished" in r.stderr, r.stderr[-3000:]

    # MiniWoB++'s episodes are compared by what was done: their ids hash live-browser screenshots, whose bytes can
    # differ between two processes (a CI run on a loaded machine swapped 3 of 16 SFT ids, the pile sizes unchanged)
    by = "content" if backend == "miniwob" else "id"
    got, want = lake_state(lake, by), lake_state(ref_lake, by)
    assert got["sft"] == want["sft"] and got["ct"] == want["ct"]
    assert got["episodes"] == want["episodes"]
    assert got["rounds"] == want["rounds"]
    # and the lake's own invariants hold
    chk = subprocess.run([FLYWHEEL, "check", "--lake", str(lake)], env=env, cwd=REPO, capture_output=True, text=True)
    assert chk.returncode == 0, chk.stdout + chk.stderr


def test_two_rounds_started_together_one_runs_the_other_refuses(tmp_path: Path, flywheel_env: dict[str, str]) -> None:
    env = flywheel_env
    lake, landing, cfg = setup_round(tmp_path, "twice")
    argv = round_cmd(lake, landing, cfg, "run")
    a = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    b = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outs = [p.communicate(timeout=600) for p in (a, b)]
    codes = sorted([a.returncode, b.returncode])
    assert codes == [0, 1], outs
    loser = outs[[a.returncode, b.returncode].index(1)]
    assert "is running (held by" in loser[1] and "since" in loser[1], loser
    assert len(loser[1].strip().splitlines()) == 1, loser[1]  # one line, no traceback
    st = lake_state(lake)
    assert not set(st["sft"]) & set(st["ct"])
    assert len(st["sft"]) == len(set(st["sft"])) and st["rounds"][0][0] == st["rounds"][0][1] + st["rounds"][0][2]


def test_served_deployment_runs_a_round_when_triggered(tmp_path: Path, flywheel_env: dict[str, str]) -> None:
    env = {**flywheel_env}
    lake, landing, cfg = setup_round(tmp_path, "served")
    env.update(FLYWHEEL_LAKE=str(lake), FLYWHEEL_LANDING=str(landing))
    serve = subprocess.Popen([FLYWHEEL, "serve", "--only", "nightly"], env=env, cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
    try:
        prefect = str(Path(FLYWHEEL).with_name("prefect"))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            r = subprocess.run([prefect, "deployment", "ls"], env=env, capture_output=True, text=True)
            if "nightly" in r.stdout:
                break
            assert serve.poll() is None, serve.stdout.read() if serve.stdout else ""
            time.sleep(1)
        r = subprocess.run([prefect, "deployment", "run", "flywheel-round/nightly", "--param", f"config={cfg}",
                            "--param", f"dashboard={tmp_path / 'dash.html'}"], env=env, capture_output=True, text=True)  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        from storage import Lake

        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            rows = Lake.open(lake).read("rounds").to_pylist()
            st = json.loads(rows[0]["stage_status"]) if rows and rows[0]["stage_status"] else {}
            if st.get("summary", {}).get("status") == "done":
                break
            assert all(v.get("status") != "failed" for v in st.values()), st
            time.sleep(2)
        else:
            raise AssertionError("the served round did not finish in 600 s")
        assert (tmp_path / "dash.html").is_file()
        assert rows[0]["n_new"] > 0 and rows[0]["eval_n"] > 0
        # the round summary is a markdown artifact in Prefect, linking the dashboard (read through the API: the
        # CLI's tables wrap at the terminal's width and would split the link)
        import httpx

        art = httpx.post(f"{env['PREFECT_API_URL']}/artifacts/filter",
                         json={"artifacts": {"key": {"any_": ["flywheel-round-0"]}}}, timeout=30)  # fmt: skip
        assert art.status_code == 200, art.text
        data = [a["data"] for a in art.json()]
        assert any("Flywheel round 0" in d and "dash.html" in d for d in data), data
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        try:
            serve.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)


def test_a_demo_lake_continues_with_round_run(tmp_path: Path, flywheel_env: dict[str, str]) -> None:
    """`flywheel demo` is the round engine: `flywheel round run` on its lake runs the next round with the demo's own
    recorded configuration (scripted people) and landing area, and nothing is ingested twice."""
    from storage import Lake
    from validators.rounds import read_rounds

    lake = tmp_path / "lake-demo"
    r = run_cmd(flywheel_env, [FLYWHEEL, "demo", "--quick", "--rounds", "1", "--lake", str(lake)])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "before RL" in r.stdout and "McNemar p=" in r.stdout, r.stdout  # round 1's RL share, printed
    n_before = Lake.open(lake).count("episodes")
    asked = time.time() + 1800
    r = run_cmd(flywheel_env, [FLYWHEEL, "round", "run", "--lake", str(lake), "--end-by", "+30m"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "the lake's last round" in r.stdout and "people scripted" in r.stdout, r.stdout
    assert "the round is to end by" in r.stdout and "round 2's SFT stops within" in r.stdout, r.stdout
    clock = read_rounds(Lake.open(lake))[2].breakdown["sft_clock"]  # the CLI's end reached the round's SFT
    assert abs(clock["end_by"] - asked) < 60 and clock["stop_at"] == pytest.approx(clock["end_by"] - clock["keep_s"])
    recs = read_rounds(Lake.open(lake))
    assert [x.round for x in recs] == [0, 1, 2] and all(x.status("summary") == "done" for x in recs)
    last = recs[-1]
    assert last.config == recs[1].config and last.landing == recs[1].landing  # the demo's own, not the defaults
    assert last.config["rl_mode"] == "search" and [x.rl_mode for x in recs[1:]] == ["search", "search"]  # sandbox
    assert last.annotation.get("episodes") == 4 and last.status("sample") == "done"  # scripted people played
    assert Lake.open(lake).count("episodes") == n_before + last.n_new  # the landing's old files added nothing
    for x in recs[1:]:  # RL's own share: its base (the SFT checkpoint) on the same held-out tasks, paired
        e, rl = x.rl_effect, x.stages["rl"]
        assert e["base"] == rl["base"] != rl["checkpoint"]
        assert e["after"] == x.eval["overall"] and e["before"]["n"] == e["after"]["n"] > 0
        assert e["delta"] == pytest.approx(e["after"]["rate"] - e["before"]["rate"]) and 0 <= e["p"] <= 1
        assert e["rl_only"] - e["base_only"] == e["after"]["k"] - e["before"]["k"]
    runs = {(x["round"], x["stage"]): json.loads(x["config"])
            for x in Lake.open(lake).read("training_runs", columns=["round", "stage", "config"]).to_pylist()}  # fmt: skip
    assert [runs[(r, "rl")]["search"]["optim"]["lr"] for r in (1, 2)] == [1e-3, 3e-4]  # lr_by_round, as practised
    # the lake's folder removed and the demo run again: its landing area (the old run's round files in it) is moved
    # aside, and round 0 lands the cold start alone
    shutil.rmtree(lake)
    r = run_cmd(flywheel_env, [FLYWHEEL, "demo", "--quick", "--rounds", "1", "--lake", str(lake)])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "was the landing area of another lake: moved to" in r.stdout, r.stdout
    old = [p for p in tmp_path.iterdir() if p.name.startswith("lake-demo-landing.")]
    assert len(old) == 1 and any((old[0] / "rollouts").glob("rollouts-round1-*")), old
    again = read_rounds(Lake.open(lake))
    assert [x.round for x in again] == [0, 1] and again[0].n_new == recs[0].n_new
    assert Lake.open(lake).count("episodes") == sum(x.n_new for x in again)
    # practice alone from the lake's own round-0 checkpoint (bench.bench_practice.alone_from_lake): round 0's SFT
    # checkpoint and the pile version it trained on, a few seconds of the bench's two search cycles, held-out before
    # and after on the same tasks
    from bench.bench_practice import alone_from_lake
    from training.envs import heldout_tasks

    r0 = Lake.open(lake).read("training_runs").to_pylist()
    r0 = next(x for x in r0 if x["round"] == 0 and x["stage"] == "sft")
    got = alone_from_lake(str(lake), cycle_s=4.0, per_cell=1)
    assert got["checkpoint"] == again[0].stages["sft"]["checkpoint"] == r0["output_checkpoint"]
    assert got["pile_version"] == r0["pile_version"] and got["steps"] > 0
    n = len(heldout_tasks(1))
    assert got["before"].overall.n == got["after"].overall.n == n and got["test"]["p"] <= 1
    Lake.open(tmp_path / "empty-lake", create=True)
    with pytest.raises(ValueError, match="no round-0 checkpoint"):
        alone_from_lake(str(tmp_path / "empty-lake"), 1.0, 1)
