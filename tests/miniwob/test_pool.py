"""The browser pool: scripted rollouts over several tasks, crash recovery, batched policies, training's protocol."""

from __future__ import annotations

import os
import re
import signal

import psutil
import pytest

from sandbox.demonstrators import Decision
from sandbox.miniwob import BrowserPool, Expert, PolicyStep, TaskSpec, training_specs

EIGHT = [
    "click-button",
    "click-link",
    "enter-text",
    "click-checkboxes",
    "click-dialog",
    "login-user",
    "use-autocomplete",
    "click-tab",
]


def test_expert_passes_eight_tasks_in_the_pool_without_leaving_127_0_0_1(pool) -> None:
    specs = training_specs(16, seed=3, names=EIGHT)
    before = len(pool.net_attempts)
    attempts = pool.run(specs, Expert, attempts=1, progress=False)
    assert [a.task.task_id for a in attempts] == [s.task_id for s in specs]
    failed = [(a.task.task_id, a.verdict.reason) for a in attempts if not a.passed]
    assert not failed
    for a in attempts:
        assert a.reward == 1.0 and a.meta["raw_reward"] > 0 and a.steps and all(s.thought for s in a.steps)
        assert all(s.screenshot for s in a.steps) and a.steps[0].observation.startswith(f'window "{a.task.family}"')
    assert pool.net_attempts[before:] == []  # nothing reached the refusing proxy ...
    assert pool.outside_connections() == []  # ... and no browser socket is connected off the machine


class KillsItsBrowser(Expert):
    """The expert, except that on the second step of attempt 0 of one task it SIGKILLs the Chromium it plays in."""

    victim = "login-user"

    def act(self, env) -> Decision:
        if self.task.family == self.victim and self.attempt == 0 and env.n_steps == 1:
            os.kill(env.browser.chrome_pid, signal.SIGKILL)
            psutil.Process(env.browser.driver_pid)  # chromedriver is still there; Chromium is gone
        return super().act(env)


def test_a_browser_killed_mid_episode_is_a_recorded_failed_attempt_and_the_pool_recovers() -> None:
    specs = [
        TaskSpec("click-button", 1),
        TaskSpec("login-user", 5),
        TaskSpec("enter-text", 2),
        TaskSpec("click-tab", 3),
    ]
    with BrowserPool(size=2) as p:
        attempts = p.run(specs, KillsItsBrowser, attempts=2, progress=False)
        pids = p.pids()
        assert p.restarts == 1 and p.crashes == 1 and p.net_attempts == []
    assert len(attempts) == 8  # nothing lost
    crashed = [a for a in attempts if not a.passed]
    assert [(a.task.task_id, a.attempt) for a in crashed] == [("miniwob/login-user/s5", 0)]
    c = crashed[0]
    assert (
        c.outcome == "env_error" and c.verdict.reason == "env_error" and "browser died" in c.verdict.details["message"]
    )
    assert len(c.steps) == 2 and c.steps[-1].effect.startswith("browser died")  # the steps before the crash are kept
    assert all(a.passed for a in attempts if a is not c)  # including the next attempts in the restarted browser
    assert not [
        q for q in pids if psutil.pid_exists(q) and psutil.Process(q).status() != psutil.STATUS_ZOMBIE
    ]  # closed


def _text_policy(step: PolicyStep) -> tuple[str, str, dict]:
    """A policy that reads only the text observation (the model's view): click the button the instruction names."""
    target = re.search(r'"([^"]+)"', step.task.instruction).group(1)
    m = re.search(rf'^button "{re.escape(target)}" \((\d+),(\d+)\)$', step.observation, re.M)
    x, y = (m.group(1), m.group(2)) if m else ("5", "5")
    return (
        f"The '{target}' button is at {x},{y}.",
        f"click(point='<point>{x} {y}</point>')",
        {"seen": len(step.history)},
    )


def test_lockstep_batched_policy_reads_text_and_keeps_extras(pool) -> None:
    calls: list[int] = []

    def decide(batch: list[PolicyStep]) -> list[tuple]:
        calls.append(len(batch))
        return [_text_policy(s) for s in batch]

    specs = [TaskSpec("click-button", s) for s in range(20, 26)]
    attempts = pool.run_lockstep(specs, decide, attempts=2, policy_name="text-policy", progress=False)
    assert len(attempts) == 12 and all(a.passed for a in attempts)
    assert [(a.task.seed, a.attempt) for a in attempts] == [(s.seed, k) for s in specs for k in range(2)]
    assert max(calls) == pool.size and sum(calls) == 12  # one call per tick, every browser busy
    assert all(a.meta["step_extras"] == [{"seen": 0}] and a.policy == "text-policy" for a in attempts)
    bad = pool.run_policy(
        [TaskSpec("click-button", 7)], lambda s: (_ for _ in ()).throw(RuntimeError("boom")), progress=False
    )
    assert bad[0].verdict.reason == "policy_error" and "boom" in bad[0].verdict.details["message"]


def test_training_environment_protocol_over_pool_slots(pool) -> None:
    make = pool.env_factory(TaskSpec("click-button", 9))
    envs = [make() for _ in range(pool.size)]
    texts = [e.reset() for e in envs]
    assert all(t.startswith('window "click-button"') for t in texts)
    target = re.search(r'"([^"]+)"', envs[0].env.utterance).group(1)
    x, y = re.search(rf'^button "{re.escape(target)}" \((\d+),(\d+)\)$', texts[0], re.M).groups()
    obs, done, term = envs[0].step(f"click(point='<point>{x} {y}</point>')")
    assert done and term == "finished" and envs[0].verify() == (True, "ok")
    assert envs[1].step("hotkey(key='shift')")[1] is False
    extra = make()  # a third trajectory takes slot 0 again ...
    extra.reset()
    envs[1].step("wait()")  # ... slot 1 is untouched
    with pytest.raises(RuntimeError, match="reused"):
        envs[0].step("wait()")


_STARTS_ONE_BROWSER = """
import json, sys, time
from sandbox.miniwob.browser import start_browser
b = start_browser("click-button")
print(json.dumps(b.pids), flush=True)
time.sleep(120)
"""


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_browsers_of_a_process_killed_with_9_are_reaped_when_the_next_browser_starts() -> None:
    """kill -9 of a round (which `flywheel round resume` finishes) leaves its chromedriver and Chromium running for
    good, parented to init; the next browser to start kills them, and never a live process's browsers."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from sandbox.miniwob.browser import reap_orphans, start_browser
    from tests.miniwob.conftest import _need_chromium

    _need_chromium()
    repo = Path(__file__).resolve().parents[2]
    child = subprocess.Popen([sys.executable, "-c", _STARTS_ONE_BROWSER], cwd=repo, stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(child.stdout.readline())
        live = start_browser("click-button")  # a browser of this (live) process, started after the child's
        try:
            reap_orphans()  # the child is alive: its browser is not an orphan (others' may be: tests run in parallel)
            # chromedriver and the main Chromium stay; helpers (a spare renderer, a zygote's child) may end on their own
            assert all(_running(p) for p in pids[:2])
            child.kill()
            child.wait()
            assert any(_running(p) for p in pids)  # what the reaper is for: they outlive their killed owner
            again = start_browser("click-button")  # the next start reaps them
            again.quit()
            assert not any(_running(p) for p in pids)
            assert all(_running(p) for p in live.pids[:1])  # this process's own browser is untouched
        finally:
            live.quit()
    finally:
        child.kill()
        child.wait()
