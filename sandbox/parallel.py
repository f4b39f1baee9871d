"""Many environments at once: a vectorised loop in one process, or attempts spread over processes.

`VecEnv` steps N environments with N actions per call, the shape a batched policy (one forward pass for all
prompts) wants. `run_many` runs whole attempts of a picklable policy factory over a process pool started with
the 'spawn' method (never fork: a process that has used deltalake must not fork, see STACK.md); with
processes=1 it runs in the calling process.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

from sandbox.env import Env, Observation, StepResult
from sandbox.rollout import Attempt, Policy, run_attempt
from sandbox.tasks import Task
from schemas.records import Verdict


class VecEnv:
    """N independent environments stepped together. Finished environments ignore further actions."""

    def __init__(self, tasks: Sequence[Task], screenshots: bool = False) -> None:
        self.envs = [Env(t, screenshots=screenshots) for t in tasks]

    def __len__(self) -> int:
        return len(self.envs)

    def reset(self) -> list[Observation]:
        return [e.reset() for e in self.envs]

    @property
    def done(self) -> list[bool]:
        return [e.done for e in self.envs]

    def observations(self) -> list[Observation]:
        return [e.observation() for e in self.envs]

    def step(self, actions: Sequence[str | None]) -> list[StepResult | None]:
        """One action per environment (None to skip one); finished ones return None."""
        if len(actions) != len(self.envs):
            raise ValueError(f"got {len(actions)} actions for {len(self.envs)} environments")
        return [None if (a is None or e.done) else e.step(a) for e, a in zip(self.envs, actions)]

    def verify(self) -> list[Verdict]:
        return [e.verify() for e in self.envs]


def _work(args: tuple[Callable[[], Policy], list[tuple[Task, int]], bool]) -> list[Attempt]:
    factory, jobs, shots = args
    policy = factory()
    return [run_attempt(t, policy, k, shots) for t, k in jobs]


def run_many(
    tasks: Sequence[Task],
    policy_factory: Callable[[], Policy],
    attempts: int = 1,
    processes: int = 1,
    screenshots: bool = False,
    chunk: int = 32,
) -> list[Attempt]:
    """Attempts 0..attempts-1 of every task, in task order. `policy_factory` must be picklable (a class or a
    functools.partial of one) when processes > 1."""
    jobs = [(t, k) for t in tasks for k in range(attempts)]
    if processes <= 1:
        return _work((policy_factory, jobs, screenshots))
    parts = [(policy_factory, jobs[i : i + chunk], screenshots) for i in range(0, len(jobs), chunk)]
    out: list[Attempt] = []
    with ProcessPoolExecutor(max_workers=processes, mp_context=mp.get_context("spawn")) as pool:
        for res in pool.map(_work, parts):
            out.extend(res)
    return out
