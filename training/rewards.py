"""The RL reward: the validators' own verdict functions (validators/rewards.py) applied to the policy's attempts.

Routing and RL therefore agree on what a pass is. RL uses the outcome-relevant part of the rollout policy: the
action grammar, on-screen coordinates, the environment's verdict and the reference answer; not the screenshot
check (RL attempts are not rendered) nor dedup (a repeat of a good answer is still a good answer for RL).
"""

from __future__ import annotations

from collections.abc import Sequence

from training.convert import to_episode
from training.rl import RewardFn
from training.rollout import Trajectory

RL_VALIDATORS = ("action_grammar", "on_screen", "env_verdict", "reference_answer")


def verifier_reward(names: Sequence[str] = RL_VALIDATORS, mode: str = "pass") -> RewardFn:
    from validators.rewards import make_reward

    fn = make_reward(list(names), mode=mode)

    def reward(trajs: Sequence[Trajectory]) -> list[float]:
        return fn([to_episode(t) for t in trajs])

    reward.__name__ = fn.__name__
    return reward
