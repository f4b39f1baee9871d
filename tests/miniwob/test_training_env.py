"""MiniWoB++ as the flywheel's training environment (training/envs_miniwob.py) and `flywheel demo --env miniwob`."""

from __future__ import annotations

import json
import os
import re
import signal
from collections import Counter
from collections.abc import Iterator

import psutil
import pytest

from tests.miniwob.conftest import _need_chromium

TASKS = ["click-button", "click-link", "enter-text"]


@pytest.fixture(scope="module")
def backend() -> Iterator:
    from training.envs_miniwob import MiniwobBackend

    _need_chromium()
    b = MiniwobBackend(["click-button"], pool_size=2)
    yield b
    b.close()


def _kill_chromium(env) -> None:
    """SIGKILL the Chromium (chromedriver stays: it answers with errors), as test_pool.py does."""
    os.kill(env.browser.chrome_pid, signal.SIGKILL)


def _live_chromium(p: psutil.Process) -> bool:
    try:
        return "chrom" in p.name() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _target_click(instruction: str, text: str) -> str:
    name = re.search(r'"([^"]+)"', instruction).group(1)
    x, y = re.search(rf'^button "{re.escape(name)}" \((\d+),(\d+)\)$', text, re.M).groups()
    return f"click(point='<point>{x} {y}</point>')"


def test_the_environment_protocol_in_a_pool_browser_and_a_crash_mid_episode_is_a_failed_attempt(backend) -> None:
    infos = backend.training_tasks(2, seed=5)
    assert [i.app for i in infos] == ["miniwob"] * 2 and infos[0].max_concurrent == backend.pool.size == 2
    crashes0, restarts0 = backend.pool.crashes, backend.pool.restarts

    env = infos[0].make_env()
    text = env.reset()
    assert text.startswith('window "click-button" 160x210') and '\nbutton "' in text
    click = _target_click(infos[0].instruction, text)  # the instruction was read before the episode (describe)
    _kill_chromium(env.env)
    obs, done, term = env.step(click)
    assert done and term == "finished" and env.verify() == (False, "env_error")
    env.close()
    assert backend.pool.crashes == crashes0 + 1
    assert len(backend.render_steps(infos[0], [click])) == 1  # the screen it saw before the crash was kept

    again = infos[1].make_env()  # takes the freed slot: its browser is restarted for the next attempt
    text = again.reset()
    obs, done, term = again.step(_target_click(infos[1].instruction, text))
    assert done and again.verify() == (True, "ok")
    again.close()
    assert backend.pool.restarts == restarts0 + 1 and sorted(backend._free) == [0, 1]


def test_rejection_sampling_in_the_browser_pool_keeps_every_attempt(backend, lake, tmp_path) -> None:
    """A learned (here untrained) policy's attempts run at most pool.size at a time, and all land, with screenshots,
    including the one whose browser was dead before it started."""
    from training.config import ModelConfig, SamplingConfig
    from training.model import Policy
    from training.sampling import rejection_sample

    infos = backend.training_tasks(3, seed=9)
    envs = [i.make_env() for i in infos[:2]]
    texts = [i.instruction for i in infos] + [e.reset() for e in envs]
    for e in envs:
        e.close()
    policy = Policy.create(texts * 20, ModelConfig(vocab_size=400, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                                   num_attention_heads=2, max_number=320))  # fmt: skip
    policy.version = "tiny"
    _kill_chromium(backend.pool.env(1))  # slot 1's browser dies between episodes
    res = rejection_sample(
        lake, 1, policy, infos, tmp_path, SamplingConfig(attempts=2, max_new_tokens=12), render=backend.render_steps
    )
    assert res.attempts == 6 and res.episodes_added == 6 and sorted(backend._free) == [0, 1]
    eps = lake.read("episodes").to_pylist()
    assert {e["app"] for e in eps} == {"miniwob"} and {e["env_passed"] for e in eps} == {False}
    assert all(s["screenshot_uri"] for e in eps for s in e["steps"])
    first = [e["steps"][0]["observation"] for e in eps]
    assert sum("the browser died" in o for o in first) == 1  # recorded as a failed attempt, not lost
    assert (
        sum(o.startswith('window "click-button" 160x210\n') for o in first) == 5
    )  # the others: the restarted browser too


@pytest.mark.slow
def test_flywheel_demo_on_miniwob_runs_every_stage(tmp_path, prefect_harness) -> None:
    from typer.testing import CliRunner

    from flywheel.cli import app
    from storage import Lake

    _need_chromium()
    lake_dir = tmp_path / "lake"
    before = {p.pid for p in psutil.Process().children(recursive=True)}  # other tests' pool may be running
    r = CliRunner().invoke(
        app,
        ["demo", "--env", "miniwob", "--tasks", ",".join(TASKS), "--quick", "--rounds", "1", "--lake", str(lake_dir)],
    )
    assert r.exit_code == 0, r.output
    assert "held-out success per task" in r.output and all(t in r.output for t in TASKS)
    lake = Lake.open(lake_dir)
    rows = sorted(lake.read("rounds").to_pylist(), key=lambda x: x["round"])
    assert [x["round"] for x in rows] == [0, 1]
    for x in rows:
        stages = {"intake", "route", "sft", "evaluate", "summary"} | (
            {"sample", "annotate", "rl"} if x["round"] else set()
        )
        assert set(json.loads(x["stage_status"])) == stages
        bd = json.loads(x["breakdown"])
        assert set(bd["eval"]["by_family"]) == set(TASKS) and x["eval_n"] == 2 * len(TASKS)
        assert bd["env"]["name"] == "miniwob" and bd["env"]["net_attempts"] == 0  # nothing left 127.0.0.1
    assert {k: v["rate"] for k, v in json.loads(rows[0]["breakdown"])["demonstrator_eval"].items()} == dict.fromkeys(
        TASKS, 1.0
    )
    runs = {(t["round"], t["stage"]) for t in lake.read("training_runs").to_pylist()}
    assert runs >= {(0, "sft"), (1, "sft"), (1, "rl")}
    eps = lake.read("episodes").to_pylist()
    assert {e["source"] for e in eps if e["round"] == 0} == {"rollout", "interactive", "think_aloud"}
    assert {e["app"] for e in eps} == {"miniwob"} and {
        e["task_family"] for e in eps if e["source"] != "think_aloud"
    } == set(TASKS)
    sampled = [e for e in eps if e["round"] == 1 and e["source"] == "rollout"]
    assert len(sampled) == 14 and all(s["screenshot_uri"] and s["token_logprobs"] for e in sampled for s in e["steps"])
    annotated = [
        e for e in eps if e["round"] == 1 and e["source"] == "interactive"
    ]  # the model proposed, the expert decided
    assert len(annotated) == 4 and all(
        s["decision"] in ("accepted", "overridden") and s["proposals"] for e in annotated for s in e["steps"]
    )
    split = json.loads(rows[1]["breakdown"])["annotation"]["by_family"]  # effort split by round 0's per-task failures
    assert sum(split.values()) == 4 and Counter(e["task_family"] for e in annotated) == split
    assert any(e["outcome"] != "unreadable_action" for e in sampled)  # the learned policy acted in the browser
    # all closed: the browsers were quit, and a loaded machine may take a moment to reap chromium's helpers (CI
    # once caught two of them still exiting), so wait for them, but not for long
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and _live_chromium(p)]
    _, alive = psutil.wait_procs(left, timeout=20)
    assert not [p for p in alive if _live_chromium(p)]
