"""Search with the verifier's outcome: solve a task by trying the screen's actions in copies of the environment.

Practice needs examples the policy does not already have. Sampling finds them only where the policy already puts
some probability (a 1-in-8 lucky click at 25-45% of its mistakes, docs/training.md "Practice"); a text screen's
whole action space is small and known (training/explore.py), and the sandbox can copy a state, so a breadth-first
search over distinct screens finds a shortest action sequence that the verifier passes. Only the outcome is used:
no demonstrator, no distance to the goal, no progress signal. What the search solves becomes fresh, verified
examples (training/search_practice.py imitates them): expert iteration with the environment as the expert's only source.
Runs in a worker process (`search_batch` is one picklable call) or in-process.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from training.explore import screen_actions
from training.rollout import TaskInfo


@dataclass(frozen=True)
class Solution:
    """A verified way through one task: the screens seen and the action taken at each."""

    observations: tuple[str, ...]
    actions: tuple[str, ...]


@dataclass(frozen=True)
class Searched:
    """One task's search: its solution (None: none within the node budget) and the actions tried."""

    solution: Solution | None
    nodes: int


def _key(env: Any, obs: str) -> Any:
    """A state's identity for the search: the world's own `state_key` (what the screen does not show, such as the
    buttons already pressed, included), or the screen's text where the world has none."""
    f = getattr(env, "state_key", None)
    return f(obs) if f is not None else obs


def _copier(env: Any) -> Any:
    """What makes copies of a state: the world's own `copier` (many copies from one snapshot), or its `clone`."""
    f = getattr(env, "copier", None)
    return f() if f is not None else env.clone


def solve(info: TaskInfo, max_nodes: int = 2000) -> Searched:
    """Breadth-first over distinct screens from the task's start; a node is one action tried in a copy of a state.
    The first action sequence whose episode ends with the verifier's pass is returned: a shortest one."""
    env = info.make_env()
    if getattr(env, "clone", None) is None:
        raise ValueError(f"task {info.task_id}: its environment cannot copy a state, so it cannot be searched")
    start = env.reset()
    queue: deque = deque([(env, start, ())])
    seen, nodes = {_key(env, start)}, 0
    while queue:
        state, obs, path = queue.popleft()
        if len(path) >= info.step_limit:
            continue
        copy_of = _copier(state)
        for action in screen_actions(obs, info.instruction):
            if nodes >= max_nodes:
                return Searched(None, nodes)
            nodes += 1
            copy = copy_of()
            nxt, done, _ = copy.step(action)
            steps = (*path, (obs, action))
            if done:
                if copy.verify()[0]:
                    return Searched(Solution(tuple(o for o, _ in steps), tuple(a for _, a in steps)), nodes)
                continue
            k = _key(copy, nxt)
            if k not in seen:
                seen.add(k)
                queue.append((copy, nxt, steps))
    return Searched(None, nodes)


def solution_row(info: TaskInfo, sol: Solution) -> dict[str, Any]:
    """The solution as an episode row (training.data.episode_examples renders it as the policy's prompts). The
    thought is left empty: the prompt format writes the action's own thought (the target's screen line)."""
    steps = [{"observation": o, "thought": "", "action": a} for o, a in zip(sol.observations, sol.actions)]
    return {"instruction": info.instruction, "steps": steps}


@dataclass(frozen=True)
class SearchJob:
    """One batch of search for a worker: the backend's name and its own task objects (TaskInfos do not pickle)."""

    env: str
    env_tasks: tuple[str, ...] | None
    payloads: list[Any]
    max_nodes: int


@dataclass(frozen=True)
class SearchBatch:
    """What a worker sends back: one Searched per task, in order, and the seconds it took."""

    results: list[Searched]
    seconds: float


def search_batch(job: SearchJob) -> SearchBatch:
    """Run in a worker (or in-process): solve each of the job's tasks."""
    from training.workers import task_infos

    return search_infos(task_infos(job.env, job.env_tasks, job.payloads), job.max_nodes)


def search_infos(infos: Sequence[TaskInfo], max_nodes: int) -> SearchBatch:
    """In-process search of TaskInfos (their environments need not pickle)."""
    t0 = time.perf_counter()
    return SearchBatch([solve(i, max_nodes) for i in infos], time.perf_counter() - t0)
