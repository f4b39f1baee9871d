"""The sandbox behind training's Environment protocol: text observations in, action strings out, a verdict.

The one place that knows the sandbox's API, so another backend (a browser benchmark) only needs its own adapter.
"""

from __future__ import annotations

from collections.abc import Sequence

from training.rollout import TaskInfo

#: Sandbox outcome -> rollout termination (a task that reached its terminal state is a finished episode).
_TERMINATION = {"finished": "finished", "ended": "finished", "step_limit": "step_limit", "unreadable_action": "unreadable_action"}


class SandboxEnv:
    """training.rollout.Environment over sandbox.env.Env."""

    def __init__(self, task) -> None:  # noqa: ANN001 - sandbox.tasks.Task
        from sandbox.env import Env

        self.env = Env(task)

    def reset(self) -> str:
        return self.env.reset().text

    def step(self, action: str) -> tuple[str, bool, str | None]:
        r = self.env.step(action)
        term = _TERMINATION.get(r.info.get("outcome") or "", "finished") if r.done else None
        return r.observation.text, r.done, term

    def verify(self) -> tuple[bool, str]:
        v = self.env.verify()
        return bool(v.passed), v.reason


def task_info(task) -> TaskInfo:  # noqa: ANN001 - sandbox.tasks.Task
    return TaskInfo(
        task_id=task.task_id, instruction=task.instruction, family=task.family, level=task.level,
        step_limit=task.max_steps or 50, make_env=lambda: SandboxEnv(task), reference_answer=task.reference_answer,
        screen_width=task.width, screen_height=task.height, payload=task,
    )


def render_steps(info: TaskInfo, actions: list[str]) -> list[bytes]:
    """PNG screenshots of the screen before each action, by replaying the actions in a rendering env."""
    from sandbox.env import Env

    env = Env(info.payload, screenshots=True)  # type: ignore[arg-type]
    obs = env.reset()
    out = []
    for a in actions:
        out.append(obs.screenshot or env.screenshot())
        if env.done:
            continue
        obs = env.step(a).observation
    return out


def training_tasks(n: int, seed: int, families: Sequence[str] | None = None, levels: Sequence[int] | None = None) -> list[TaskInfo]:
    """n training tasks cycling over families and levels (never a held-out one: the sandbox guarantees it)."""
    from sandbox.tasks import training_tasks as gen

    return [task_info(t) for t in gen(n, seed, families, levels)]


def heldout_tasks(per_cell: int | None = None) -> list[TaskInfo]:
    from sandbox.heldout import heldout_tasks as gen

    return [task_info(t) for t in gen(per_cell)]
