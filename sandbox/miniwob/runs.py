"""The MiniWoB++ side of a flywheel round, as plain functions over a BrowserPool (flows and the demo call these).

    tasks = describe(pool, specs)                      # sandbox Tasks with their instructions (one reset each)
    demos = demonstrations(pool, names, per_task=8)    # cold-start data: expert + novice attempts
    atts = rollouts(pool, specs, decide, attempts=4)   # rejection sampling with a batched policy
    res = evaluate(pool, decide, names)                # held-out success per task

`decide(steps: list[PolicyStep]) -> [(thought, action[, extra]), ...]` is the batched policy (pool.run_lockstep);
a per-step callable `policy(step) -> action | (thought, action)` works through `per_step(policy)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sandbox.miniwob.demonstrators import Expert, Novice
from sandbox.miniwob.pool import BatchPolicy, BrowserPool
from sandbox.miniwob.tasks import (
    TASKS,
    TaskSpec,
    check_names,
    heldout_specs,
    heldout_utterance,
    to_task,
    training_specs,
)
from sandbox.rollout import Attempt
from sandbox.tasks import Task


def describe(pool: BrowserPool, specs: Sequence[TaskSpec]) -> list[Task]:
    """The sandbox Task of every spec (instruction = the utterance its seed generates), for callers that need
    the instruction before the episode (training.rollout.TaskInfo). Held-out seeds use the stored utterance."""
    need = [i for i, s in enumerate(specs) if heldout_utterance(s) is None]
    out: list[Task | None] = [
        to_task(s, heldout_utterance(s) or "", pool.scale) if heldout_utterance(s) else None for s in specs
    ]
    parts = [need[w :: pool.size] for w in range(pool.size)]

    def work(w: int) -> None:
        env = pool.env(w)
        for i in parts[w]:
            env.reset(specs[i])
            out[i] = env.task

    with ThreadPoolExecutor(pool.size) as ex:
        list(ex.map(work, [w for w in range(pool.size) if parts[w]]))
    return out  # type: ignore[return-value]


def demonstrations(
    pool: BrowserPool,
    names: Sequence[str] | None = None,
    per_task: int = 8,
    seed: int = 0,
    novice_share: float = 0.5,
    progress: bool = True,
) -> list[Attempt]:
    """Cold-start attempts on training seeds: the expert on the first part of each task's seeds, the novice
    (who fails sometimes, for the CT pile) on the rest."""
    names = check_names(list(names or TASKS))
    specs = training_specs(per_task * len(names), seed=seed, names=names)
    n_nov = int(round(len(specs) * novice_share))
    out = (
        pool.run(specs[n_nov:], Expert, progress=progress, label="MiniWoB++ expert demos") if n_nov < len(specs) else []
    )
    if n_nov:
        out = pool.run(specs[:n_nov], Novice, progress=progress, label="MiniWoB++ novice demos") + out
    return out


def rollouts(
    pool: BrowserPool,
    specs: Sequence[TaskSpec],
    decide: BatchPolicy,
    attempts: int = 1,
    policy_name: str = "model",
    progress: bool = True,
) -> list[Attempt]:
    """`attempts` attempts per spec with a batched policy (rejection sampling); (spec, attempt) order."""
    return pool.run_lockstep(specs, decide, attempts, policy_name=policy_name, progress=progress)


@dataclass(frozen=True)
class Evaluation:
    per_task: dict[str, tuple[int, int]]  # task -> (passed, episodes)
    attempts: list[Attempt]

    @property
    def rate(self) -> float:
        n = sum(t for _, t in self.per_task.values())
        return sum(p for p, _ in self.per_task.values()) / n if n else 0.0

    def task_rate(self, name: str) -> float:
        p, n = self.per_task[name]
        return p / n if n else 0.0


def evaluate(
    pool: BrowserPool,
    decide: BatchPolicy,
    names: Sequence[str] | None = None,
    per_task: int | None = None,
    policy_name: str = "model",
    progress: bool = True,
) -> Evaluation:
    """Success per task on the held-out seeds (one attempt each). Browser crashes count as failures."""
    specs = heldout_specs(names, per_task)
    atts = pool.run_lockstep(specs, decide, 1, policy_name=policy_name, progress=progress, label="MiniWoB++ held-out")
    per: dict[str, tuple[int, int]] = {}
    for a in atts:
        p, n = per.get(a.task.family, (0, 0))
        per[a.task.family] = (p + int(a.passed), n + 1)
    return Evaluation(per, atts)
