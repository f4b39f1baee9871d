"""Verdict functions as RL rewards, so rewards and routing never drift apart.

TRL-style reward functions are plain callables. Build one from validator names (or a source's routing policy):

    reward_fn = make_reward(["action_grammar", "on_screen", "env_verdict"])   # or policy_reward("rollout")
    rewards: list[float] = reward_fn(episodes)        # episodes: list[schemas.records.Episode] or a pyarrow.Table

Signature: `reward_fn(episodes, **kwargs) -> list[float]`, one reward per episode, in order. With mode="pass"
(default) the reward is V(s) in {0.0, 1.0}, the very AND that routing uses; with mode="score" it is the product of
the validators' scores (a validator without a score counts as 1 on pass and 0 on fail). `**kwargs` is accepted
and ignored so the function can be handed to trainers that pass prompts/completions. `reward_fn.__name__` names
the validators, which trainers use as the metric name. The verdict for each episode and validator is the one
`Validator.check_batch` gives (the routing path), never a re-implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from schemas.records import Episode, episodes_to_table
from validators.base import EpisodeBatch, Validator
from validators.registry import REGISTRY, ValidationContext, ValidatorSpec, load_policy

RewardFn = Callable[..., list[float]]


def _table(episodes: Sequence[Episode] | pa.Table) -> pa.Table:
    return episodes if isinstance(episodes, pa.Table) else episodes_to_table(list(episodes))


def reward_from(validators: Sequence[Validator], mode: str = "pass") -> RewardFn:
    if mode not in ("pass", "score"):
        raise ValueError(f"reward mode must be 'pass' or 'score', got {mode!r}")

    def reward(episodes: Sequence[Episode] | pa.Table, **_: Any) -> list[float]:
        table = _table(episodes)
        if table.num_rows == 0:
            return []
        batch = EpisodeBatch(table)
        total = np.ones(table.num_rows)
        for v in validators:
            res = v.check_batch(batch)
            passed = np.asarray(res.column("passed").to_numpy(zero_copy_only=False), dtype=bool)
            if mode == "pass":
                total *= passed
            else:
                score = np.asarray(res.column("score").to_numpy(zero_copy_only=False), dtype=float)
                total *= np.where(np.isnan(score), passed.astype(float), score)
        return [float(x) for x in total]

    reward.__name__ = "reward_" + "_".join(v.name for v in validators)
    return reward


def make_reward(
    names: Sequence[str], mode: str = "pass", context: ValidationContext | None = None, **params: dict[str, Any]
) -> RewardFn:
    """A reward function from validator names; `params` maps a name to its parameters, e.g. step_limit={"max_steps": 30}."""
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        raise ValueError(f"unknown validator(s) {', '.join(unknown)}; known: {', '.join(REGISTRY)}")
    return reward_from([REGISTRY[n](context=context, **params.get(n, {})) for n in names], mode)


def policy_reward(source: str = "rollout", mode: str = "pass", policy_path: str | None = None, context: ValidationContext | None = None,
                  exclude: Sequence[str] = ("dedup_exact", "dedup_near")) -> RewardFn:  # fmt: skip
    """The routing policy's V(s) for `source` as a reward (dedup excluded by default: a repeat of a good answer is
    still a good answer for RL, it is only not new data)."""
    specs: list[ValidatorSpec] = [s for s in load_policy(policy_path).for_source(source) if s.name not in exclude]
    return reward_from([s.build(context) for s in specs], mode)
