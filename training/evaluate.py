"""Held-out evaluation: the pass rate on the sandbox's held-out tasks, with a 95% Wilson interval, overall, per
difficulty level and per family, written to the round's row (eval_* columns and the breakdown's "eval" entry).

Greedy decoding by default, so the number measures the policy, not the sampler's luck; the interval is over tasks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from core.stats import wilson
from schemas.prompt import PromptConfig
from training.config import EvalConfig
from training.model import Policy
from training.procs import split_episodes
from training.rollout import TaskInfo, Trajectory


@dataclass(frozen=True)
class Rate:
    n: int
    k: int
    rate: float
    lo: float
    hi: float

    @classmethod
    def of(cls, outcomes: Sequence[bool]) -> Rate:
        n, k = len(outcomes), int(sum(outcomes))
        lo, hi = wilson(k, n)
        return cls(n, k, k / n if n else 0.0, lo, hi)


@dataclass(frozen=True)
class EvalResult:
    policy_version: str
    overall: Rate
    by_level: dict[int, Rate]
    by_family: dict[str, Rate]
    by_cell: dict[str, Rate]  # "family/Llevel"
    steps: int
    wall_s: float
    #: Every task's outcome, in task order: two arms evaluated on the same tasks are compared pairwise with these.
    passed: tuple[bool, ...] = ()

    def breakdown(self) -> dict:
        return {
            "policy_version": self.policy_version,
            "overall": asdict(self.overall),
            "by_level": {str(k): asdict(v) for k, v in sorted(self.by_level.items())},
            "by_family": {k: asdict(v) for k, v in sorted(self.by_family.items())},
            "by_cell": {k: asdict(v) for k, v in sorted(self.by_cell.items())},
        }


def summarize(trajs: Sequence[Trajectory], policy_version: str, wall_s: float = 0.0) -> EvalResult:
    def group(key: Callable[[Trajectory], object]) -> dict:
        g: dict = {}
        for t in trajs:
            g.setdefault(key(t), []).append(t.passed)
        return {k: Rate.of(v) for k, v in g.items()}

    return EvalResult(
        policy_version,
        Rate.of([t.passed for t in trajs]),
        group(lambda t: t.task.level),
        group(lambda t: t.task.family),
        group(lambda t: f"{t.task.family}/L{t.task.level}"),
        sum(len(t.steps) for t in trajs),
        wall_s,
        tuple(t.passed for t in trajs),
    )


def evaluate(
    policy: Policy,
    tasks: Sequence[TaskInfo],
    cfg: EvalConfig = EvalConfig(),
    prompt_cfg: PromptConfig = PromptConfig(),
    on_step: Callable[[int], None] | None = None,
) -> EvalResult:
    t0 = time.perf_counter()
    kw = {"attempts": 1, "temperature": cfg.temperature, "max_new_tokens": cfg.max_new_tokens, "prompt_cfg": prompt_cfg}
    trajs = split_episodes(policy, tasks, cfg.processes, seed=cfg.seed, on_step=on_step, **kw)
    return summarize(trajs, policy.version, time.perf_counter() - t0)


def record_eval(lake, round: int, result: EvalResult) -> dict:  # noqa: ANN001
    """Write the eval_* columns and the breakdown's "eval" entry of the round's row (other columns untouched)."""
    from validators.rounds import update_round

    o = result.overall
    return update_round(
        lake,
        round,
        eval_n=o.n,
        eval_pass_rate=o.rate,
        eval_pass_rate_lo=o.lo,
        eval_pass_rate_hi=o.hi,
        policy_version=result.policy_version,
        breakdown={"eval": result.breakdown()},
    )
