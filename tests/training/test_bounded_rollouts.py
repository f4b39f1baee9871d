"""run_episodes over a backend that can hold only a few environments at once (a browser pool: TaskInfo.max_concurrent)."""

from __future__ import annotations

from dataclasses import replace

from tests.training.fakes import ButtonEnv, tasks
from training.rollout import run_episodes


class Counted(ButtonEnv):
    """The stand-in env, counting how many are open (reset, not yet closed) at once."""

    open_now = 0
    most = 0
    closed = 0

    def reset(self) -> str:
        Counted.open_now += 1
        Counted.most = max(Counted.most, Counted.open_now)
        return super().reset()

    def close(self) -> None:
        Counted.open_now -= 1
        Counted.closed += 1


def test_a_bounded_backend_runs_at_most_max_concurrent_and_closes_every_env(tiny_policy) -> None:
    ts = [replace(t, make_env=lambda s=i: Counted(s), max_concurrent=2) for i, t in enumerate(tasks(5, 3))]
    trajs = run_episodes(tiny_policy.model, tiny_policy.tokenizer, ts, attempts=2, max_new_tokens=16, temperature=1.0)
    assert [(t.task.task_id, t.attempt) for t in trajs] == [(t.task_id, a) for t in ts for a in range(2)]
    assert all(t.steps and t.steps[0].observation.startswith('window "App"') for t in trajs)  # every attempt started
    assert Counted.most == 2 and Counted.closed == 10 and Counted.open_now == 0
