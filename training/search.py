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

import heapq
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from training.explore import appended, screen_actions, typed_texts
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


def _start(info: TaskInfo) -> tuple[Any, str, dict[str, str]]:
    """The task's environment, its first screen, and its type actions -> the text each types (for `_try`)."""
    env = info.make_env()
    if getattr(env, "clone", None) is None:
        raise ValueError(f"task {info.task_id}: its environment cannot copy a state, so it cannot be searched")
    return env, env.reset(), typed_texts(info.instruction)


def _try(
    copy_of: Callable[[], Any], obs: str, path: tuple, action: str, seen: set, typed: dict[str, str]
) -> tuple[Solution | None, tuple | None]:
    """One node: `action` in a fresh copy of the state. A pass is a solution; an unseen state is a child
    (copy, screen, path) to queue; a failed end, a seen state or text typed onto a field's old value
    (`explore.appended`; `typed`: the task's type actions -> their text) is neither."""
    copy = copy_of()
    nxt, done, _ = copy.step(action)
    steps = (*path, (obs, action))
    if done:
        return (Solution(tuple(o for o, _ in steps), tuple(a for _, a in steps)) if copy.verify()[0] else None), None
    if action in typed and appended(nxt, typed[action]):
        return None, None
    k = _key(copy, nxt)
    if k in seen:
        return None, None
    seen.add(k)
    return None, (copy, nxt, steps)


def solve(info: TaskInfo, max_nodes: int = 2000) -> Searched:
    """Breadth-first over distinct screens from the task's start; a node is one action tried in a copy of a state.
    The first action sequence whose episode ends with the verifier's pass is returned: a shortest one."""
    env, start, typed = _start(info)
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
            sol, child = _try(copy_of, obs, path, action, seen, typed)
            if sol is not None:
                return Searched(sol, nodes)
            if child is not None:
                queue.append(child)
    return Searched(None, nodes)


#: log p(action | state) for each of the screen's actions: (instruction, turns so far, screen, actions) -> log-probs
Prior = Callable[[str, Sequence[Any], str, Sequence[str]], Sequence[float]]


def guided_solve(info: TaskInfo, prior: Prior, max_states: int = 100) -> Searched:
    """Best-first over distinct screens, the most likely path under `prior` first (training/prior.py: the learner's
    own policy): each expanded state costs one call of the prior and tries every action the screen offers in a
    copy, so a pass one action away is never missed. Still the outcome alone decides; the prior only orders the
    work. The first path whose episode the verifier passes is returned (not always a shortest one)."""
    from schemas.prompt import Turn

    env, start, typed = _start(info)
    heap: list = [(0.0, 0, env, start, ())]
    seen, nodes, expanded, tie = {_key(env, start)}, 0, 0, 1
    while heap and expanded < max_states:
        cost, _, state, obs, path = heapq.heappop(heap)
        if len(path) >= info.step_limit:
            continue
        expanded += 1
        actions = screen_actions(obs, info.instruction)
        logp = prior(info.instruction, [Turn(o, "", a) for o, a in path], obs, actions)
        copy_of = _copier(state)
        for action, lp in zip(actions, logp):
            nodes += 1
            sol, child = _try(copy_of, obs, path, action, seen, typed)
            if sol is not None:
                return Searched(sol, nodes)
            if child is not None:
                heapq.heappush(heap, (cost - lp, tie, *child))
                tie += 1
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
    #: Per task: searched best-first under the learner's prior (`guided_solve`) instead of breadth-first; those
    #: tasks need the policy (a training.procs.PolicyBlob, loaded once a worker) and the learner's weights now.
    guided: tuple[bool, ...] = ()
    guide_states: int = 100
    policy: Any = None
    weights: dict[str, Any] | None = None
    prompt_cfg: Any = None


@dataclass(frozen=True)
class SearchBatch:
    """What a worker sends back: one Searched per task, in order, and the seconds it took."""

    results: list[Searched]
    seconds: float


def search_batch(job: SearchJob) -> SearchBatch:
    """Run in a worker (or in-process): solve each of the job's tasks."""
    from training.workers import task_infos

    prior = None
    if any(job.guided):
        from training.prior import ActionPrior
        from training.procs import policy_with

        pol = policy_with(job.policy, job.weights or {})
        prior = ActionPrior(pol.model, pol.tokenizer, job.prompt_cfg)
    infos = task_infos(job.env, job.env_tasks, job.payloads)
    return search_infos(infos, job.max_nodes, prior, job.guided, job.guide_states)


def search_infos(
    infos: Sequence[TaskInfo],
    max_nodes: int,
    prior: Prior | None = None,
    guided: Sequence[bool] = (),
    guide_states: int = 100,
) -> SearchBatch:
    """In-process search of TaskInfos (their environments need not pickle); the `guided` ones best-first under
    `prior`."""
    t0 = time.perf_counter()
    flags = list(guided) + [False] * (len(infos) - len(guided))
    out = [guided_solve(i, prior, guide_states) if g and prior else solve(i, max_nodes) for i, g in zip(infos, flags)]
    return SearchBatch(out, time.perf_counter() - t0)
