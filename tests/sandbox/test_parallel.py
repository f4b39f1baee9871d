"""Many environments: a vectorised loop in one process, and attempts across 'spawn' processes."""

from __future__ import annotations

from sandbox.demonstrators import Expert, Novice
from sandbox.env import Env
from sandbox.heldout import training_tasks
from sandbox.parallel import VecEnv, run_many
from sandbox.rollout import run_attempt


def test_vecenv_steps_like_independent_envs() -> None:
    tasks = training_tasks(21, seed=3)
    vec = VecEnv(tasks)
    experts = [Expert() for _ in tasks]
    for t, ex in zip(tasks, experts):
        ex.reset(t)
    obs0 = vec.reset()
    assert [o.text for o in obs0] == [Env(t).observation().text for t in tasks]
    while not all(vec.done):
        acts = [None if e.done else ex.act(e).action for e, ex in zip(vec.envs, experts)]
        res = vec.step(acts)
        assert all((r is None) == (a is None) for r, a in zip(res, acts))
    assert all(v.passed for v in vec.verify())
    # a finished env ignores further actions; a bad action in one env does not disturb the others
    assert vec.step(["wait()"] * len(tasks)) == [None] * len(tasks)
    vec2 = VecEnv(tasks[:3])
    r = vec2.step(["garbage", "wait()", "wait()"])
    assert r[0].done and r[0].reward == -1.0 and not r[1].done and not r[2].done


def test_run_many_across_spawned_processes_matches_in_process() -> None:
    tasks = training_tasks(12, seed=5)
    local = run_many(tasks, Novice, attempts=2, processes=1)
    remote = run_many(tasks, Novice, attempts=2, processes=2, chunk=6)
    assert len(remote) == 24
    key = lambda a: (a.task.task_id, a.attempt, [(s.thought, s.action) for s in a.steps], a.verdict)
    assert [key(a) for a in remote] == [key(a) for a in local]
    assert [key(a) for a in local[:2]] == [key(run_attempt(tasks[0], Novice(), k)) for k in range(2)]
